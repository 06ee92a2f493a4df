"""A forced target prefix: greedy search, sampling and beam search start with each row's
prefix and go on as a reference loop without a cache would (the decoder re-run over the
whole forced prefix); an empty prefix is no prefix; rows of one batch keep their own."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decoding import full_decoder, rerun_over_prefix, sources, through_first_eos, tiny_model
from tiny_configs import WordTokenizer

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import beam_decode, greedy_decode, sample_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.search import row_keys, sampling_logits
from jaxtrans.inference.translate import translate, translate_ids
from jaxtrans.tasks.translation.translation_predict import split_prefixes
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

STEPS = 9
# One prefix a row of sources(), PAD after its end: lengths 0 to 3 in one batch.
PREFIX = np.array(
    [[4, 5, 6], [7, 0, 0], [0, 0, 0], [9, 9, 0], [3, 0, 0], [12, 11, 10], [0, 0, 0], [8, 4, 0]],
    np.int32,
)
# Every row may produce STEPS tokens after its prefix.
LENGTHS = jnp.asarray(STEPS + (PREFIX != PAD_ID).sum(1), jnp.int32)
MAX_LEN = STEPS + PREFIX.shape[1]


def forced_reference_loop(choose, steps: int = MAX_LEN) -> np.ndarray:
    """Decode sources() step by step without a cache: at step t the whole decoder re-runs
    over BOS and the t tokens so far; rows still in their prefix take its token, the others
    ``choose(allowed_logits [rows, vocab], t) -> [rows]``; a row ends after EOS or at its
    length. Returns tokens [rows, steps], PAD after each row's end."""
    config, params = tiny_model()
    src = sources()
    rows = src.shape[0]
    target = np.full((rows, steps + 1), PAD_ID)
    target[:, 0] = BOS_ID
    done = np.zeros(rows, bool)
    lengths = np.asarray(LENGTHS)
    for t in range(steps):
        logits = rerun_over_prefix(config, params, src, target, t)
        logits[:, [PAD_ID, BOS_ID]] = -np.inf  # decoding never emits padding or the start
        token = np.asarray(choose(logits, t))
        forced = PREFIX[:, t] if t < PREFIX.shape[1] else np.full(rows, PAD_ID)
        token = np.where(forced != PAD_ID, forced, token)
        target[:, t + 1] = np.where(done, PAD_ID, token)
        done |= (token == EOS_ID) | (t + 1 >= lengths)
    return target[:, 1:]


def assert_starts_with_the_prefix(tokens: np.ndarray) -> None:
    for row, prefix in zip(np.asarray(tokens), PREFIX, strict=True):
        prefix = prefix[prefix != PAD_ID]
        np.testing.assert_array_equal(row[: len(prefix)], prefix)


@pytest.mark.slow
def test_greedy_output_starts_with_each_rows_prefix_and_goes_on_as_the_uncached_loop():
    config, params = tiny_model()
    got = np.asarray(
        greedy_decode(params, sources(), LENGTHS, config=config, max_len=MAX_LEN, prefix=PREFIX)
    )
    assert_starts_with_the_prefix(got)
    want = forced_reference_loop(lambda logits, _: logits.argmax(-1))
    np.testing.assert_array_equal(got, want)
    # The prefix changed what followed it (it is in the cache, not just printed in front).
    plain = np.asarray(greedy_decode(params, sources(), LENGTHS, config=config, max_len=MAX_LEN))
    assert (got[:, 3:] != plain[:, 3:]).any()


@pytest.mark.slow
def test_a_sample_after_the_prefix_draws_as_the_uncached_loop_with_the_same_keys():
    config, params = tiny_model()
    keys = row_keys(7, jnp.arange(8))
    got = np.asarray(
        sample_decode(params, sources(), LENGTHS, keys, SearchOptions(temperature=0.7, top_p=0.95),
                      config=config, max_len=MAX_LEN, prefix=PREFIX)
    )  # fmt: skip

    def draw(logits, t):
        kept = sampling_logits(jnp.asarray(logits, jnp.float32), 0.7, 0, 0.95)
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, t)
        return jax.vmap(jax.random.categorical)(step_keys, kept)

    assert_starts_with_the_prefix(got)
    np.testing.assert_array_equal(got, forced_reference_loop(draw))
    greedy = greedy_decode(
        params, sources(), LENGTHS, config=config, max_len=MAX_LEN, prefix=PREFIX
    )
    assert (got != np.asarray(greedy)).any()  # a draw, not the most probable tokens


@pytest.mark.slow
def test_beam_with_a_prefix_finds_the_best_continuation_of_exhaustive_enumeration():
    vocab, length, alpha = 5, 4, 0.6
    config, params = tiny_model("sinusoidal", vocab=vocab)
    src, prefix = jnp.array([[3, 4, 3, EOS_ID]]), [4]
    tokens = [t for t in range(vocab) if t not in (PAD_ID, BOS_ID)]
    # Every hypothesis: the prefix, then tokens up to `length` in all, stopping at EOS.
    candidates = [
        [*prefix, *seq]
        for n in range(1, length - len(prefix) + 1)
        for seq in itertools.product(tokens, repeat=n)
        if EOS_ID not in seq[:-1] and (seq[-1] == EOS_ID or len(prefix) + n == length)
    ]
    target_in = np.full((len(candidates), length), PAD_ID)
    for row, seq in enumerate(candidates):
        target_in[row, : len(seq)] = [BOS_ID, *seq[:-1]]
    logits = full_decoder(config)(params, jnp.repeat(src, len(candidates), 0), target_in)
    logits = np.asarray(logits, np.float64)[:, :, tokens]  # PAD and BOS are never choices
    logprobs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    # The prefix's log-probabilities count, and the length penalty counts its tokens.
    scores = [
        sum(logprobs[row, t, tokens.index(token)] for t, token in enumerate(seq))
        / ((5 + len(seq)) / 6) ** alpha
        for row, seq in enumerate(candidates)
    ]

    beam = len(tokens) ** (length - len(prefix))  # room for every continuation
    out, out_scores = beam_decode(
        params, src, jnp.array([length]), SearchOptions(beam_size=beam, alpha=alpha),
        config=config, max_len=length, prefix=np.array([prefix]),
    )  # fmt: skip
    assert through_first_eos(out[0, 0]) == candidates[int(np.argmax(scores))]
    found = {
        tuple(through_first_eos(row)): float(score)
        for row, score in zip(np.asarray(out[0]), np.asarray(out_scores[0]), strict=True)
        if np.isfinite(score)
    }
    assert sorted(found) == sorted(map(tuple, candidates))  # every beam carried the prefix
    for seq, score in zip(candidates, scores, strict=True):
        assert abs(found[tuple(seq)] - score) <= 1e-5


@pytest.mark.slow
def test_an_empty_prefix_is_no_prefix_in_greedy_search_sampling_and_beam_search():
    config, params = tiny_model()
    src, empty = sources(), np.zeros((8, 3), np.int32)
    common = dict(config=config, max_len=MAX_LEN)
    for decode, args in (
        (greedy_decode, ()),
        (sample_decode, (row_keys(1, jnp.arange(8)), SearchOptions())),
    ):
        plain = decode(params, src, LENGTHS, *args, **common)
        np.testing.assert_array_equal(
            decode(params, src, LENGTHS, *args, prefix=empty, **common), plain
        )
    beam = SearchOptions(beam_size=3)
    plain_tokens, plain_scores = beam_decode(params, src, LENGTHS, beam, **common)
    tokens, scores = beam_decode(params, src, LENGTHS, beam, prefix=empty, **common)
    np.testing.assert_array_equal(tokens, plain_tokens)
    # Two compiled programs (the prefix one ranks tokens among the allowed): XLA may sum a
    # row's exponentials in another order, a last-bit difference in a log-probability
    # (2e-7 relative seen); a prefix token counted wrongly would move a score by far more.
    np.testing.assert_allclose(scores, plain_scores, rtol=1e-6)


@functools.cache
def _beam_translations(batch_size: int) -> list[list[int]]:
    config, params = tiny_model()
    sentences = [[*map(int, s[s != PAD_ID]), EOS_ID] for s in np.asarray(sources())]
    prefixes = [list(p[p != PAD_ID]) for p in PREFIX]
    options = SearchOptions(batch_size=batch_size, beam_size=3, max_extra_length=4,
                            length_multiple=4)  # fmt: skip
    return translate_ids(config, params, sentences, options, prefixes=prefixes)


@pytest.mark.slow
def test_beam_rows_with_different_prefixes_in_one_batch_equal_each_alone():
    together = _beam_translations(8)
    assert together == _beam_translations(1)
    for hypothesis, prefix in zip(together, PREFIX, strict=True):
        prefix = list(prefix[prefix != PAD_ID])
        assert hypothesis[: len(prefix)] == prefix


@pytest.mark.slow
def test_a_text_prefix_is_one_for_every_sentence_or_one_each():
    config, params = tiny_model()
    texts = ["5 6 7", "8 9 10 11", "3 4"]
    options = SearchOptions(beam_size=1, max_extra_length=3, length_multiple=4)
    for translation in translate(config, params, WordTokenizer(), texts, options, prefix="12 4"):
        assert translation.startswith("12 4")
    each = translate(config, params, WordTokenizer(), texts, options, prefix=["7", "", "9 9"])
    assert each[0].startswith("7") and each[2].startswith("9 9")
    assert each[1] == translate(config, params, WordTokenizer(), texts[1:2], options)[0]


@pytest.mark.parametrize(
    "prefixes, message",
    [
        ([[4], [5]], r"^2 prefixes for 3 sentences; give one a sentence$"),
        ([[4], [5, EOS_ID], []], rf"^the prefix of sentence 1 holds the reserved id {EOS_ID} "),
        ([[BOS_ID], [], []], rf"^the prefix of sentence 0 holds the reserved id {BOS_ID} "),
    ],
)
def test_a_prefix_a_sentence_without_reserved_ids_or_a_one_line_error(prefixes, message):
    with pytest.raises(UserError, match=message):
        translate_ids(*tiny_model(), [[5, EOS_ID]] * 3, prefixes=prefixes)


def test_prefix_from_input_splits_each_line_at_its_one_tab():
    lines = ["ke tafo .\tthe", "ke lesa .\t", "miro .\tthe man"]
    assert split_prefixes(lines, None, True) == (
        ["ke tafo .", "ke lesa .", "miro ."],
        ["the", "", "the man"],
    )
    assert split_prefixes(lines[:1], "a", False) == (lines[:1], "a")
    for bad, said in (("no tab", "has 0 TABs"), ("a\tb\tc", "has 2 TABs")):
        with pytest.raises(UserError, match=rf"^input line 2 {said}; with --prefix_from_input"):
            split_prefixes(["ok\tfine", bad], None, True)
    with pytest.raises(UserError, match="not both"):
        split_prefixes(lines, "the", True)
