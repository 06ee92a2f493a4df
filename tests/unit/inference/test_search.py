"""The search's own pieces, checked against jax.numpy."""

import jax.numpy as jnp
import numpy as np

from jaxtrans.inference.beam_search import _top_candidates, beam_rows
from jaxtrans.inference.search import argmax


def test_argmax_picks_the_first_maximum_as_jnp_argmax():
    rng = np.random.default_rng(0)
    # Few distinct values: many rows hold their maximum more than once.
    x = rng.integers(-3, 4, size=(64, 500)).astype(np.float32)
    x[5, :] = -np.inf  # a row with nothing allowed
    np.testing.assert_array_equal(argmax(jnp.asarray(x)), np.argmax(x, axis=-1))


def test_argmax_of_a_row_with_nan_is_its_first_nan_as_jnp_argmax():
    x = np.zeros((3, 10), np.float32)
    x[0, 4] = x[0, 7] = np.nan
    x[1, 2] = np.inf
    x[2, 9] = np.nan
    x[2, 1] = np.inf
    expected = jnp.argmax(jnp.asarray(x), axis=-1)
    np.testing.assert_array_equal(argmax(jnp.asarray(x)), expected)
    np.testing.assert_array_equal(expected, [4, 2, 9])


def _flat_top(live: np.ndarray, logprobs: np.ndarray, n: int):
    """The reference: a stable sort of all K * vocab sums (best first, lower index first
    among equals), in NumPy."""
    sums = (live[:, :, None] + logprobs).reshape(live.shape[0], -1)
    order = np.argsort(-sums, axis=1, kind="stable")[:, :n]
    return np.take_along_axis(sums, order, axis=1), order


def _candidates(live: np.ndarray, logprobs: np.ndarray, n: int):
    """_top_candidates given each beam's min(n, vocab) best tokens (a stable sort)."""
    m = min(n, logprobs.shape[-1])
    tokens = np.argsort(-logprobs, axis=-1, kind="stable")[..., :m]
    best = np.take_along_axis(logprobs, tokens, axis=-1)
    values, index = _top_candidates(
        jnp.asarray(live), jnp.asarray(best), jnp.asarray(tokens), logprobs.shape[-1], n
    )
    return np.asarray(values), np.asarray(index)


def test_the_best_candidates_are_the_top_of_all_beam_token_sums_ties_included():
    rng = np.random.default_rng(1)
    batch, k, vocab, n = 6, 4, 50, 8
    # Few distinct values: sums tie within a beam and across beams.
    logprobs = rng.integers(-6, 0, size=(batch, k, vocab)).astype(np.float32)
    live = rng.integers(-3, 0, size=(batch, k)).astype(np.float32)
    live[0, 1:] = -np.inf  # the first step: only beam 0 alive
    logprobs[1] = -np.inf  # nothing allowed but one token a beam (a forced prefix)
    logprobs[1, :, 7] = -1.0
    live[2, :] = live[2, 0]  # equal beams: every sum ties with another beam's
    logprobs[2] = logprobs[2, 0]
    values, index = _candidates(live, logprobs, n)
    expected_values, expected_index = _flat_top(live, logprobs, n)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(index, expected_index)


def test_the_best_candidates_of_a_vocabulary_smaller_than_their_number():
    rng = np.random.default_rng(2)
    logprobs = rng.normal(size=(3, 4, 5)).astype(np.float32)  # 5 tokens, 8 wanted a beam
    live = rng.normal(size=(3, 4)).astype(np.float32)
    values, index = _candidates(live, logprobs, 8)
    expected_values, expected_index = _flat_top(live, logprobs, 8)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(index, expected_index)


def test_beam_rows_point_each_beam_at_its_parent_within_its_sentence():
    beams = jnp.array([[2, 0, 0], [1, 2, 1]])
    np.testing.assert_array_equal(beam_rows(beams), [2, 0, 0, 4, 5, 4])
