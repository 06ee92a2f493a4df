"""Attention kernels: the choice per platform, dtype and mask, and splash (Pallas
interpreter on CPU) against the xla kernel. The GPU kernels: test_gpu_attention.py."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from paths import HELPERS, xla_flags

from jaxtrans.models import TransformerConfig
from jaxtrans.nn import BlockConfig, Encoder, MultiHeadAttention, attention_weights
from jaxtrans.nn import attention_kernels as ak
from jaxtrans.nn.attention import CACHE
from jaxtrans.nn.masks import (
    padding_attention_mask,
    segment_attention_mask,
)

STRUCTURED = ("none", "padding", "causal", "padding+causal", "segments", "causal+segments")
STRUCTURED += ("cross_segments",)
SEGMENTED = ("segments", "causal+segments", "cross_segments")
DTYPES = ("float32", "bfloat16", "float16")


# --- the choice -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ak.MASK_KINDS)
def test_auto_chooses_splash_on_tpu_triton_or_cudnn_on_gpu_and_xla_on_cpu(kind, dtype):
    assert ak.attention_kernel("auto", "cpu", dtype, kind) == ("xla", None)
    assert ak.attention_kernel("auto", "rocm", dtype, kind) == ("xla", None)
    tpu, tpu_reason = ak.attention_kernel("auto", "tpu", dtype, kind)
    if kind == "dense":
        assert (tpu, tpu_reason) == ("xla", "a mask without its structure")
    elif dtype == "float16":
        assert (tpu, tpu_reason) == ("xla", "splash takes float32/bfloat16, not float16")
    else:
        assert (tpu, tpu_reason) == ("splash", None)
    gpu, gpu_reason = ak.attention_kernel("auto", "gpu", dtype, kind)
    if kind == "dense":
        assert (gpu, gpu_reason) == ("xla", "a mask without its structure")
    elif kind == "cross_segments":
        assert (gpu, gpu_reason) == ("xla", ak.TRITON_CROSS_REASON)
    elif kind in SEGMENTED:  # packed self-attention, every float dtype
        assert (gpu, gpu_reason) == ("triton", None)
    elif dtype == "float32":
        assert gpu == "xla" and gpu_reason == (
            "cuDNN flash attention takes bfloat16/float16, not float32"
        )
    else:
        assert (gpu, gpu_reason) == ("cudnn", None)


def test_triton_takes_packed_self_attention_and_says_why_not_the_rest():
    for kind in ("segments", "causal+segments", "none", "causal"):
        for dtype in DTYPES:
            assert ak.attention_kernel("triton", "gpu", dtype, kind) == ("triton", None)
    for kind in ("padding", "padding+causal"):
        assert ak.attention_kernel("triton", "gpu", "bfloat16", kind) == (
            "xla",
            "Triton attention cannot let padding queries see keys (padding: cudnn)",
        )
    assert ak.attention_kernel("triton", "gpu", "bfloat16", "cross_segments") == (
        "xla",
        "packed cross-attention: Triton's mha takes one segment-id array for queries and "
        "keys, cuDNN none",
    )
    assert ak.attention_kernel("triton", "gpu", "bfloat16", "segments", head_dim=128) == (
        "triton",
        None,
    )
    assert ak.attention_kernel("triton", "gpu", "bfloat16", "segments", head_dim=256) == (
        "xla",
        "Triton attention needs head_dim <= 128, not 256",
    )
    assert ak.attention_kernel("triton", "gpu", "float64", "segments") == (
        "xla",
        "Triton attention takes float32/bfloat16/float16, not float64",
    )
    assert ak.attention_kernel("triton", "tpu", "bfloat16", "segments") == (
        "xla",
        "triton needs a GPU, this is tpu",
    )


@pytest.mark.parametrize("platform", ("cpu", "gpu", "tpu"))
@pytest.mark.parametrize("impl", ak.IMPLS)
def test_decoding_steps_and_attention_dropout_run_xla(impl, platform):
    for keywords in ({"decode": True}, {"dropout": True}):
        kernel, reason = ak.attention_kernel(impl, platform, "bfloat16", "padding", **keywords)
        assert kernel == "xla"
        if impl == "xla" or (impl == "auto" and platform == "cpu"):
            assert reason is None


def test_a_kernel_asked_for_off_its_platform_gives_way_to_xla_saying_why():
    assert ak.attention_kernel("splash", "cpu", "float32", "segments") == (
        "xla",
        "splash needs a TPU, this is cpu",
    )
    assert ak.attention_kernel("splash", "gpu", "bfloat16", "padding")[0] == "xla"
    assert ak.attention_kernel("cudnn", "tpu", "bfloat16", "padding") == (
        "xla",
        "cudnn needs a GPU, this is tpu",
    )
    assert ak.attention_kernel("cudnn", "gpu", "bfloat16", "padding+causal") == ("cudnn", None)
    assert ak.attention_kernel("cudnn", "gpu", "bfloat16", "padding", head_dim=160)[0] == "xla"
    assert ak.attention_kernel("splash", "tpu", "bfloat16", "cross_segments") == ("splash", None)
    for platform in ("cpu", "gpu", "tpu"):
        for kind in ak.MASK_KINDS:
            assert ak.attention_kernel("xla", platform, "bfloat16", kind) == ("xla", None)


def test_the_old_fused_reads_as_xla_and_a_bad_value_names_the_new_ones():
    assert BlockConfig(attention_impl="fused").attention_impl == "xla"
    assert BlockConfig.from_dict({"attention_impl": "fused"}).attention_impl == "xla"
    assert BlockConfig().attention_impl == "auto"  # xla on a CPU
    assert ak.attention_kernel("fused", "gpu", "bfloat16", "padding") == ("xla", None)
    with pytest.raises(ValueError) as error:
        BlockConfig(attention_impl="flash")
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        "attention_impl='flash' is not one of ('auto', 'xla', 'splash', 'cudnn', 'triton')"
    )
    for impl in ("splash", "cudnn", "triton"):
        with pytest.raises(ValueError, match=f"attention_impl='{impl}' cannot drop attention"):
            BlockConfig(attention_impl=impl, attention_dropout_rate=0.1)
        assert BlockConfig(attention_impl=impl, attention_dropout_rate=0.0).attention_impl == impl


def test_the_start_up_line_names_the_kernel_of_each_attention():
    config = TransformerConfig(
        d_model=64, num_heads=2, attention_dropout_rate=0.0, dtype="bfloat16", attention_impl="auto"
    )
    # Translation batches carry segment ids packed or not (one per sentence pair).
    for packed in (False, True):
        line = ak.describe_attention_kernels(config, "gpu", packed=packed)
        assert line == (
            "attention kernels (attention_impl=auto, gpu, bfloat16): encoder self triton, "
            f"decoder self triton, cross xla ({ak.TRITON_CROSS_REASON}), decoding steps xla"
        )
    tpu = ak.describe_attention_kernels(config, "tpu", packed=True)
    assert "encoder self splash, decoder self splash, cross splash" in tpu
    bert = ak.describe_attention_kernels(BlockConfig(attention_impl="auto"), "cpu")
    assert bert == "attention kernels (attention_impl=auto, cpu, float32): encoder self xla"
    bert_gpu = ak.describe_attention_kernels(
        BlockConfig(attention_impl="auto", attention_dropout_rate=0.0, dtype="bfloat16"), "gpu"
    )
    assert bert_gpu == "attention kernels (attention_impl=auto, gpu, bfloat16): encoder self cudnn"
    default = ak.describe_attention_kernels(BlockConfig(attention_impl="xla"), "tpu")
    assert default == "attention kernels (attention_impl=xla, tpu, float32): encoder self xla"
    dropping = ak.describe_attention_kernels(
        BlockConfig(attention_impl="auto", attention_dropout_rate=0.1), "tpu"
    )
    assert dropping.endswith(
        "encoder self xla (attention dropout (only xla drops attention weights))"
    )


# --- the kernels against xla ------------------------------------------------------------


def random_qkv(dtype, seed=0, batch=2, q_len=12, kv_len=12, heads=2, head_dim=8):
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim), dtype)
    k = jax.random.normal(keys[1], (batch, heads, kv_len, head_dim), dtype)  # heads-major
    v = jax.random.normal(keys[2], (batch, heads, kv_len, head_dim), dtype)
    cotangent = jax.random.normal(keys[3], (batch, q_len, heads, head_dim), jnp.float32)
    return q, k, v, cotangent


def xla_attention(q, k, v, mask):
    weights = attention_weights(q, k, None if mask is None else mask.mask)
    return jnp.einsum("bnqk,bnkh->bqnh", weights.astype(v.dtype), v)


# Several packed segments per row, padding at the end, a row without padding.
TARGET_SEGMENTS = jnp.array(
    [[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0], [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]]
)
SOURCE_SEGMENTS = jnp.array([[1, 1, 2, 2, 2, 2, 3, 3, 0, 0], [1, 1, 1, 2, 2, 2, 2, 2, 2, 0]])
IDS = jnp.array([[5, 6, 7, 8, 9, 4, 4, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 4, 4, 4, 4, 4, 4, 4]])


def kernel_masks():
    return {
        "segments": (segment_attention_mask(TARGET_SEGMENTS), 12),
        "causal+segments": (segment_attention_mask(TARGET_SEGMENTS, causal=True), 12),
        "cross_segments": (segment_attention_mask(TARGET_SEGMENTS, SOURCE_SEGMENTS), 10),
        "padding": (padding_attention_mask(IDS), 12),
        "padding+causal": (padding_attention_mask(IDS, causal=True), 12),
    }


def max_differences(splash, xla):
    return [float(np.max(np.abs(a - b))) for a, b in zip(splash, xla, strict=True)]


def splash_and_xla_outputs(kind, dtype):
    mask, kv_len = kernel_masks()[kind]
    q, k, v, _ = random_qkv(dtype, kv_len=kv_len)
    return np.asarray(ak.splash_attention(q, k, v, mask, interpret=True), np.float32), np.asarray(
        xla_attention(q, k, v, mask), np.float32
    )


@pytest.mark.slow
def test_splash_forward_equals_xla_on_a_packed_causal_batch_in_the_pallas_interpreter():
    splash, xla = splash_and_xla_outputs("causal+segments", jnp.float32)
    assert np.abs(splash - xla).max() < 1e-5
    assert np.all(splash[0, 9:] == 0)  # padding queries see no key: zeros, as in xla


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ("segments", "causal+segments", "cross_segments", "padding", "padding+causal")
)
@pytest.mark.parametrize(("dtype", "tolerance"), ((jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)))
def test_splash_forward_and_gradients_equal_xla(kind, dtype, tolerance):
    leaves = forward_and_grads_leaves(kind, dtype)
    differences = max_differences(*leaves)
    assert max(differences) < tolerance, differences


def forward_and_grads_leaves(kind, dtype):
    mask, kv_len = kernel_masks()[kind]
    q, k, v, cotangent = random_qkv(dtype, kv_len=kv_len)

    def run(attend):
        def loss(q, k, v):
            out = attend(q, k, v, mask)
            return jnp.sum(out.astype(jnp.float32) * cotangent), out

        grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
        return [np.asarray(x, np.float32) for x in (out, *grads)]

    return run(jax.jit(lambda *a: ak.splash_attention(*a))), run(xla_attention)


# --- the module and the stacks ----------------------------------------------------------


def module_outputs(config, x, mask, **keywords):
    module = MultiHeadAttention(config, **keywords)
    variables = module.init(jax.random.key(0), x, x, mask)
    return module.apply(variables, x, x, mask, mutable=[CACHE])[0]


def test_a_scanned_rematerialised_encoder_takes_the_mask_with_its_structure():
    config = BlockConfig(d_model=16, num_heads=2, d_ff=32, scan_layers=True, remat=True)
    x = jax.random.normal(jax.random.key(1), (2, 12, 16))
    mask = segment_attention_mask(TARGET_SEGMENTS)
    encoder = Encoder(config, num_layers=2)
    variables = encoder.init(jax.random.key(0), x, mask)
    with_structure = encoder.apply(variables, x, mask)
    bare = encoder.apply(variables, x, mask.mask)
    np.testing.assert_array_equal(np.asarray(with_structure), np.asarray(bare))


@pytest.mark.slow
def test_the_module_runs_splash_on_a_tpu_equal_to_xla(monkeypatch):
    config = BlockConfig(d_model=16, num_heads=2, attention_dropout_rate=0.0, attention_impl="auto")
    x = jax.random.normal(jax.random.key(1), (2, 12, 16))
    mask = segment_attention_mask(TARGET_SEGMENTS, causal=True)
    xla = module_outputs(config, x, mask)
    monkeypatch.setattr(ak, "current_platform", lambda: "tpu")
    calls = []
    splash = ak.splash_attention
    monkeypatch.setattr(ak, "splash_attention", lambda *a: calls.append(1) or splash(*a))
    out = module_outputs(config, x, mask)
    assert calls == [1, 1]
    assert np.abs(np.asarray(out) - np.asarray(xla)).max() < 1e-5


@pytest.mark.slow
def test_splash_and_triton_split_over_a_mesh_equal_xla():
    """Under a mesh (rows over data, heads over tensor) splash and Triton run in a
    shard_map, as a Pallas kernel must (the compiler cannot split it): still equal to
    xla, gradients too."""
    result = subprocess.run(
        [sys.executable, os.path.join(HELPERS, "splash_over_mesh.py")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "XLA_FLAGS": xla_flags(4)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    runs = json.loads(result.stdout)
    assert sorted(runs) == [
        "splash causal+segments",
        "splash cross_segments",
        "splash padding",
        "triton causal+segments",
        "triton segments",
    ]
    for kind, found in runs.items():
        assert found["shard_map"], kind
        assert max(found["differences"]) < 1e-5, (kind, found["differences"])
