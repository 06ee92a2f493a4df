"""Greedy search and sampling dropping their finished rows (staged_search.staged_run, a plan's
stages): the same tokens as the full batch, each row keeping its own memory, cache, key and
prefix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_translation_models

from jaxtrans.inference.decode_plan import DecodePlan
from jaxtrans.inference.decoding import decoder
from jaxtrans.inference.search import Decoder, greedy_search, row_keys, sample_search
from jaxtrans.inference.staged_search import staged_run
from jaxtrans.vocab import EOS_ID, PAD_ID

VOCAB = 13
ROWS = 40
MAX_LEN = 12


def _synthetic(memory: jnp.ndarray, seen: list) -> Decoder:
    """A decoder whose row r emits (memory[r] + steps it has taken) % 10 + 3 until step
    memory[r] % MAX_LEN, then EOS; its cache counts each row's steps. ``seen`` gets the
    rows of every step traced."""
    table = jax.random.normal(jax.random.key(7), (ROWS, MAX_LEN, VOCAB))

    def step(cache, tokens, position):
        seen.append(tokens.shape[0])
        count = cache["count"]
        token = jnp.where(count == memory % MAX_LEN, EOS_ID, (memory + count) % 10 + 3)
        # One-hot with a margin, plus noise that sampling at temperature 1 will follow.
        logits = 8.0 * jax.nn.one_hot(token, VOCAB) + table[memory % ROWS, position]
        return logits, {"count": count + 1, "index": cache["index"] + 1}

    def narrow(cache, rows):
        kept = {"count": cache["count"][rows], "index": cache["index"]}
        return _synthetic(memory[rows], seen)._replace(cache=kept)

    cache = {"count": jnp.zeros(memory.shape, jnp.int32), "index": jnp.array(0)}
    return Decoder(step, cache, narrow)


def _narrowing(narrow, stages):
    """The search's run narrowing to ``stages`` rows, its cache never widened."""
    return staged_run(DecodePlan(MAX_LEN, MAX_LEN, tuple(stages)), narrow, None)


def _memory():
    return jnp.asarray(np.random.default_rng(0).permutation(ROWS * 3)[:ROWS], jnp.int32)


def _greedy(stages, max_lengths, prefix=None, seen=None):
    memory = _memory()
    seen = [] if seen is None else seen
    d = _synthetic(memory, seen)
    run = jax.jit(
        lambda: greedy_search(
            d.step, d.cache, max_lengths, MAX_LEN, run=_narrowing(d.narrow, stages), prefix=prefix
        )
    )
    return np.asarray(run())


def test_narrowed_greedy_search_gives_every_row_its_own_tokens():
    max_lengths = jnp.asarray(np.random.default_rng(1).integers(0, MAX_LEN + 1, ROWS), jnp.int32)
    seen: list[int] = []
    narrowed = _greedy((20, 10, 5), max_lengths, seen=seen)
    assert seen == [40, 20, 10, 5]  # each stage's step traced once, at its rows
    np.testing.assert_array_equal(narrowed, _greedy((), max_lengths))
    # And the tokens are the decoder's own rule, row by row (memory, cache and limit).
    memory = np.asarray(_memory())
    for r in range(ROWS):
        end, limit = memory[r] % MAX_LEN, int(max_lengths[r])
        expected = [(memory[r] + i) % 10 + 3 if i < end else EOS_ID for i in range(end + 1)]
        expected = expected[:limit] + [PAD_ID] * (MAX_LEN - min(limit, end + 1))
        np.testing.assert_array_equal(narrowed[r], expected, err_msg=f"row {r}")


def test_narrowing_keeps_each_rows_forced_prefix():
    rng = np.random.default_rng(2)
    prefix = rng.integers(3, VOCAB, size=(ROWS, 4))
    prefix[rng.random((ROWS, 4)) < 0.4] = PAD_ID
    prefix = jnp.asarray(np.sort(prefix != PAD_ID, axis=1)[:, ::-1] * prefix, jnp.int32)
    max_lengths = jnp.full((ROWS,), MAX_LEN, jnp.int32)
    narrowed = _greedy((20, 10), max_lengths, prefix=prefix)
    np.testing.assert_array_equal(narrowed, _greedy((), max_lengths, prefix=prefix))


def test_narrowed_sampling_draws_each_row_with_its_own_key():
    memory = _memory()
    keys = row_keys(3, jnp.arange(ROWS, dtype=jnp.int32))
    max_lengths = jnp.full((ROWS,), MAX_LEN, jnp.int32)

    def sample(stages):
        d = _synthetic(memory, [])
        run = jax.jit(
            lambda: sample_search(
                d.step, d.cache, max_lengths, MAX_LEN, keys, temperature=3.0,
                run=_narrowing(d.narrow, stages),
            )
        )  # fmt: skip
        return np.asarray(run())

    full = sample(())
    assert (full != _greedy((), max_lengths)).any()  # the draws do depart from the argmax
    np.testing.assert_array_equal(sample((20, 10)), full)


@pytest.mark.parametrize("stages", [(40,), (20, 20), (20, 0), (50,)])
def test_stages_must_decrease_from_the_rows_and_stay_above_zero(stages):
    with pytest.raises(ValueError, match="must decrease"):
        _greedy(stages, jnp.full((ROWS,), MAX_LEN, jnp.int32))


@pytest.mark.parametrize("ensemble", [False, True])
def test_a_narrowed_model_or_ensemble_decodes_as_the_full_batch(ensemble):
    models, source = tiny_translation_models(ROWS)
    if ensemble:
        config, params = tuple(c for c, _ in models), tuple(p for _, p in models)
    else:
        config, params = models[0]
    max_lengths = jnp.asarray(np.random.default_rng(5).integers(1, MAX_LEN + 1, ROWS), jnp.int32)

    def greedy(stages):
        @jax.jit
        def run(params):
            d = decoder(config, params, source, MAX_LEN)
            run = _narrowing(d.narrow, stages)
            return greedy_search(d.step, d.cache, max_lengths, MAX_LEN, run=run)

        return np.asarray(run(params))

    full = greedy(())
    assert len({(t == EOS_ID).argmax() for t in full if (t == EOS_ID).any()}) > 2  # ragged ends
    np.testing.assert_array_equal(greedy((20, 10)), full)
