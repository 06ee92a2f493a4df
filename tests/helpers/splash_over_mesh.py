"""Splash and Triton attention split over a mesh of 4 forced CPU devices (rows over data,
heads over tensor, in the Pallas interpreter) against the xla kernel: prints the largest
differences of the output and its gradients as JSON, for each kernel and mask kind.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/helpers/splash_over_mesh.py
"""

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtrans.nn import attention_kernels as ak
from jaxtrans.nn import attention_weights
from jaxtrans.nn import gpu_attention as ga
from jaxtrans.nn.masks import padding_attention_mask, segment_attention_mask
from jaxtrans.training import sharding

SEGMENTS = jnp.array(
    [[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0], [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]] * 2
)
SOURCE = jnp.array([[1, 1, 2, 2, 2, 2, 3, 3, 0, 0], [1, 1, 1, 2, 2, 2, 2, 2, 2, 0]] * 2)
IDS = jnp.array([[5, 6, 7, 8, 9, 4, 4, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 4, 4, 4, 4, 4, 4, 4]] * 2)
MASKS = {
    "causal+segments": (lambda: segment_attention_mask(SEGMENTS, causal=True), 12),
    "cross_segments": (lambda: segment_attention_mask(SEGMENTS, SOURCE), 10),
    "padding": (lambda: padding_attention_mask(IDS), 12),
    "segments": (lambda: segment_attention_mask(SEGMENTS), 12),
}


def xla_attention(q, k, v, mask):
    weights = attention_weights(q, k, mask.mask)
    return jnp.einsum("bnqk,bnkh->bqnh", weights.astype(v.dtype), v)


def splash_interpreted(q, k, v, mask):
    return ak.splash_attention(q, k, v, mask, interpret=True)


def triton_interpreted(q, k, v, mask):
    return ga.triton_attention(q, k, v, mask, interpret=True)


# Each kernel and the mask kinds it takes.
RUNS = [("splash", splash_interpreted, kind) for kind in ("causal+segments", "cross_segments")]
RUNS += [("splash", splash_interpreted, "padding")]
RUNS += [
    ("triton", triton_interpreted, "causal+segments"),
    ("triton", triton_interpreted, "segments"),
]


def main() -> None:
    mesh = sharding.make_mesh(ml_collections.ConfigDict({"data": 2, "fsdp": 1, "tensor": 2}))
    rows = NamedSharding(mesh, P(("data", "fsdp")))
    found = {}
    for name, attend, kind in RUNS:
        make_mask, kv_len = MASKS[kind]
        keys = jax.random.split(jax.random.key(0), 4)
        q = jax.random.normal(keys[0], (4, 12, 2, 8))
        k = jax.random.normal(keys[1], (4, 2, kv_len, 8))
        v = jax.random.normal(keys[2], (4, 2, kv_len, 8))
        cotangent = jax.random.normal(keys[3], (4, 12, 2, 8))

        def run(attend, q, k, v, cotangent, make_mask=make_mask):
            def loss(q, k, v):
                out = attend(q, k, v, make_mask())
                return jnp.sum(out * cotangent), out

            return jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)

        placed = [jax.device_put(x, rows) for x in (q, k, v, cotangent)]
        with sharding.axis_rules(mesh):
            kernel = jax.jit(lambda *a, run=run, attend=attend: run(attend, *a))
            hlo = kernel.lower(*placed).as_text()
            (dq, dk, dv), out = kernel(*placed)
        (xq, xk, xv), xout = run(xla_attention, q, k, v, cotangent)
        found[f"{name} {kind}"] = {
            "differences": [
                float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip((out, dq, dk, dv), (xout, xq, xk, xv), strict=True)
            ],
            "shard_map": "shard_map" in hlo or "sdy.manual_computation" in hlo,
        }
    print(json.dumps(found))


if __name__ == "__main__":
    main()
