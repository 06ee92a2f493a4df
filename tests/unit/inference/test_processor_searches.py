"""The searches with logits processors (search.py, beam_search.py): greedy search step by
step against a loop calling transformers' processor classes, narrowed or not; sampling
that never repeats a banned n-gram and is greedy at temperature 0; ensembles; beam search
scoring the processed log-probabilities; forced prefixes.

The model is a table: a row's logits are table[last token] + its own bias, a table made
to cycle (each token strongly prefers the next of a cycle of three), so that a plain
search repeats itself and every processor changes what it emits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.inference.beam_search import beam_search, tile_beams
from jaxtrans.inference.decode_plan import DecodePlan
from jaxtrans.inference.ensemble import ensemble_decoder, mean_log_probs
from jaxtrans.inference.logits_processors import logits_processors
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.search import Decoder, greedy_search, row_keys, sample_search
from jaxtrans.inference.staged_search import staged_run
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

torch = pytest.importorskip("torch")
logits_process = pytest.importorskip("transformers.generation.logits_process")

VOCAB, ROWS, MAX_LEN = 12, 16, 14
SETTINGS = [
    dict(repetition_penalty=1.8),
    dict(repetition_penalty=0.6),
    dict(no_repeat_ngram_size=2),
    dict(no_repeat_ngram_size=3),
    dict(repetition_penalty=1.3, no_repeat_ngram_size=2),
]


def tables(seed: int = 0):
    """table [VOCAB, VOCAB] (cycles 3 -> 4 -> 5 -> 3, 6 -> 7 -> 8 -> 6, ...) and bias
    [ROWS, VOCAB], float32, EOS unlikely (outputs run to the limit)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(VOCAB, VOCAB)).astype(np.float32)
    for t in range(3, VOCAB):
        table[t, 3 + 3 * ((t - 3) // 3) + (t - 3 + 1) % 3] += 4.0
    table[:, EOS_ID] -= 1.5
    bias = (rng.normal(size=(ROWS, VOCAB)) * 0.5).astype(np.float32)
    return table, bias


def table_decoder(table, bias) -> Decoder:
    """Logits table[tokens] + bias[row]; narrowing keeps the rows' biases."""

    def step(cache, tokens, position):
        return jnp.asarray(table)[tokens] + cache, cache

    def narrow(cache, rows):
        return Decoder(step, cache[rows], narrow)

    return Decoder(step, jnp.asarray(bias), narrow)


def hf_list(settings: dict):
    """transformers' processors of ``settings``, in generate's order."""
    processors = logits_process.LogitsProcessorList()
    if settings.get("repetition_penalty", 1.0) != 1.0:
        processors.append(
            logits_process.RepetitionPenaltyLogitsProcessor(settings["repetition_penalty"])
        )
    if settings.get("no_repeat_ngram_size", 0):
        processors.append(
            logits_process.NoRepeatNGramLogitsProcessor(settings["no_repeat_ngram_size"])
        )
    return processors


def allowed(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float32).copy()
    logits[[PAD_ID, BOS_ID]] = -np.inf
    return logits


def reference_greedy(logits_of, settings: dict, prefix=()) -> list[list[int]]:
    """transformers' greedy loop: input_ids start with the decoder's start token (BOS
    here, which it never emits), the processors see them all, then the argmax."""
    hf = hf_list(settings)
    outputs = []
    for row in range(ROWS):
        ids = [BOS_ID]
        for t in range(MAX_LEN):
            scores = torch.tensor(allowed(logits_of(row, ids[-1]))[None])
            token = prefix[t] if t < len(prefix) else int(hf(torch.tensor([ids]), scores).argmax())
            ids.append(token)
            if token == EOS_ID:
                break
        outputs.append(ids[1:])
    return outputs


def output_ids(tokens: np.ndarray) -> list[list[int]]:
    """tokens [rows, max_len] -> each row up to its EOS (included), PAD dropped."""
    out = []
    for row in np.asarray(tokens).tolist():
        ids = [t for t in row if t != PAD_ID]
        out.append(ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids)
    return out


def greedy(decoder: Decoder, settings: dict, stages=(), prefix=None) -> list[list[int]]:
    processors = logits_processors(SearchOptions(**settings))
    run = jax.jit(
        lambda cache: greedy_search(
            decoder.step, cache, jnp.full((ROWS,), MAX_LEN), MAX_LEN, prefix=prefix,
            run=staged_run(DecodePlan(MAX_LEN, MAX_LEN, tuple(stages)), decoder.narrow, None),
            processors=processors,
        )
    )  # fmt: skip
    return output_ids(run(decoder.cache))


def repeats_an_ngram(ids: list[int], n: int, after: int = 0) -> bool:
    """Whether an n-gram ending at a position >= ``after`` occurs earlier in ids."""
    grams = [tuple(ids[j : j + n]) for j in range(len(ids) - n + 1)]
    return any(g in grams[:j] for j, g in enumerate(grams) if j + n - 1 >= after)


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("stages", [(), (8, 3)])
def test_greedy_search_with_processors_equals_transformers_greedy_loop(settings, stages):
    table, bias = tables()
    expected = reference_greedy(lambda row, last: table[last] + bias[row], settings)
    assert expected != reference_greedy(lambda row, last: table[last] + bias[row], {})
    assert greedy(table_decoder(table, bias), settings, stages) == expected


def test_the_ensemble_processes_its_mean_log_probabilities():
    (table, bias), (table2, bias2) = tables(0), tables(1)
    settings = dict(repetition_penalty=1.5, no_repeat_ngram_size=2)
    decoder = ensemble_decoder([table_decoder(table, bias), table_decoder(table2, bias2)])

    def mean(row, last):
        both = [jnp.asarray(table[last] + bias[row]), jnp.asarray(table2[last] + bias2[row])]
        return np.asarray(mean_log_probs(both))

    assert greedy(decoder, settings, stages=(8,)) == reference_greedy(mean, settings)


def test_sampling_never_repeats_a_banned_ngram_and_is_greedy_at_temperature_zero():
    table, bias = tables()
    decoder = table_decoder(table, bias)
    keys = row_keys(0, jnp.arange(ROWS))

    def sample(settings, temperature):
        processors = logits_processors(SearchOptions(**settings))
        tokens = sample_search(
            decoder.step, decoder.cache, jnp.full((ROWS,), MAX_LEN), MAX_LEN, keys,
            temperature=temperature, processors=processors,
        )  # fmt: skip
        return output_ids(tokens)

    settings = dict(no_repeat_ngram_size=2)
    assert any(repeats_an_ngram(ids, 2) for ids in sample({}, 1.0))
    assert not any(repeats_an_ngram(ids, 2) for ids in sample(settings, 1.0))
    both = dict(repetition_penalty=1.4, no_repeat_ngram_size=3)
    assert sample(both, 0.0) == greedy(decoder, both)


def beam(decoder: Decoder, settings: dict, k: int = 4, prefix=None, processors=None):
    """Finished tokens [ROWS, k, MAX_LEN], scores and summed log-probabilities (NumPy)."""
    if processors is None:
        processors = logits_processors(SearchOptions(**settings))
    cache = tile_beams(decoder.cache, k)
    found = beam_search(
        decoder.step, cache, jnp.full((ROWS,), MAX_LEN), MAX_LEN, k, 1.0, penalty_form="hf",
        prefix=prefix, return_logprobs=True, processors=processors,
    )  # fmt: skip
    return tuple(np.asarray(x) for x in found)


def processed_logprob(table, bias, row: int, ids: list[int], settings: dict) -> float:
    """The sum, over a hypothesis' tokens, of transformers' processors run on log_softmax
    of each step's logits, in float64 from the float32 values."""
    hf, total, so_far = hf_list(settings), 0.0, [BOS_ID]
    for token in ids:
        logprobs = torch.log_softmax(torch.tensor(allowed(table[so_far[-1]] + bias[row])), -1)
        total += float(hf(torch.tensor([so_far]), logprobs[None])[0, token])
        so_far.append(token)
    return total


@pytest.mark.parametrize("settings", SETTINGS)
def test_beam_hypotheses_sum_the_processed_log_probabilities(settings):
    table, bias = tables()
    tokens, scores, logprobs = beam(table_decoder(table, bias), settings)
    plain, _, _ = beam(table_decoder(table, bias), {})
    assert not np.array_equal(tokens, plain)
    n = settings.get("no_repeat_ngram_size", 0)
    for row in range(ROWS):
        for k, ids in enumerate(output_ids(tokens[row])):
            expected = processed_logprob(table, bias, row, ids, settings)
            np.testing.assert_allclose(logprobs[row, k], expected, rtol=1e-5)
            np.testing.assert_allclose(scores[row, k], logprobs[row, k] / len(ids), rtol=1e-6)
            assert not (n and repeats_an_ngram(ids, n))


@pytest.mark.parametrize("with_prefix", [False, True])
def test_processors_that_change_nothing_leave_beam_search_as_it_is(with_prefix):
    """The processed path takes its top-k from the whole log_softmax; the plain one reads
    the vocabulary by blocks (top_tokens.py): the same tokens, scores and ties."""
    table, bias = tables()
    prefix = jnp.asarray(np.tile([5, 3, 4, PAD_ID], (ROWS, 1))) if with_prefix else None
    unchanged = (lambda scores, tokens, i: scores,)
    got = beam(table_decoder(table, bias), {}, prefix=prefix, processors=unchanged)
    expected = beam(table_decoder(table, bias), {}, prefix=prefix)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)


def test_a_prefix_is_forced_whole_and_its_ngrams_are_banned_after_it():
    """A prefix that repeats a bigram itself: forced all the same (its steps are not
    processed), and no later token completes a bigram seen before, the prefix's included."""
    table, bias = tables()
    forced = [5, 3, 5, 3, 4]
    prefix = jnp.asarray(np.tile([*forced, PAD_ID], (ROWS, 1)))
    settings = dict(no_repeat_ngram_size=2)
    decoder = table_decoder(table, bias)
    expected = reference_greedy(lambda row, last: table[last] + bias[row], settings, forced)
    outputs = greedy(decoder, settings, prefix=prefix)
    tokens, scores, _ = beam(decoder, settings, prefix=prefix)
    assert outputs == expected
    hypotheses = outputs + [ids for row in tokens for ids in output_ids(row)]
    for ids in hypotheses:
        assert ids[: len(forced)] == forced and not repeats_an_ngram(ids, 2, after=len(forced))
    assert np.isfinite(scores).all()
