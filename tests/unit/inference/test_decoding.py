"""Cached incremental decoding, greedy search and beam search."""

import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.beam_search import beam_search, tile_beams
from jaxtrans.inference.decoding import (
    beam_decode,
    cross_attention_cache,
    greedy_decode,
    init_cache,
    make_step_fn,
)
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.search import greedy_search
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

PAD, EOS, BOS = PAD_ID, EOS_ID, BOS_ID
POSITIONS = ["sinusoidal", "learned", "rope"]


tiny_config = tiny_transformer_config


@functools.cache
def _weights(vocab: int) -> dict:
    """Random weights of a model with learned positions, whose outputs end at varied steps.

    Random tiny models emit EOS first or never; here EOS takes over the output weights
    of the last token (slightly ahead of it), so a hypothesis ends where it would appear.
    """
    source = jnp.ones((1, 4), jnp.int32)
    init = jax.jit(Transformer(tiny_config("learned", vocab)).init)
    params = nn.unbox(init(jax.random.key(1), source, source))["params"]
    kernel, bias = params["output"]["kernel"], params["output"]["bias"]
    params["output"] = {
        "kernel": kernel.at[:, EOS].set(kernel[:, -1]),
        "bias": bias.at[EOS].set(bias[-1] + 0.1),
    }
    return params


def tiny_model(position: str = "rope", vocab: int = 13) -> tuple[TransformerConfig, dict]:
    """(config, params); the position kinds share weights, less the learned tables."""
    params = _weights(vocab)
    if position != "learned":
        params = {k: v for k, v in params.items() if not k.endswith("_positions")}
    return tiny_config(position, vocab), params


@functools.cache
def full_decoder(config: TransformerConfig):
    """(params, source, target_in) -> logits [batch, tgt_len, vocab], no cache involved."""
    return jax.jit(lambda params, src, tgt: Transformer(config).apply({"params": params}, src, tgt))


def sources(vocab: int = 13) -> jnp.ndarray:
    """Eight sources [8, 6] with PAD after the end in two of them."""
    rng = np.random.default_rng(0)
    src = rng.integers(3, vocab, size=(8, 6))
    src[0, 4:] = PAD
    src[2, 2:] = PAD
    return jnp.asarray(src, jnp.int32)


def rerun_over_prefix(config, params, src, target, t: int) -> np.ndarray:
    """Logits [batch, vocab] at position t, the decoder re-run on target[:, :t + 1].

    The prefix is right-padded to a fixed length so one compiled function serves all t;
    padding is masked and lies in the future of position t.
    """
    prefix = np.full(target.shape, PAD)
    prefix[:, : t + 1] = np.asarray(target)[:, : t + 1]
    return np.array(full_decoder(config)(params, src, jnp.asarray(prefix))[:, t])


@functools.partial(jax.jit, static_argnames="config")
def cached_logits(params, src, target, *, config) -> jnp.ndarray:
    """Feed target [batch, tgt_len] one token per cached step -> logits [batch, tgt_len, vocab]."""
    memory = Transformer(config).apply({"params": params}, src, method=Transformer.encode)
    memory_cache = cross_attention_cache(config, params, memory, src)
    step = make_step_fn(config, params, memory_cache, src)

    def feed(cache, t):
        logits, cache = step(cache, target[:, t], t)
        return cache, logits

    cache = init_cache(config, params, memory_cache, src, max_len=target.shape[1])
    _, logits = jax.lax.scan(feed, cache, jnp.arange(target.shape[1]))
    return logits.transpose(1, 0, 2)


TARGET_LEN = 8


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_cached_step_logits_equal_a_full_rerun_over_the_prefix(position):
    config, params = tiny_model(position)
    src = sources()
    target = np.random.default_rng(1).integers(3, 13, size=(8, TARGET_LEN))
    target[:, 0] = BOS
    cached = np.asarray(cached_logits(params, src, jnp.asarray(target), config=config))
    for t in range(TARGET_LEN):
        expected = rerun_over_prefix(config, params, src, target, t)
        np.testing.assert_allclose(cached[:, t], expected, atol=1e-5, rtol=0)


def naive_greedy(config, params, src, steps: int) -> np.ndarray:
    """The seeds' loop: re-run the whole decoder on the growing prefix, append the argmax."""
    target = np.full((src.shape[0], steps + 1), PAD)
    target[:, 0] = BOS
    for t in range(steps):
        logits = rerun_over_prefix(config, params, src, target, t)
        logits[:, [PAD, BOS]] = -np.inf  # decoding never emits padding or the start token
        target[:, t + 1] = logits.argmax(-1)
    return target[:, 1:]


def through_first_eos(row) -> list[int]:
    row = np.asarray(row).tolist()
    return row[: row.index(EOS) + 1] if EOS in row else row


@pytest.mark.slow
@pytest.mark.parametrize("position", POSITIONS)
def test_cached_greedy_equals_the_naive_full_rerun_loop(position):
    config, params = tiny_model(position)
    src, steps = sources(), TARGET_LEN - 1
    cached = greedy_decode(params, src, jnp.full((8,), steps), config=config, max_len=steps)
    naive = naive_greedy(config, params, src, steps)
    assert any(EOS in row for row in naive.tolist())
    for got, want in zip(np.asarray(cached), naive, strict=True):
        want = through_first_eos(want)
        assert got[: len(want)].tolist() == want
        assert (got[len(want) :] == PAD).all()


@pytest.mark.slow
def test_beam_of_one_equals_greedy():
    config, params = tiny_model("rope")
    src, max_len = sources(), TARGET_LEN - 1
    lengths = jnp.array([6, 3, 7, 5, 7, 7, 4, 7])
    greedy = np.asarray(greedy_decode(params, src, lengths, config=config, max_len=max_len))
    one = SearchOptions(beam_size=1, alpha=0.0)
    beam, _ = beam_decode(params, src, lengths, one, config=config, max_len=max_len)
    ends_early = [EOS in row[: n - 1] for row, n in zip(greedy, lengths.tolist(), strict=True)]
    assert any(ends_early) and not all(ends_early)  # both ways of stopping are exercised
    np.testing.assert_array_equal(np.asarray(beam)[:, 0], greedy)


@pytest.mark.slow
def test_wide_beam_finds_the_best_sequence_of_exhaustive_enumeration():
    vocab, length, alpha = 5, 4, 0.6
    config, params = tiny_model("sinusoidal", vocab=vocab)
    src = jnp.array([[3, 4, 3, EOS]])
    tokens = [t for t in range(vocab) if t not in (PAD, BOS)]
    # Every hypothesis: up to `length` tokens, stopping at the first EOS.
    candidates = [
        list(seq)
        for n in range(1, length + 1)
        for seq in itertools.product(tokens, repeat=n)
        if EOS not in seq[:-1] and (seq[-1] == EOS or n == length)
    ]
    target_in = np.full((len(candidates), length), PAD)
    for row, seq in enumerate(candidates):
        target_in[row, : len(seq)] = [BOS, *seq[:-1]]
    logits = full_decoder(config)(params, jnp.repeat(src, len(candidates), 0), target_in)
    logits = np.asarray(logits, np.float64)[:, :, tokens]  # PAD and BOS are never choices
    logprobs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    scores = [
        sum(logprobs[row, t, tokens.index(token)] for t, token in enumerate(seq))
        / ((5 + len(seq)) / 6) ** alpha
        for row, seq in enumerate(candidates)
    ]
    best = int(np.argmax(scores))

    beam = len(tokens) ** length  # room for every prefix: the search is exhaustive
    out, out_scores = beam_decode(
        params, src, jnp.array([length]), SearchOptions(beam_size=beam, alpha=alpha),
        config=config, max_len=length,
    )  # fmt: skip
    assert through_first_eos(out[0, 0]) == candidates[best]
    np.testing.assert_allclose(float(out_scores[0, 0]), scores[best], atol=1e-5)
    # Nothing was pruned: every hypothesis is among the finished ones, with its score.
    found = {
        tuple(through_first_eos(row)): float(score)
        for row, score in zip(np.asarray(out[0]), np.asarray(out_scores[0]), strict=True)
        if np.isfinite(score)
    }
    assert sorted(found) == sorted(map(tuple, candidates))
    for seq, score in zip(candidates, scores, strict=True):
        assert abs(found[tuple(seq)] - score) <= 1e-5


def bigram_step_fn(table: jnp.ndarray):
    """step_fn of a fixed bigram model per sentence: table [sentences, vocab, vocab] logits.

    The cache holds each row's sentence index, so beam gathering must carry it along.
    """

    def step(cache, tokens, position):
        return table[cache, tokens], cache

    return step


def test_nothing_follows_eos():
    batch, vocab, beam, max_len = 16, 8, 3, 10
    logits = np.random.default_rng(2).normal(size=(batch, vocab, vocab))
    logits[:, :, EOS] += 1.0
    step = bigram_step_fn(jnp.asarray(logits, jnp.float32))
    lengths = jnp.full((batch,), max_len)
    greedy = greedy_search(step, jnp.arange(batch), lengths, max_len)
    beams, _ = beam_search(
        step, tile_beams(jnp.arange(batch), beam), lengths, max_len, beam, alpha=0.6
    )
    rows = [*np.asarray(greedy), *np.asarray(beams).reshape(-1, max_len)]
    ended = [row for row in rows if EOS in row[:-1].tolist()]
    assert len(ended) > len(rows) // 2
    for row in ended:
        end = row.tolist().index(EOS)
        assert (row[end + 1 :] == PAD).all()
        assert (row[:end] != PAD).all()


PENALTIES = {
    "gnmt": lambda length, alpha: ((5 + length) / 6) ** alpha,
    "hf": lambda length, alpha: length**alpha,  # Hugging Face: generated length, EOS included
}


@pytest.mark.parametrize("form", sorted(PENALTIES))
def test_length_penalty_ranks_hypotheses_as_the_formula_says(form):
    penalty = PENALTIES[form]
    a, b, c, d = 3, 4, 5, 6
    probs = np.full((7, 7), 0.02)
    probs[:, [PAD, BOS]] = 0.0
    probs[BOS, [a, b]] = 0.6, 0.4
    probs[a, EOS] = 0.8  # short: a EOS
    probs[b, c] = probs[c, d] = probs[d, EOS] = 0.9  # long: b c d EOS
    probs /= probs.sum(-1, keepdims=True)
    logprob = np.log(probs, where=probs > 0, out=np.full_like(probs, -np.inf))
    short = [a, EOS], logprob[BOS, a] + logprob[a, EOS]
    long = [b, c, d, EOS], logprob[BOS, b] + logprob[b, c] + logprob[c, d] + logprob[d, EOS]
    assert short[1] > long[1]

    step = bigram_step_fn(jnp.asarray(logprob[None], jnp.float32))
    search = jax.jit(functools.partial(beam_search, step, penalty_form=form), static_argnums=(2, 3))
    winners = set()
    for alpha in (0.0, 1.0, 3.0):
        by_formula = max(short, long, key=lambda h: h[1] / penalty(len(h[0]), alpha))
        tokens, scores = search(
            tile_beams(jnp.zeros((1,), jnp.int32), 2), jnp.array([6]), 6, 2, alpha
        )
        assert through_first_eos(tokens[0, 0]) == by_formula[0]
        expected_score = by_formula[1] / penalty(len(by_formula[0]), alpha)
        np.testing.assert_allclose(float(scores[0, 0]), expected_score, rtol=1e-5)
        winners.add(tuple(by_formula[0]))
    assert len(winners) == 2  # the penalty did flip the ranking
