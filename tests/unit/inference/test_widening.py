"""Greedy search, sampling and beam search starting from a short cache and widening it
(staged_search.staged_run and beam_run with a plan's first slots, nn.attention.widen_cache):
the same tokens as a cache of max_len from the start, whether the widening comes before the
rows narrow or after."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_translation_models

from jaxtrans.inference.beam_search import beam_search
from jaxtrans.inference.decode_plan import DecodePlan
from jaxtrans.inference.decoding import decoder
from jaxtrans.inference.search import Decoder, greedy_search, row_keys, sample_search
from jaxtrans.inference.staged_search import beam_run, staged_run
from jaxtrans.nn.attention import (
    CACHE_INDEX,
    CACHED_KEY,
    CACHED_VALUE,
    reorder_cache,
    widen_cache,
)
from jaxtrans.vocab import EOS_ID, PAD_ID

VOCAB = 13
ROWS = 40
MAX_LEN = 12


def _synthetic(memory: jnp.ndarray, seen: list) -> Decoder:
    """A decoder whose row r writes each token into its cache's next slot and emits
    (memory[r] + the sum of its written slots) % 10 + 3 until step memory[r] % MAX_LEN, then
    EOS. A step past the cache's slots would overwrite its last slot (XLA clamps the
    write) and change every later token. ``seen`` gets (rows, slots) of every step traced."""

    def step(cache, tokens, position):
        written = cache[CACHED_KEY]
        seen.append(written.shape)
        token = jnp.where(
            position == memory % MAX_LEN, EOS_ID, (memory + written.sum(axis=1)) % 10 + 3
        )
        written = jax.lax.dynamic_update_slice(written, token[:, None], (0, position))
        logits = 8.0 * jax.nn.one_hot(token, VOCAB)
        return logits, {CACHED_KEY: written, CACHE_INDEX: cache[CACHE_INDEX] + 1}

    def narrow(cache, rows):
        kept = {CACHED_KEY: cache[CACHED_KEY][rows], CACHE_INDEX: cache[CACHE_INDEX]}
        return _synthetic(memory[rows], seen)._replace(cache=kept)

    return Decoder(step, None, narrow)


def _expected(memory: np.ndarray, max_lengths: np.ndarray) -> np.ndarray:
    out = np.full((ROWS, MAX_LEN), PAD_ID)
    for r in range(ROWS):
        written = 0
        for i in range(min(int(max_lengths[r]), MAX_LEN)):
            token = EOS_ID if i == memory[r] % MAX_LEN else (memory[r] + written) % 10 + 3
            out[r, i], written = token, written + token
            if token == EOS_ID:
                break
    return out


def _widen_slots(cache, slots):
    """widen_cache over the synthetic cache's [rows, slots] array."""
    padded = widen_cache({CACHED_KEY: cache[CACHED_KEY][:, None, :, None]}, slots)
    return {CACHED_KEY: padded[CACHED_KEY][:, 0, :, 0], CACHE_INDEX: cache[CACHE_INDEX]}


def _greedy(memory, max_lengths, stages, slots, seen):
    d = _synthetic(memory, seen)
    cache = {CACHED_KEY: jnp.zeros((ROWS, slots), jnp.int32), CACHE_INDEX: jnp.array(0)}
    staged = staged_run(DecodePlan(MAX_LEN, slots, stages), d.narrow, _widen_slots)
    run = jax.jit(lambda: greedy_search(d.step, cache, max_lengths, MAX_LEN, run=staged))
    return np.asarray(run())


@pytest.mark.parametrize(
    "ends, stages, slots, traced",
    [
        # Every row ends by step 4: few run when the 5-slot cache is full, so the rows
        # narrow first, then the cache widens.
        (5, (10,), 5, [(40, 5), (10, 12), (40, 12), (10, 12)]),
        # Rows run to step 11: many still run at step 5, so the cache widens first.
        (MAX_LEN, (10,), 5, [(40, 5), (10, 12), (40, 12), (10, 12)]),
        # No narrowing: one short loop, one wide loop.
        (MAX_LEN, (), 5, [(40, 5), (40, 12)]),
        # A cache of max_len slots is not widened.
        (MAX_LEN, (10,), MAX_LEN, [(40, 12), (10, 12)]),
    ],
)
def test_a_widened_cache_gives_every_row_its_own_tokens(ends, stages, slots, traced):
    rng = np.random.default_rng(1)
    memory = rng.permutation(ROWS * 3)[:ROWS]
    memory = memory - memory % MAX_LEN + rng.integers(0, ends, ROWS)  # where each row ends
    max_lengths = rng.integers(1, MAX_LEN + 1, ROWS)
    seen: list = []
    tokens = _greedy(jnp.asarray(memory), jnp.asarray(max_lengths), stages, slots, seen)
    assert seen == traced  # each loop's step traced once, at its rows and slots
    np.testing.assert_array_equal(tokens, _expected(memory, max_lengths))
    if slots < MAX_LEN and stages:  # the cases take both ways through the search's cond
        still_running = (tokens[:, slots] != PAD_ID).sum()
        assert (still_running <= stages[0]) == (ends <= slots)


def test_widen_cache_pads_keys_and_values_alone_and_refuses_to_shrink():
    rng = np.random.default_rng(2)
    cache = {
        "layer_0": {
            CACHED_KEY: jnp.asarray(rng.normal(size=(3, 2, 4, 5))),
            CACHED_VALUE: jnp.asarray(rng.normal(size=(3, 2, 4, 5))),
            CACHE_INDEX: jnp.array(2),
        },
        "scanned": {CACHED_KEY: jnp.ones((3, 6, 2, 4, 5)), CACHE_INDEX: jnp.array(2)},
    }
    wide = widen_cache(cache, 7)
    assert wide["layer_0"][CACHED_KEY].shape == (3, 2, 7, 5)
    assert wide["scanned"][CACHED_KEY].shape == (3, 6, 2, 7, 5)
    for name in (CACHED_KEY, CACHED_VALUE):
        np.testing.assert_array_equal(wide["layer_0"][name][:, :, :4], cache["layer_0"][name])
        assert not np.asarray(wide["layer_0"][name][:, :, 4:]).any()
    assert int(wide["layer_0"][CACHE_INDEX]) == 2
    with pytest.raises(ValueError, match="cannot widen"):
        widen_cache(cache, 3)


@pytest.mark.parametrize("ensemble", [False, True])
@pytest.mark.parametrize("way", ["greedy", "sample"])
def test_a_model_or_ensemble_decodes_from_a_widened_cache_as_from_a_wide_one(ensemble, way):
    models, source = tiny_translation_models(ROWS)
    if ensemble:
        config, params = tuple(c for c, _ in models), tuple(p for _, p in models)
    else:
        config, params = models[0]
    max_lengths = jnp.full((ROWS,), MAX_LEN, jnp.int32)
    keys = row_keys(3, jnp.arange(ROWS, dtype=jnp.int32))

    def decode(slots, stages):
        @jax.jit
        def run(params):
            d = decoder(config, params, source, slots)
            common = dict(run=staged_run(DecodePlan(MAX_LEN, slots, stages), d.narrow, widen_cache))
            if way == "greedy":
                return greedy_search(d.step, d.cache, max_lengths, MAX_LEN, **common)
            return sample_search(d.step, d.cache, max_lengths, MAX_LEN, keys, **common)

        return np.asarray(run(params))

    wide = decode(MAX_LEN, ())
    ends = [(t == EOS_ID).argmax() if (t == EOS_ID).any() else MAX_LEN for t in wide]
    assert min(ends) < 3 and max(ends) > 6  # rows end on both sides of the short caches
    for slots, stages in ((3, ()), (3, (20,)), (7, (30, 10))):
        np.testing.assert_array_equal(decode(slots, stages), wide, err_msg=f"{slots} {stages}")


@pytest.mark.parametrize("ensemble", [False, True])
def test_beam_search_from_a_widened_cache_finds_the_beams_of_a_wide_one(ensemble):
    """Beam search (3 beams, some sentences with a forced prefix) from caches of 3 and 7
    slots, widened to max_len, ends with the tokens, scores and log-probabilities of a
    search from a cache of max_len slots."""
    models, source = tiny_translation_models(ROWS)
    if ensemble:
        config, params = tuple(c for c, _ in models), tuple(p for _, p in models)
    else:
        config, params = models[0]
    rng = np.random.default_rng(6)
    max_lengths = jnp.asarray(rng.integers(2, MAX_LEN + 1, ROWS), jnp.int32)
    prefix = np.full((ROWS, 2), PAD_ID)
    prefix[::3] = rng.integers(3, 11, size=(len(prefix[::3]), 2))
    beams = 3

    def search(slots):
        @jax.jit
        def run(params):
            d = decoder(config, params, source, slots, beams)
            return beam_search(
                d.step, d.cache, max_lengths, MAX_LEN, beams, 0.6, prefix=jnp.asarray(prefix),
                return_logprobs=True, reorder=reorder_cache,
                run=beam_run(DecodePlan(MAX_LEN, slots), widen_cache),
            )  # fmt: skip

        return [np.asarray(x) for x in run(params)]

    tokens, scores, logprobs = search(MAX_LEN)
    lengths = (tokens[:, 0] != PAD_ID).sum(axis=1)
    assert lengths.min() <= 3 and lengths.max() > 7  # best beams end on both sides
    for slots in (3, 7):
        short_tokens, short_scores, short_logprobs = search(slots)
        np.testing.assert_array_equal(short_tokens, tokens, err_msg=f"{slots} slots")
        np.testing.assert_allclose(short_scores, scores, rtol=1e-6)
        np.testing.assert_allclose(short_logprobs, logprobs, rtol=1e-6)
