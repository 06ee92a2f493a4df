"""The GPU attention kernels compiled for a compile-only H100 (h100_target.py): prints, as
JSON, the custom calls of each compiled program: Triton's (by kernel: mha_forward,
mha_backward, mha_preprocess_backward) and cuDNN's (target and mask type).

    JAX_PLATFORMS=cpu JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1 \
        python tests/helpers/gpu_attention_compile.py

Programs: the tiny translation model's train step (bfloat16, attention_impl=auto, packed
rows, through jaxtrans.compiling.ahead_of_time as `python -m jaxtrans.compile` compiles
it, on one H100 and split over two; unpacked rows lower to the same program, one segment
per sentence pair), the
gradient of a BERT-style encoder layer with a key padding mask, and the forward and
backward of one attention through each cuDNN mask and each Triton shape (ragged
lengths, several tiles).
"""

import json
import re
import sys

import jax
import jax.numpy as jnp
from h100_target import h100_devices
from jax.sharding import SingleDeviceSharding
from tiny_configs import tiny_translation_config

from jaxtrans.compiling.compiled_programs import ProgramCost, program_cost
from jaxtrans.nn import BlockConfig, Encoder, gpu_attention
from jaxtrans.nn import attention_kernels as ak
from jaxtrans.nn.masks import (
    AttentionMask,
    key_padding_attention_mask,
    padding_attention_mask,
    segment_attention_mask,
)
from jaxtrans.tasks import compile_task
from jaxtrans.compiling import ahead_of_time

_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_MASK_TYPE = re.compile(r'"mask_type":\s*"(\w+)"')
_TRITON_KERNELS = ("mha_preprocess_backward", "mha_backward", "mha_forward")


def custom_calls(hlo: str) -> dict:
    """{"triton": {kernel name: count}, "cudnn": sorted [target mask_type, ...]} of a
    compiled program's HLO text."""
    triton: dict[str, int] = {}
    cudnn = []
    for line in hlo.splitlines():
        found = _TARGET.search(line)
        if not found or "custom-call(" not in line:
            continue
        if found.group(1) == "__gpu$xla.gpu.triton":
            name = next((n for n in _TRITON_KERNELS if n in line), "other")
            triton[name] = triton.get(name, 0) + 1
        elif found.group(1).startswith("__cudnn$fmha"):
            mask = _MASK_TYPE.search(line)
            cudnn.append(f"{found.group(1)} {mask.group(1) if mask else '?'}")
    return {"triton": triton, "cudnn": sorted(cudnn)}


def tiny_gpu_config(packed: bool, **overrides):
    return tiny_translation_config(
        10,
        **{
            "data.pack": packed,
            # XLA's GPU compiler finds no Triton GEMM tiles for some of the 32-wide tiny
            # model's matmuls ("Couldn't find output tile sizes"): 128 wide.
            "model.d_model": 128,
            "model.d_ff": 256,
            "model.dtype": "bfloat16",
            "model.attention_impl": "auto",
            "model.attention_dropout_rate": 0.0,
            **overrides,
        },
    )


def compiled_step(config, devices, compile_it: bool = True) -> tuple:
    """(CompiledTrainStep, lowered text, compiled HLO text or None) of ``config``'s step
    over ``devices``, compiled as jaxtrans.compiling.ahead_of_time compiles it."""
    texts = {}

    def compiling(program, argument_bytes):
        texts["lowered"] = program.as_text()
        if not compile_it:
            return ProgramCost(0, 0, 0.0, 0.0, None, ())
        compiled = program.compile()
        texts["hlo"] = compiled.as_text()
        return program_cost(compiled)

    ahead_of_time.compile_or_cost = compiling
    step = ahead_of_time.compile_train_step(config, compile_task, devices, 1)
    return step, texts["lowered"], texts.get("hlo")


def kernels_named(step, packed: bool) -> dict:
    chosen = ak.model_attention_kernels(step.task.model_config, "gpu", packed=packed)
    return {name: kernel for name, (kernel, _) in chosen.items()}


def train_step(devices) -> dict:
    """The tiny model's train step (bfloat16, auto) on packed rows: its kernels and custom
    calls, on one H100 and on two (rows split, the kernels in a shard_map); on unpacked
    rows, the kernels the start-up line names and whether the program is the same
    (translation batches carry segment ids either way)."""
    step, packed_text, hlo = compiled_step(tiny_gpu_config(True), devices[:1])
    found = {"packed": {"kernels": kernels_named(step, True), **custom_calls(hlo)}}
    step, unpacked_text, _ = compiled_step(tiny_gpu_config(False), devices[:1], False)
    found["unpacked"] = {"kernels": kernels_named(step, False)}
    found["same program"] = packed_text == unpacked_text
    step, lowered, hlo = compiled_step(tiny_gpu_config(True, **{"mesh.data": 2}), devices)
    found["two devices"] = {
        "mesh": dict(step.mesh.shape),
        "shard_map": "sdy.manual_computation" in lowered or "shard_map" in lowered,
        **custom_calls(hlo),
    }
    return found


def encoder_layer(device) -> dict:
    """Parameter gradients of a one-layer encoder (bfloat16, auto) over [2, 12] tokens with
    BERT's key padding mask: its kernel and custom calls."""
    config = BlockConfig(
        d_model=128, num_heads=2, d_ff=256, dtype="bfloat16", attention_impl="auto"
    ).replace(dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0)
    encoder = Encoder(config, num_layers=1)
    x = jnp.zeros((2, 12, 128), jnp.bfloat16)
    valid = jnp.arange(12)[None, :] < jnp.array([[7], [12]])
    params = jax.eval_shape(encoder.init, jax.random.key(0), x, key_padding_attention_mask(valid))

    def loss(params, x, valid):
        out = encoder.apply(params, x, key_padding_attention_mask(valid))
        return jnp.sum(out.astype(jnp.float32))

    shard = SingleDeviceSharding(device)
    arguments = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=shard), (params, x, valid)
    )
    with ak.target_platform("gpu"):
        lowered = jax.jit(jax.grad(loss)).lower(*arguments)
    kernel = ak.model_attention_kernels(config, "gpu")["encoder self"][0]
    return {"kernels": {"encoder self": kernel}, **custom_calls(lowered.compile().as_text())}


def one_attention(device, kernel: str, mask, q_len: int, kv_len: int, head_dim: int) -> dict:
    """Forward and backward of one attention [2, len, 2 heads, head_dim], bfloat16."""
    shard = SingleDeviceSharding(device)
    q = jax.ShapeDtypeStruct((2, q_len, 2, head_dim), jnp.bfloat16, sharding=shard)
    kv = jax.ShapeDtypeStruct((2, 2, kv_len, head_dim), jnp.bfloat16, sharding=shard)
    attend = {"cudnn": gpu_attention.cudnn_attention, "triton": gpu_attention.triton_attention}

    def loss(q, k, v):
        return jnp.sum(attend[kernel](q, k, v, mask).astype(jnp.float32))

    with ak.target_platform("gpu"):
        lowered = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, kv, kv)
    return custom_calls(lowered.compile().as_text())


def main() -> None:
    devices = h100_devices(2)
    device = devices[0]
    ids = jnp.array([[5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0], [5] * 12])
    segments = jnp.array([[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0], [1] * 5 + [2] * 7])
    long_segments = jnp.concatenate([segments, jnp.full((2, 188), 3)], axis=1)
    causal = AttentionMask(jnp.tril(jnp.ones((12, 12), bool))[None, None], causal=True)
    found = {
        "device": device.device_kind,
        "platform": device.platform,
        "train step": train_step(devices),
        "encoder layer": encoder_layer(device),
        "cudnn padding": one_attention(device, "cudnn", padding_attention_mask(ids), 12, 12, 64),
        "cudnn padding+causal": one_attention(
            device, "cudnn", padding_attention_mask(ids, causal=True), 12, 12, 64
        ),
        "cudnn causal": one_attention(device, "cudnn", causal, 12, 12, 64),
        "cudnn none": one_attention(device, "cudnn", AttentionMask(None), 12, 12, 64),
        "triton causal+segments 12x8": one_attention(
            device, "triton", segment_attention_mask(segments, causal=True), 12, 12, 8
        ),
        "triton segments 200x64": one_attention(
            device, "triton", segment_attention_mask(long_segments), 200, 200, 64
        ),
        "triton causal+segments 200x128": one_attention(
            device, "triton", segment_attention_mask(long_segments, causal=True), 200, 200, 128
        ),
    }
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
