"""Ensemble decoding (inference.ensemble): an ensemble of one model decodes as the model;
an ensemble of two chooses every token by the mean of the two models' probabilities, as a
float64 reference loop without a cache computes it from their logits, in greedy and beam
search alike; members of different shapes decode together."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding import full_decoder, rerun_over_prefix, sources, through_first_eos
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.decoding import beam_decode, decoder, greedy_decode, sample_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.search import row_keys
from jaxtrans.inference.translate import length_batches, translate_ids
from jaxtrans.models import Transformer
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

VOCAB = 13
STEPS = 7
LENGTHS = jnp.array([6, 3, 7, 5, 7, 7, 4, 7])
# The second member of each pair: the first's shape, or a larger one with other positions.
SAME_SHAPE = {}
OTHER_SHAPE = dict(
    position="learned", d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2,
    num_decoder_layers=1,
)  # fmt: skip


@functools.cache
def random_model(seed: int, shape: tuple = ()) -> tuple:
    """(config, params) of a tiny model with random weights (key ``seed``), of the tiny
    shape changed by ``shape`` (key-value pairs). EOS takes over the output weights of the
    last token, slightly ahead of it, so that hypotheses end at varied steps."""
    changes = dict(shape)
    config = tiny_transformer_config(changes.pop("position", "rope"), VOCAB, **changes)
    ids = jnp.ones((1, 4), jnp.int32)
    params = nn.unbox(jax.jit(Transformer(config).init)(jax.random.key(seed), ids, ids))["params"]
    kernel, bias = params["output"]["kernel"], params["output"]["bias"]
    params["output"] = {
        "kernel": kernel.at[:, EOS_ID].set(kernel[:, -1]),
        "bias": bias.at[EOS_ID].set(bias[-1] + 0.1),
    }
    return config, params


def pair(second_shape: dict) -> list[tuple]:
    """Two members: the tiny model of seed 1 and one of seed 5 of ``second_shape`` (whose
    greedy outputs together end at varied steps)."""
    return [random_model(1), random_model(5, tuple(sorted(second_shape.items())))]


def ensemble(models) -> tuple[tuple, tuple]:
    """Decoding's ensemble of [(config, params)]: (configs, params), tuples."""
    return tuple(c for c, _ in models), tuple(p for _, p in models)


@functools.partial(jax.jit, static_argnames="config")
def ensemble_step_logprobs(params, src, target, *, config) -> jnp.ndarray:
    """Feed target [batch, T] through the ensemble's cached step, one token a step ->
    its next-token log-probabilities [batch, T, vocab]."""
    step, cache, _ = decoder(config, params, src, target.shape[1])

    def feed(cache, t):
        logprobs, cache = step(cache, target[:, t], t)
        return cache, logprobs

    _, logprobs = jax.lax.scan(feed, cache, jnp.arange(target.shape[1]))
    return logprobs.transpose(1, 0, 2)


def softmax64(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference_mean(models, src, target, t: int) -> np.ndarray:
    """The mean of the models' probabilities [batch, vocab] (float64) at position t, each
    model's decoder re-run over target[:, :t + 1] without a cache."""
    return np.mean([softmax64(rerun_over_prefix(c, p, src, target, t)) for c, p in models], 0)


def random_targets(steps: int = STEPS) -> np.ndarray:
    target = np.random.default_rng(3).integers(3, VOCAB, size=(8, steps))
    target[:, 0] = BOS_ID
    return target


@pytest.mark.slow
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_an_ensemble_of_one_decodes_as_its_model(search):
    config, params = random_model(1)
    src = sources()
    one = dict(config=config, max_len=STEPS)
    alone = dict(config=(config,), max_len=STEPS)
    if search == "greedy":
        got = greedy_decode((params,), src, LENGTHS, **alone)
        np.testing.assert_array_equal(got, greedy_decode(params, src, LENGTHS, **one))
    elif search == "sample":
        keys = row_keys(0, jnp.arange(8))
        options = SearchOptions(temperature=0.8)
        got = sample_decode((params,), src, LENGTHS, keys, options, **alone)
        want = sample_decode(params, src, LENGTHS, keys, options, **one)
        np.testing.assert_array_equal(got, want)
    else:
        beam = SearchOptions(beam_size=3, alpha=0.6)
        tokens, scores, logprobs = beam_decode(
            (params,), src, LENGTHS, beam, return_logprobs=True, **alone
        )
        want_tokens, want_scores, want_logprobs = beam_decode(
            params, src, LENGTHS, beam, return_logprobs=True, **one
        )
        np.testing.assert_array_equal(tokens, want_tokens)
        np.testing.assert_allclose(scores, want_scores, atol=1e-5, rtol=0)
        np.testing.assert_allclose(logprobs, want_logprobs, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("second", [SAME_SHAPE, OTHER_SHAPE], ids=["same-shape", "other-shape"])
def test_each_step_is_the_log_of_the_mean_of_the_two_models_probabilities(second):
    models = pair(second)
    src, target = sources(), random_targets()
    configs, params = ensemble(models)
    got = np.asarray(ensemble_step_logprobs(params, src, jnp.asarray(target), config=configs))
    for t in range(STEPS):
        want = np.log(reference_mean(models, src, target, t))
        np.testing.assert_allclose(got[:, t], want, atol=5e-6, rtol=0)
    # The mean is not either model's own distribution.
    alone = softmax64(rerun_over_prefix(*models[0], src, target, STEPS - 1))
    assert np.abs(np.exp(got[:, -1]) - alone).max() > 1e-3


def reference_greedy(models, src, steps: int) -> np.ndarray:
    """Greedy search by hand: re-run both decoders on the growing prefix, append the most
    probable token of the mean (never PAD or BOS)."""
    target = np.full((src.shape[0], steps + 1), PAD_ID)
    target[:, 0] = BOS_ID
    for t in range(steps):
        mean = reference_mean(models, src, target, t)
        mean[:, [PAD_ID, BOS_ID]] = 0.0
        target[:, t + 1] = mean.argmax(-1)
    return target[:, 1:]


@pytest.mark.slow
@pytest.mark.parametrize("second", [SAME_SHAPE, OTHER_SHAPE], ids=["same-shape", "other-shape"])
def test_greedy_search_over_two_models_takes_the_most_probable_token_of_the_mean(second):
    models = pair(second)
    src, steps = sources(), STEPS
    configs, params = ensemble(models)
    got = np.asarray(greedy_decode(params, src, jnp.full((8,), steps), config=configs,
                                   max_len=steps))  # fmt: skip
    want = reference_greedy(models, src, steps)
    assert any(EOS_ID in row for row in want.tolist())
    for row, expected in zip(got, want, strict=True):
        expected = through_first_eos(expected)
        assert row[: len(expected)].tolist() == expected


def teacher_forced_logprob(models, src_row, hypothesis: list[int]) -> float:
    """log p(hypothesis) under the mean of the models, each step's mean renormalised over
    the tokens decoding may emit (all but PAD and BOS), the hypothesis fed whole."""
    target_in = np.array([[BOS_ID, *hypothesis[:-1]]], np.int32)
    src = jnp.asarray(src_row)[None]
    probs = np.mean(
        [softmax64(full_decoder(c)(p, src, jnp.asarray(target_in))[0]) for c, p in models], 0
    )
    probs[:, [PAD_ID, BOS_ID]] = 0.0
    probs /= probs.sum(-1, keepdims=True)
    return float(sum(np.log(probs[t, token]) for t, token in enumerate(hypothesis)))


@pytest.mark.slow
@pytest.mark.parametrize("second", [SAME_SHAPE, OTHER_SHAPE], ids=["same-shape", "other-shape"])
def test_beam_search_over_two_models_scores_the_mean_distribution(second):
    models = pair(second)
    src = sources()
    configs, params = ensemble(models)
    tokens, _, logprobs = beam_decode(
        params, src, LENGTHS, SearchOptions(beam_size=3), config=configs, max_len=STEPS,
        return_logprobs=True,
    )  # fmt: skip
    checked = 0
    for b in range(src.shape[0]):
        for k in range(3):
            if not np.isfinite(logprobs[b, k]):
                continue
            # Through EOS, or all its tokens where it ran to its length.
            hypothesis = [t for t in through_first_eos(tokens[b, k]) if t != PAD_ID]
            want = teacher_forced_logprob(models, src[b], hypothesis)
            assert abs(float(logprobs[b, k]) - want) < 1e-4
            checked += 1
    assert checked >= 16


@pytest.mark.slow
def test_translating_with_an_ensemble_keeps_within_the_shortest_position_table():
    # Learned position tables of 32 and 10 positions.
    models = [random_model(1, (("position", "learned"),)),
              random_model(2, (("max_len", 10), ("position", "learned")))]  # fmt: skip
    configs, params = ensemble(models)
    sentences = [[*range(3, 3 + n), EOS_ID] for n in (2, 5, 12)]
    batches = length_batches(configs, sentences, None, batch_size=4, max_extra_length=5,
                             length_multiple=4)  # fmt: skip
    assert max(batch.max_len for batch in batches) == 10
    for beam_size in (1, 2):
        options = SearchOptions(beam_size=beam_size, max_extra_length=5, length_multiple=4)
        out = translate_ids(configs, params, sentences, options)
        assert len(out) == 3 and all(len(ids) <= 10 for ids in out)
