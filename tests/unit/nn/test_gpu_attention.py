"""The GPU attention kernels on CPU: Triton's flash attention in the Pallas interpreter
against the xla kernel (outputs and gradients), and the arguments jaxtrans gives cuDNN,
recorded (cuDNN needs a GPU: tests/integration/test_gpu_attention_compile.py compiles
both for an H100 and reads the mask type cuDNN was given)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.nn import BlockConfig, MultiHeadAttention, attention_weights
from jaxtrans.nn import attention_kernels as ak
from jaxtrans.nn import gpu_attention as ga
from jaxtrans.nn.attention import CACHE
from jaxtrans.nn.masks import (
    AttentionMask,
    key_padding_attention_mask,
    padding_attention_mask,
    segment_attention_mask,
)


def random_qkv(dtype, seed=0, batch=2, length=12, heads=2, head_dim=8):
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (batch, length, heads, head_dim), dtype)
    k = jax.random.normal(keys[1], (batch, heads, length, head_dim), dtype)  # heads-major
    v = jax.random.normal(keys[2], (batch, heads, length, head_dim), dtype)
    cotangent = jax.random.normal(keys[3], (batch, length, heads, head_dim), jnp.float32)
    return q, k, v, cotangent


def xla_attention(q, k, v, mask):
    """The reference: jaxtrans's xla kernel on the dense mask, in float32."""
    weights = attention_weights(q, k, None if mask is None else mask.mask)
    return jnp.einsum("bnqk,bnkh->bqnh", weights.astype(v.dtype), v)


# Several packed segments per row, padding at the end, a row without padding.
SEGMENTS = jnp.array([[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0], [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2]])
IDS = jnp.array([[5, 6, 7, 8, 9, 4, 4, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 4, 4, 4, 4, 4, 4, 4]])
# 200 positions (two forward tiles of 128 after padding to 256, eight backward tiles of 32):
# a segment that starts in the first tile and ends in the second, one wholly in the
# second, padding at the end of one row.
LONG = jnp.array(
    [[1] * 100 + [2] * 60 + [3] * 30 + [0] * 10, [1] * 7 + [2] * 130 + [3] * 63], jnp.int32
)


def causal(length):
    return AttentionMask(jnp.tril(jnp.ones((length, length), bool))[None, None], causal=True)


def triton_masks():
    return {
        "segments": segment_attention_mask(SEGMENTS),
        "causal+segments": segment_attention_mask(SEGMENTS, causal=True),
        "none": AttentionMask(None),
        "causal": causal(12),
    }


def forward_and_gradients(attend, mask, q, k, v, cotangent):
    def loss(q, k, v):
        out = attend(q, k, v, mask)
        return jnp.sum(out.astype(jnp.float32) * cotangent), out

    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return [np.asarray(x, np.float32) for x in (out, *grads)]


def triton_against_xla(mask, dtype, **shape):
    q, k, v, cotangent = random_qkv(dtype, **shape)
    triton = forward_and_gradients(jax.jit(ga.triton_attention), mask, q, k, v, cotangent)
    xla = forward_and_gradients(xla_attention, mask, q, k, v, cotangent)
    return triton, xla


def largest_differences(found, expected):
    return [float(np.max(np.abs(a - b))) for a, b in zip(found, expected, strict=True)]


# --- Triton -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ("segments", "causal+segments", "none", "causal"))
def test_triton_output_and_gradients_equal_xla_in_float32(kind):
    """Ragged length 12 (padded to 16) and head_dim 8 (padded to 16). Float32 inputs of
    unit scale: the kernel's online softmax (exp2, a running maximum) differs from xla's
    by rounding only, measured under 1e-6; 1e-5 allows for other CPUs' reductions."""
    triton, xla = triton_against_xla(triton_masks()[kind], jnp.float32)
    assert max(largest_differences(triton, xla)) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("causal_mask", (False, True))
def test_triton_equals_xla_across_several_tiles(causal_mask):
    """200 positions padded to 256: segments crossing a tile edge, tiles in which a query
    sees no key at all (its running maximum starts from the masked value), padding."""
    mask = segment_attention_mask(LONG, causal=causal_mask)
    triton, xla = triton_against_xla(mask, jnp.float32, length=200, head_dim=64)
    assert max(largest_differences(triton, xla)) < 1e-5


@pytest.mark.slow
def test_triton_in_bfloat16_is_within_bfloat16_rounding_of_xla():
    """bfloat16 has 8 significant bits (a relative step of 2^-8 = 0.0039); outputs and
    gradients of unit scale within 2e-2 (the bound the splash tests use), and mostly
    much closer."""
    triton, xla = triton_against_xla(segment_attention_mask(SEGMENTS, causal=True), jnp.bfloat16)
    differences = largest_differences(triton, xla)
    assert max(differences) < 2e-2, differences


@pytest.mark.slow
def test_padding_queries_of_a_packed_row_get_zeros_and_pass_no_gradient():
    mask = segment_attention_mask(SEGMENTS, causal=True)
    q, k, v, cotangent = random_qkv(jnp.float32)
    out, dq, dk, dv = forward_and_gradients(jax.jit(ga.triton_attention), mask, q, k, v, cotangent)
    assert np.all(out[0, 9:] == 0)  # padding positions: no key in the xla kernel either
    assert np.all(dq[0, 9:] == 0)
    assert np.all(dk[0, :, 9:] == 0) and np.all(dv[0, :, 9:] == 0)
    assert np.all(np.abs(out[0, :9]).sum(-1) > 0)


def test_triton_pads_lengths_to_its_tiles():
    assert [ga.triton_length(n) for n in (1, 12, 16, 17, 100, 128, 129, 200, 256)] == [
        16,
        16,
        16,
        32,
        128,
        128,
        256,
        256,
        256,
    ]


def test_triton_refuses_masks_it_cannot_express():
    q, k, v, _ = random_qkv(jnp.float32)
    for mask in (padding_attention_mask(IDS), segment_attention_mask(SEGMENTS, SEGMENTS[:, :10])):
        with pytest.raises(ValueError, match="Triton attention takes"):
            ga.triton_attention(q, k, v, mask)


@pytest.mark.slow
def test_the_module_runs_triton_on_a_gpu_for_packed_self_attention(monkeypatch):
    config = BlockConfig(d_model=16, num_heads=2, attention_dropout_rate=0.0, attention_impl="auto")
    x = jax.random.normal(jax.random.key(1), (2, 12, 16))
    mask = segment_attention_mask(SEGMENTS, causal=True)
    xla = module_outputs(config.replace(attention_impl="xla"), x, mask)
    monkeypatch.setattr(ak, "current_platform", lambda: "gpu")
    calls = []
    triton = ga.triton_attention
    monkeypatch.setattr(ga, "triton_attention", lambda *a: calls.append(1) or triton(*a))
    out = module_outputs(config, x, mask)
    assert calls == [1, 1]  # init and apply
    assert np.abs(np.asarray(out) - np.asarray(xla)).max() < 1e-5
    calls.clear()
    module_outputs(config, x, mask, cache="causal")  # decoding steps run xla
    assert calls == []


def module_outputs(config, x, mask, **keywords):
    module = MultiHeadAttention(config, **keywords)
    variables = module.init(jax.random.key(0), x, x, mask)
    return module.apply(variables, x, x, mask, mutable=[CACHE])[0]


# --- cuDNN: its arguments -----------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch):
    """jax.nn.dot_product_attention recording its arguments (the shapes of q, k, v and the
    keywords) and answering NaN everywhere: cuDNN needs a GPU, and no other kernel stands
    in for it here, so nothing below compares its numbers."""
    calls = []

    def record(q, k, v, **kwargs):
        calls.append({"shapes": (q.shape, k.shape, v.shape), **kwargs})
        return jnp.full(q.shape, jnp.nan, q.dtype)

    monkeypatch.setattr(jax.nn, "dot_product_attention", record)
    return calls


@pytest.mark.parametrize(
    ("mask", "lengths"),
    [
        (padding_attention_mask(IDS), [7, 12]),
        (padding_attention_mask(IDS, causal=True), [7, 12]),
        (key_padding_attention_mask(IDS != 0), [7, 12]),
        (causal(12), None),
        (AttentionMask(None), None),
    ],
    ids=["padding", "padding+causal", "bert_attention_mask", "causal", "none"],
)
def test_cudnn_is_given_key_lengths_causality_and_its_layout(recorded, mask, lengths):
    q, k, v, _ = random_qkv(jnp.bfloat16, length=12, heads=3, head_dim=8)
    out = ga.cudnn_attention(q, k, v, mask)
    (call,) = recorded
    # cuDNN's layout: [batch, len, heads, head_dim] for all three (k, v are heads-major here).
    assert call["shapes"] == ((2, 12, 3, 8),) * 3
    assert call["implementation"] == "cudnn"
    assert call["is_causal"] is mask.causal
    assert "query_seq_lengths" not in call  # a padding mask does not mask queries
    assert "mask" not in call and "bias" not in call
    if lengths is None:
        assert "key_value_seq_lengths" not in call
    else:
        assert call["key_value_seq_lengths"].dtype == jnp.int32
        np.testing.assert_array_equal(call["key_value_seq_lengths"], lengths)
    assert out.shape == q.shape


def test_a_row_without_keys_gets_zeros_from_cudnn(recorded):
    q, k, v, _ = random_qkv(jnp.bfloat16)
    valid = jnp.array([[False] * 12, [True] * 5 + [False] * 7])
    out = np.asarray(ga.cudnn_attention(q, k, v, key_padding_attention_mask(valid)), np.float32)
    np.testing.assert_array_equal(recorded[0]["key_value_seq_lengths"], [0, 5])
    assert np.all(out[0] == 0)  # cuDNN's answer replaced, as xla gives zeros
    assert np.all(np.isnan(out[1]))  # the other row is cuDNN's own (here the recorder's)


def test_cudnn_refuses_segment_masks_it_cannot_express():
    with pytest.raises(ValueError, match="packed-segment"):
        ga.cudnn_arguments(segment_attention_mask(SEGMENTS))


def test_the_module_calls_cudnn_on_a_gpu_and_xla_where_cudnn_cannot(recorded, monkeypatch):
    config = BlockConfig(
        d_model=16, num_heads=2, attention_dropout_rate=0.0, dtype="bfloat16", attention_impl="auto"
    )
    x = jax.random.normal(jax.random.key(1), (2, 12, 16))
    padded = padding_attention_mask(IDS, causal=True)
    module_outputs(config.replace(attention_impl="xla"), x, padded)
    assert recorded == []
    monkeypatch.setattr(ak, "current_platform", lambda: "gpu")
    module_outputs(config, x, padded)
    assert [call["is_causal"] for call in recorded] == [True, True]  # init and apply
    for call in recorded:
        np.testing.assert_array_equal(call["key_value_seq_lengths"], [7, 12])
    recorded.clear()
    monkeypatch.setattr(ga, "triton_attention", lambda q, *a: jnp.zeros_like(q))
    module_outputs(config, x, segment_attention_mask(SEGMENTS, causal=True))  # Triton
    module_outputs(config, x, padded.mask)  # a bare mask
    module_outputs(config, x, padded, cache="causal")  # decoding
    assert recorded == []
