"""Logits processors (inference/logits_processors.py): each function against transformers'
own processor class on random inputs, and what the options ask for (their checks:
test_options.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.inference.logits_processors import (
    logits_processors,
    no_repeat_ngram,
    processed,
    repetition_penalty,
)
from jaxtrans.inference.options import SearchOptions

torch = pytest.importorskip("torch")
logits_process = pytest.importorskip("transformers.generation.logits_process")

ROWS, LENGTH, VOCAB = 5, 10, 13


def hf_processed(processor, scores: np.ndarray, tokens: np.ndarray, i: int) -> np.ndarray:
    """transformers' processor on the tokens so far (its input_ids: the first i)."""
    if i == 0:  # no input_ids yet: transformers is never called on none
        return scores
    ids = torch.tensor(tokens[:, :i], dtype=torch.long)
    return processor(ids, torch.tensor(scores)).numpy()


def random_case(rng, *, tokens_drawn_from: int = 5):
    """Scores of both signs (a few -inf), tokens from few ids (many repeats), a step i;
    the slots from i on hold junk (PAD or any token), which must never be read."""
    scores = (rng.normal(size=(ROWS, VOCAB)) * 3).astype(np.float32)
    scores[rng.random(scores.shape) < 0.05] = -np.inf
    tokens = rng.integers(0, tokens_drawn_from, size=(ROWS, LENGTH)).astype(np.int32)
    i = int(rng.integers(0, LENGTH + 1))
    return scores, tokens, i


def with_junk_after(tokens: np.ndarray, i: int, rng) -> np.ndarray:
    junk = tokens.copy()
    junk[:, i:] = rng.integers(0, VOCAB, size=junk[:, i:].shape)
    return junk


@pytest.mark.parametrize("penalty", [1.3, 0.7, 2.0, 1e-3])
def test_repetition_penalty_equals_transformers_processor(penalty):
    rng = np.random.default_rng(int(penalty * 1000))
    penalise = jax.jit(repetition_penalty, static_argnames="penalty")
    hf = logits_process.RepetitionPenaltyLogitsProcessor(penalty)
    for _ in range(40):
        scores, tokens, i = random_case(rng)
        expected = hf_processed(hf, scores, tokens, i)
        for given in (tokens, with_junk_after(tokens, i, rng)):
            got = penalise(jnp.asarray(scores), jnp.asarray(given), i, penalty=penalty)
            np.testing.assert_array_equal(np.asarray(got), expected)


def test_repetition_penalty_divides_positive_multiplies_negative_once_per_token():
    scores = np.array([[2.0, -2.0, 3.0, -1.0, 0.0]], np.float32)
    tokens = np.array([[0, 0, 1, 1, 1, 4, 3]], np.int32)  # 3 after the step: never read
    got = np.asarray(repetition_penalty(jnp.asarray(scores), jnp.asarray(tokens), 6, penalty=2.0))
    np.testing.assert_array_equal(got, [[1.0, -4.0, 3.0, -1.0, 0.0]])


@pytest.mark.parametrize("n", [1, 2, 3, 4, LENGTH, LENGTH + 3])
def test_no_repeat_ngram_equals_transformers_processor(n):
    rng = np.random.default_rng(n)
    ban = jax.jit(no_repeat_ngram, static_argnames="n")
    hf = logits_process.NoRepeatNGramLogitsProcessor(n)
    for _ in range(40):
        # Three ids: n-grams recur often, so most rows ban something once i >= n.
        scores, tokens, i = random_case(rng, tokens_drawn_from=3)
        expected = hf_processed(hf, scores, tokens, i)
        for given in (tokens, with_junk_after(tokens, i, rng)):
            got = ban(jnp.asarray(scores), jnp.asarray(given), i, n=n)
            np.testing.assert_array_equal(np.asarray(got), expected)


def test_no_repeat_ngram_bans_what_would_complete_a_seen_ngram_and_only_that():
    scores = np.zeros((2, 8), np.float32)
    tokens = np.array([[3, 4, 5, 3, 4, 0, 0], [3, 4, 5, 6, 4, 0, 0]], np.int32)
    got = np.asarray(no_repeat_ngram(jnp.asarray(scores), jnp.asarray(tokens), 5, n=3))
    # Row 0 ends in (3, 4), seen before 5: 5 is banned. Row 1 ends in (6, 4): never seen.
    assert np.isneginf(got[0, 5]) and np.isfinite(np.delete(got[0], 5)).all()
    assert np.isfinite(got[1]).all()
    # PAD slots after the step are not a window: (0, 0) repeated there bans nothing.
    tokens = np.array([[3, 0, 0, 0, 0, 0, 0]], np.int32)
    got = no_repeat_ngram(jnp.zeros((1, 8)), jnp.asarray(tokens), 1, n=2)
    assert np.isfinite(np.asarray(got)).all()


def test_the_defaults_ask_for_no_processor():
    assert logits_processors(SearchOptions()) == ()
    assert logits_processors(SearchOptions(repetition_penalty=1.0, no_repeat_ngram_size=0)) == ()


def test_the_options_give_the_penalty_then_the_ngram_ban_as_transformers_orders_them():
    rng = np.random.default_rng(3)
    options = SearchOptions(repetition_penalty=1.5, no_repeat_ngram_size=2)
    assert len(logits_processors(options)) == 2
    hf = logits_process.LogitsProcessorList(
        [
            logits_process.RepetitionPenaltyLogitsProcessor(1.5),
            logits_process.NoRepeatNGramLogitsProcessor(2),
        ]
    )
    for _ in range(20):
        scores, tokens, i = random_case(rng, tokens_drawn_from=4)
        got = processed(logits_processors(options), jnp.asarray(scores), jnp.asarray(tokens), i)
        np.testing.assert_array_equal(np.asarray(got), hf_processed(hf, scores, tokens, i))
