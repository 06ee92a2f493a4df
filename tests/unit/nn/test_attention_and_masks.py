"""Masks and scaled dot-product attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.nn import (
    BlockConfig,
    MultiHeadAttention,
    attention_weights,
    causal_mask,
    combine_masks,
    fused_attention,
    padding_mask,
    segment_mask,
)


def test_padding_mask_marks_real_keys_with_shape_batch_1_1_kv():
    ids = jnp.array([[5, 6, 0, 0], [7, 0, 0, 0]])
    mask = padding_mask(ids)
    assert mask.shape == (2, 1, 1, 4)
    np.testing.assert_array_equal(mask[:, 0, 0], [[1, 1, 0, 0], [1, 0, 0, 0]])


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(4)
    assert mask.shape == (1, 1, 4, 4)
    np.testing.assert_array_equal(mask[0, 0], np.tril(np.ones((4, 4), bool)))


def test_combined_mask_is_the_logical_and_of_padding_and_causal():
    ids = jnp.array([[5, 6, 7, 0]])
    mask = combine_masks(causal_mask(4), padding_mask(ids), None)
    expected = np.tril(np.ones((4, 4), bool)) & np.array([1, 1, 1, 0], bool)[None, :]
    np.testing.assert_array_equal(mask[0, 0], expected)
    assert combine_masks(None, None) is None


def test_segment_mask_keeps_packed_sequences_apart_and_ignores_padding():
    segments = jnp.array([[1, 1, 2, 2, 2, 0]])
    mask = np.asarray(segment_mask(segments))[0, 0]
    for i in range(6):
        for j in range(6):
            same = segments[0, i] == segments[0, j] and segments[0, i] != 0
            assert mask[i, j] == same


def test_segment_mask_between_target_and_source_segments():
    tgt = jnp.array([[1, 2, 2, 0]])
    src = jnp.array([[1, 1, 2, 0, 0]])
    mask = np.asarray(segment_mask(tgt, src))[0, 0]
    np.testing.assert_array_equal(
        mask,
        [[1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]],
    )


def random_qkv(seed=0, batch=2, q_len=5, kv_len=6, heads=3, head_dim=8):
    keys = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(keys[0], (batch, q_len, heads, head_dim))
    # Keys and values heads-major, as attention_weights and fused_attention take them.
    k = jax.random.normal(keys[1], (batch, heads, kv_len, head_dim))
    v = jax.random.normal(keys[2], (batch, heads, kv_len, head_dim))
    return q, k, v


@pytest.mark.slow
def test_attention_weights_equal_float64_softmax_of_scaled_scores():
    q, k, _ = random_qkv()
    weights = np.asarray(attention_weights(q, k, None))
    q64, k64 = np.asarray(q, np.float64), np.asarray(k, np.float64)
    scores = np.einsum("bqnh,bnkh->bnqk", q64, k64) / np.sqrt(q.shape[-1])
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, atol=1e-6)


def test_masked_keys_get_exactly_zero_weight():
    q, k, _ = random_qkv()
    mask = padding_mask(jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]))
    weights = np.asarray(attention_weights(q, k, mask))
    assert np.all(weights[0, :, :, 3:] == 0.0)
    assert np.all(weights[1, :, :, 5:] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)


def test_fully_masked_query_gets_zero_weights_not_nan():
    q, k, v = random_qkv(batch=1, q_len=3, kv_len=3)
    mask = segment_mask(jnp.array([[1, 1, 0]]))  # the padding query sees nothing
    weights = np.asarray(attention_weights(q, k, mask))
    assert np.isfinite(weights).all()
    assert np.all(weights[0, :, 2, :] == 0.0)
    out = np.asarray(fused_attention(q, k, v, mask))
    assert np.isfinite(out).all()
    assert np.all(out[0, 2] == 0.0)


def xla_attention(q, k, v, mask):
    return jnp.einsum("bnqk,bnkh->bqnh", attention_weights(q, k, mask), v)


@pytest.mark.parametrize(
    "mask",
    [
        None,
        padding_mask(jnp.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])),
        segment_mask(
            jnp.array([[1, 1, 2, 2, 2, 0]] * 2)[:, :5], jnp.array([[1, 1, 2, 2, 0, 0]] * 2)
        ),
    ],
    ids=["no_mask", "padding", "segments_with_empty_rows"],
)
def test_xla_and_fused_dot_product_attention_agree(mask):
    q, k, v = random_qkv()
    np.testing.assert_allclose(
        np.asarray(fused_attention(q, k, v, mask)),
        np.asarray(xla_attention(q, k, v, mask)),
        atol=1e-5,
    )


def test_multi_head_attention_module_gives_same_output_with_either_implementation():
    config = BlockConfig(d_model=24, num_heads=3, attention_dropout_rate=0.0)
    x = jax.random.normal(jax.random.key(1), (2, 5, 24))
    mask = combine_masks(
        causal_mask(5), padding_mask(jnp.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]))
    )
    variables = MultiHeadAttention(config).init(jax.random.key(0), x, x, mask)
    xla = MultiHeadAttention(config).apply(variables, x, x, mask)
    auto = MultiHeadAttention(config.replace(attention_impl="auto")).apply(variables, x, x, mask)
    np.testing.assert_allclose(np.asarray(auto), np.asarray(xla), atol=1e-5)


def test_splash_attention_refuses_attention_dropout_it_cannot_apply():
    with pytest.raises(ValueError, match="attention_dropout_rate"):
        BlockConfig(attention_impl="splash", attention_dropout_rate=0.1)


def test_attention_dropout_is_active_only_when_not_deterministic():
    config = BlockConfig(d_model=16, num_heads=2, attention_dropout_rate=0.5)
    x = jax.random.normal(jax.random.key(1), (1, 4, 16))
    module = MultiHeadAttention(config)
    variables = module.init(jax.random.key(0), x, x)
    a = module.apply(variables, x, x, deterministic=True, rngs={"dropout": jax.random.key(1)})
    b = module.apply(variables, x, x, deterministic=True, rngs={"dropout": jax.random.key(2)})
    c = module.apply(variables, x, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
