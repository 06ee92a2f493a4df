"""Each row's best tokens under log_softmax, read by blocks, against a stable sort of the
whole log_softmax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.inference.top_tokens import BLOCK, log_softmax_top_k


def _reference(logits: np.ndarray, n: int, ranked: np.ndarray | None = None):
    """jax.nn.log_softmax over the whole row, then a stable sort (the lower token first
    among equals) of the ranked tokens: values [rows, n], tokens [rows, n]."""
    logprobs = np.asarray(jax.nn.log_softmax(jnp.asarray(logits), axis=-1))
    if ranked is not None:
        logprobs = np.where(np.isneginf(ranked), -np.inf, logprobs)
    tokens = np.argsort(-logprobs, axis=-1, kind="stable")[:, :n]
    return np.take_along_axis(logprobs, tokens, axis=-1), tokens


def _check(logits: np.ndarray, n: int, ranked: np.ndarray | None = None):
    values, tokens = log_softmax_top_k(
        jnp.asarray(logits), n, None if ranked is None else jnp.asarray(ranked)
    )
    expected_values, expected_tokens = _reference(logits, n, ranked)
    np.testing.assert_array_equal(np.asarray(tokens), expected_tokens)
    # Another program's sum of exponentials may round its last bit otherwise.
    np.testing.assert_allclose(np.asarray(values), expected_values, rtol=1e-6, atol=0)


@pytest.mark.parametrize("vocab", [1000, 3 * BLOCK, 13], ids=["ragged", "whole-blocks", "tiny"])
def test_the_best_tokens_are_those_of_the_whole_log_softmax(vocab):
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=3.0, size=(6, vocab)).astype(np.float32)
    logits[:, 0] = logits[:, 2] = -np.inf  # PAD and BOS are never targets
    logits[1, -1] = 40.0  # the best token in the last, padded block
    _check(logits, min(8, vocab - 2))


def test_ties_go_to_the_lower_token_within_and_across_blocks():
    rng = np.random.default_rng(1)
    # Few distinct values: every block holds the row's maximum several times.
    logits = rng.integers(0, 4, size=(5, 1000)).astype(np.float32)
    logits[2, :] = 1.0  # a row of equals: tokens 0..7
    _check(logits, 8)


def test_the_n_best_may_share_one_block():
    logits = np.zeros((2, 1000), np.float32)
    logits[0, 300:310] = np.arange(10, 20)  # all ten best in block 2
    logits[1, [5, 127, 128, 999]] = 9.0  # four equal bests at block edges
    _check(logits, 8)


def test_a_forced_token_keeps_its_probability_under_the_whole_row():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(3, 700)).astype(np.float32)
    ranked = np.full_like(logits, -np.inf)
    ranked[0, 650] = logits[0, 650]  # row 0 may only emit token 650
    ranked[1:] = logits[1:]
    values, tokens = log_softmax_top_k(jnp.asarray(logits), 8, jnp.asarray(ranked))
    assert int(tokens[0, 0]) == 650
    whole = np.asarray(jax.nn.log_softmax(jnp.asarray(logits), axis=-1))
    np.testing.assert_allclose(float(values[0, 0]), whole[0, 650], rtol=1e-6)
    assert np.isneginf(np.asarray(values[0, 1:])).all()
    _check(logits, 8, ranked)
