"""N-best lists (inference.nbest): their scores against the model re-scoring each hypothesis
under teacher forcing, their order and distinctness, nbest 1 against the ordinary output,
the report's .nbest.jsonl, the settings' errors, and lists with logits processors."""

import functools
import json

import ml_collections
import numpy as np
import pytest
from test_decoding import full_decoder, sources, tiny_model
from tiny_configs import WordTokenizer

from jaxtrans.errors import UserError
from jaxtrans.inference.nbest import check_nbest, nbest_ids, nbest_json, translate_nbest
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.report import ReportContext, evaluate_translations
from jaxtrans.inference.translate import translate_ids
from jaxtrans.tasks.translation.decoding_settings import decoding_settings
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

MAX_EXTRA = 5
# Longer than any output here: 6 source tokens and EOS + MAX_EXTRA + a 3-token prefix.
TARGET_LEN = 16
SEARCH = SearchOptions(beam_size=4, alpha=0.6, max_extra_length=MAX_EXTRA, length_multiple=8)
# Forced prefixes of the eight sentences (PAD, BOS and EOS are never among them): none,
# then of one to three tokens, so one batch holds rows of different prefix lengths.
PREFIXES = [[], [4], [7, 8], [], [5, 6, 9], [12], [], [3, 3]]


def sentences() -> list[list[int]]:
    """The eight sources of test_decoding, as id lists ending in EOS."""
    return [[*map(int, s[s != PAD_ID]), EOS_ID] for s in np.asarray(sources())]


@functools.cache
def lists(nbest: int, with_prefixes: bool = False, penalty_form: str = "gnmt", beam_size=4):
    """nbest_ids of the tiny model over sentences(), one batch."""
    config, params = tiny_model()
    search = SEARCH.replace(beam_size=beam_size, penalty_form=penalty_form)
    prefixes = PREFIXES if with_prefixes else None
    return nbest_ids(config, params, sentences(), nbest, search, prefixes=prefixes)


def teacher_forced_logprobs(rows: list[tuple[int, list[int]]]) -> np.ndarray:
    """The model's summed log-probability of each (sentence, output) (output: EOS included
    where it ends in one), the output fed whole to the decoder without a cache: each
    token's log_softmax over the tokens decoding may emit (all but PAD and BOS), in
    float64. One call: outputs right-padded to TARGET_LEN (padding is in their future)."""
    config, params = tiny_model()
    source = np.full((len(rows), 8), PAD_ID, np.int32)
    target_in = np.full((len(rows), TARGET_LEN), PAD_ID, np.int32)
    for row, (sentence, output) in enumerate(rows):
        source[row, : len(sentences()[sentence])] = sentences()[sentence]
        target_in[row, : len(output)] = [BOS_ID, *output[:-1]]
    logits = np.asarray(full_decoder(config)(params, source, target_in), np.float64)
    logits[:, :, [PAD_ID, BOS_ID]] = -np.inf
    logprobs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return np.array(
        [sum(logprobs[row, t, token] for t, token in enumerate(output))
         for row, (_, output) in enumerate(rows)]
    )  # fmt: skip


def penalty(length: int, alpha: float, form: str) -> float:
    return length**alpha if form == "hf" else ((5 + length) / 6) ** alpha


def with_end(source, prefix, ids) -> list[int]:
    """A hypothesis' tokens as decoded: its ids, then EOS unless it ran to its limit."""
    limit = len(source) + MAX_EXTRA + len(prefix)
    return ids if len(ids) == limit else [*ids, EOS_ID]


@pytest.mark.slow
@pytest.mark.parametrize("penalty_form, with_prefixes", [("gnmt", False), ("hf", True)])
def test_scores_are_the_teacher_forced_logprob_and_its_length_penalised_value(
    penalty_form, with_prefixes
):
    found = lists(4, with_prefixes, penalty_form)
    prefixes = PREFIXES if with_prefixes else [[]] * len(found)
    rows, hypotheses = [], []
    for sentence, listed in enumerate(found):
        assert len(listed) == 4
        source, prefix = sentences()[sentence], prefixes[sentence]
        for hypothesis in listed:
            assert hypothesis.ids[: len(prefix)] == prefix
            rows.append((sentence, with_end(source, prefix, hypothesis.ids)))
            hypotheses.append(hypothesis)
    expected = teacher_forced_logprobs(rows)
    for (_, output), hypothesis, want in zip(rows, hypotheses, expected, strict=True):
        assert hypothesis.logprob == pytest.approx(want, abs=1e-4)
        divisor = penalty(len(output), SEARCH.alpha, penalty_form)
        assert hypothesis.score == pytest.approx(hypothesis.logprob / divisor, rel=1e-5)
    at_eos = [output[-1] == EOS_ID for _, output in rows]
    assert any(at_eos) and not all(at_eos)  # both ways of ending: at EOS, at the limit


@pytest.mark.slow
def test_each_list_holds_n_distinct_hypotheses_sorted_by_score():
    for hypotheses in lists(4):
        assert len(hypotheses) == 4
        assert len({tuple(h.ids) for h in hypotheses}) == 4
        scores = [h.score for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
    # A shorter list is the longer one's head: both come from the same beam.
    assert lists(2) == [hypotheses[:2] for hypotheses in lists(4)]


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4])
def test_nbest_one_is_the_ordinary_beam_output(beam_size):
    config, params = tiny_model()
    ordinary = translate_ids(config, params, sentences(), SEARCH.replace(beam_size=beam_size))
    best = lists(1, beam_size=beam_size)
    assert [[h.ids for h in hypotheses] for hypotheses in best] == [[ids] for ids in ordinary]
    assert len(set(map(tuple, ordinary))) > 1


@pytest.mark.slow
def test_translated_lists_are_the_texts_of_the_id_lists_and_their_json_lines():
    config, params = tiny_model()
    texts = [" ".join(map(str, s[:-1])) for s in sentences()]
    translated = translate_nbest(config, params, WordTokenizer(), texts, 4, SEARCH)
    for hypotheses, scored in zip(translated, lists(4), strict=True):
        assert [h.text for h in hypotheses] == [" ".join(map(str, s.ids)) for s in scored]
        assert [(h.score, h.logprob) for h in hypotheses] == [(s.score, s.logprob) for s in scored]
    line = json.loads(nbest_json(texts[0], translated[0]))
    assert line["source"] == texts[0] and len(line["hypotheses"]) == 4
    assert line["hypotheses"][0] == {
        "text": translated[0][0].text,
        "score": translated[0][0].score,
        "logprob": translated[0][0].logprob,
    }


@pytest.mark.slow
def test_a_report_with_nbest_scores_the_first_hypothesis_and_writes_the_lists_beside(tmp_path):
    config, params = tiny_model()
    pairs = [("5 6 7", "6 5 4"), ("8 9 10 11 12", "9 9 12"), ("9 9", "2 2 2")]
    options = SearchOptions(beam_size=3, max_extra_length=3)
    quiet = dict(step=5, split="test", checkpoint="latest", printer=lambda _: None)
    plain = ReportContext(str(tmp_path / "plain"), **quiet)
    evaluate_translations(config, params, WordTokenizer(), pairs, plain, options)
    context = ReportContext(str(tmp_path), **quiet)
    report = evaluate_translations(config, params, WordTokenizer(), pairs, context, options, 3)
    plain = json.loads((tmp_path / "plain" / "test-step5.json").read_text())
    assert (report["bleu"], report["chrf"]) == (plain["bleu"], plain["chrf"])
    assert (report["nbest"], report["nbest_file"]) == (3, "test-step5.nbest.jsonl")
    hypotheses = (tmp_path / "test-step5.hyp.txt").read_text().splitlines()
    assert hypotheses == (tmp_path / "plain" / "test-step5.hyp.txt").read_text().splitlines()
    listed = [json.loads(line) for line in (tmp_path / "test-step5.nbest.jsonl").open()]
    assert [line["source"] for line in listed] == [source for source, _ in pairs]
    assert [line["hypotheses"][0]["text"] for line in listed] == hypotheses
    assert all(len(line["hypotheses"]) == 3 for line in listed)


def test_nbest_is_checked_against_the_beam_and_sampling_with_one_line_errors():
    run = ml_collections.ConfigDict({"eval": {"beam_size": 4}})
    assert decoding_settings(run).nbest == 0
    assert decoding_settings(run, nbest=4).nbest == 4
    for given, message in (
        ({"nbest": 5}, r"^nbest=5 with beam_size=4: .* give beam_size >= 5$"),
        ({"nbest": 2, "beam_size": 1}, r"^nbest=2 with beam_size=1: "),
        ({"nbest": -1}, r"^nbest=-1: must be a whole number >= 1"),
        ({"nbest": 2, "sampling": True}, r"^nbest=2 with sampling: .* drop nbest or sampling$"),
    ):
        with pytest.raises(UserError, match=message) as error:
            decoding_settings(run, **given)
        assert "\n" not in str(error.value)
    with pytest.raises(UserError, match=r"^nbest=2.5: "):
        check_nbest(2.5, 4)
    with pytest.raises(UserError, match=r"^nbest=3 with beam_size=2: "):
        nbest_ids(*tiny_model(), sentences(), 3, SearchOptions(beam_size=2))


def repeats_a_bigram(ids: list[int]) -> bool:
    bigrams = list(zip(ids[:-1], ids[1:], strict=True))
    return len(set(bigrams)) < len(bigrams)


@pytest.mark.slow
def test_lists_with_logits_processors_start_with_the_beam_output_and_never_repeat_a_bigram():
    config, params = tiny_model()
    search = SEARCH.replace(repetition_penalty=1.3, no_repeat_ngram_size=2)
    found = nbest_ids(config, params, sentences(), 4, search)
    ordinary = translate_ids(config, params, sentences(), search)
    assert [hypotheses[0].ids for hypotheses in found] == ordinary
    assert ordinary != translate_ids(config, params, sentences(), SEARCH)
    assert not any(repeats_a_bigram(h.ids) for hypotheses in found for h in hypotheses)
    assert any(repeats_a_bigram(h.ids) for hypotheses in lists(4) for h in hypotheses)
