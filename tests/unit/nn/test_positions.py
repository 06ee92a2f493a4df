"""Sinusoidal table, RoPE and position ids."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.nn import BlockConfig, MultiHeadAttention, apply_rope, default_positions
from jaxtrans.nn.positions import sinusoidal_embedding


def test_sinusoidal_table_equals_paper_formula_in_float64():
    d_model, length = 64, 50
    table = np.asarray(sinusoidal_embedding(jnp.arange(length)[None], d_model))[0]
    expected = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, 2 * i] = np.sin(angle)
            expected[pos, 2 * i + 1] = np.cos(angle)
    np.testing.assert_allclose(table, expected, atol=2e-5)  # float32 sin of angles up to 49


def test_sinusoidal_halves_equals_marian_table():
    """Hugging Face Marian's MarianSinusoidalPositionalEmbedding table (float64 numpy,
    written out): sines of every frequency, then their cosines."""
    d_model, length = 64, 50
    table = np.asarray(sinusoidal_embedding(jnp.arange(length)[None], d_model, "halves"))[0]
    position_enc = np.array(
        [
            [pos / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
            for pos in range(length)
        ]
    )
    expected = np.concatenate([np.sin(position_enc[:, 0::2]), np.cos(position_enc[:, 1::2])], 1)
    np.testing.assert_allclose(table, expected, atol=2e-5)


def rope_reference(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """float64 RoPE from explicit 2x2 rotation matrices on pairs (i, i + d/2)."""
    batch, length, heads, d = x.shape
    out = np.zeros_like(x, dtype=np.float64)
    for b in range(batch):
        for t in range(length):
            for i in range(d // 2):
                theta = positions[b, t] * base ** (-2 * i / d)
                rotation = np.array(
                    [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]]
                )
                pair = np.stack([x[b, t, :, i], x[b, t, :, i + d // 2]])  # [2, heads]
                rotated = rotation @ pair
                out[b, t, :, i], out[b, t, :, i + d // 2] = rotated
    return out


def test_rope_matches_float64_rotation_matrix_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 3, 8))
    positions = np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 0, 1, 2]])
    for base in (10000.0, 500.0):
        got = np.asarray(apply_rope(jnp.asarray(x, jnp.float32), jnp.asarray(positions), base))
        np.testing.assert_allclose(got, rope_reference(x, positions, base), atol=1e-5)


def test_rope_preserves_vector_norms():
    x = jax.random.normal(jax.random.key(0), (2, 9, 4, 16))
    positions = jnp.broadcast_to(jnp.arange(9) * 37, (2, 9))
    rotated = apply_rope(x, positions)
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(rotated), axis=-1),
        np.linalg.norm(np.asarray(x), axis=-1),
        rtol=1e-5,
    )


@pytest.mark.slow
def test_rope_attention_scores_depend_only_on_relative_offset():
    config = BlockConfig(d_model=32, num_heads=4, position="rope", attention_dropout_rate=0.0)
    x = jax.random.normal(jax.random.key(0), (1, 7, 32))
    module = MultiHeadAttention(config, positions=config.position_encoding)
    positions = jnp.arange(7)[None]
    variables = module.init(jax.random.key(1), x, x, None, positions, positions)

    def weights(shift):
        p = positions + shift
        _, state = module.apply(variables, x, x, None, p, p, mutable="intermediates")
        return np.asarray(state["intermediates"]["attention_weights"][0])

    np.testing.assert_allclose(weights(0), weights(113), atol=1e-5)
    # ...and the rotation is not a no-op: without it the weights differ.
    _, plain = MultiHeadAttention(config).apply(variables, x, x, mutable="intermediates")
    assert not np.allclose(weights(0), plain["intermediates"]["attention_weights"][0], atol=1e-3)


def test_rope_raw_scores_are_invariant_to_shifting_both_positions():
    q = jax.random.normal(jax.random.key(2), (1, 5, 2, 8))
    k = jax.random.normal(jax.random.key(3), (1, 5, 2, 8))
    positions = jnp.array([[0, 3, 4, 9, 10]])

    def scores(shift):
        qr = apply_rope(q, positions + shift)
        kr = apply_rope(k, positions + shift)
        return np.einsum("bqnh,bknh->bnqk", np.asarray(qr), np.asarray(kr))

    np.testing.assert_allclose(scores(0), scores(250), atol=1e-5)


def test_positions_restart_in_each_packed_segment():
    segments = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    positions = default_positions(2, 8, segments)
    np.testing.assert_array_equal(positions, [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5, 6, 7]])
