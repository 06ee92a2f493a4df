"""``from jaxtrans import Translator``: the Python way to load a translation run and translate,
checked against what evaluate.py's task computes for the same run."""

import dataclasses
import importlib
import json

import jax
import numpy as np
import pytest
from tiny_configs import tiny_translation_config

import jaxtrans
from jaxtrans.errors import UserError
from jaxtrans.inference.bleu import corpus_scores
from jaxtrans.inference.nbest import Hypothesis
from jaxtrans.tasks import restore_task, train_and_evaluate

SENTENCES = ["ke tafo miro lesa .", "ke lesa tafo .", "miro ke tafo miro lesa lesa ."]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("translator")
    config = tiny_translation_config(
        4, **{"train.checkpoint_every": 2, "train.compilation_cache_dir": ""}
    )
    train_and_evaluate(config, str(workdir))
    return str(workdir)


def test_translator_is_importable_from_the_package_without_importing_jax_first():
    assert jaxtrans.Translator.__name__ == "Translator"
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        jaxtrans.Nothing  # noqa: B018


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_equals_the_tasks_prediction(workdir, beam_size):
    translator = jaxtrans.Translator.load(workdir)
    expected = restore_task(workdir).predict(SENTENCES, options={"beam_size": beam_size})
    assert translator.translate(SENTENCES, beam_size=beam_size) == expected
    # Batching does not change a translation.
    assert translator.translate(SENTENCES, beam_size=beam_size, batch_size=1) == expected
    assert translator.step == 4


def test_an_earlier_checkpoint_and_an_average_restore_their_own_parameters(workdir):
    latest = jaxtrans.Translator.load(workdir)
    earlier = jaxtrans.Translator.load(workdir, checkpoint="2")
    averaged = jaxtrans.Translator.load(workdir, checkpoint="avg:2")
    assert (earlier.step, averaged.step) == (2, 4)
    assert "average" in averaged.description
    leaves = [jax.tree.leaves(t.params)[0] for t in (latest, earlier, averaged)]
    assert abs(float((leaves[0] - leaves[1]).sum())) > 0
    assert abs(float((leaves[2] - (leaves[0] + leaves[1]) / 2).max())) < 1e-6


def test_score_is_sacrebleu_of_the_translations(workdir):
    translator = jaxtrans.Translator.load(workdir)
    references = ["the man sees the dog .", "the dog sees .", "a man sees a dog ."]
    scores = translator.score(SENTENCES, references, beam_size=1)
    expected = corpus_scores(translator.translate(SENTENCES, beam_size=1), references, "en")
    assert (scores.bleu, scores.chrf, scores.bleu_signature) == (
        expected.bleu,
        expected.chrf,
        expected.bleu_signature,
    )


def test_mistakes_are_one_line_user_errors(workdir, tmp_path):
    translator = jaxtrans.Translator.load(workdir)
    with pytest.raises(UserError, match="list of sentences"):
        translator.translate("ke tafo .")
    with pytest.raises(UserError, match="3 sentences but 1 references"):
        translator.score(SENTENCES, ["one"])
    with pytest.raises(UserError, match="no config.json"):
        jaxtrans.Translator.load(str(tmp_path))


def test_sampling_is_reproducible_and_equals_the_tasks_prediction(workdir):
    translator = jaxtrans.Translator.load(workdir)
    options = {"sampling": True, "top_p": 0.9, "seed": 1}
    sampled = translator.translate(SENTENCES, **options)
    assert len(sampled) == len(SENTENCES)
    assert translator.translate(SENTENCES, **options, batch_size=1) == sampled
    assert restore_task(workdir).predict(SENTENCES, options=options) == sampled
    greedy = translator.translate(SENTENCES, beam_size=1)
    assert translator.translate(SENTENCES, sampling=True, temperature=0.0) == greedy
    with pytest.raises(UserError, match="^sampling with beam_size=3: "):
        translator.translate(SENTENCES, sampling=True, beam_size=3)


def test_logits_processors_go_from_translate_to_the_search_as_the_tasks_option(
    workdir, monkeypatch
):
    translator = jaxtrans.Translator.load(workdir)
    processors = {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2}
    options = translator.settings(**processors).options
    assert (options.repetition_penalty, options.no_repeat_ngram_size) == (1.3, 2)
    expected = restore_task(workdir).predict(SENTENCES, options=processors)
    assert translator.translate(SENTENCES, **processors) == expected
    searched = []

    def recorded(params, source, max_lengths, options, **kwargs):
        searched.append(options)
        return np.zeros((source.shape[0], kwargs["max_len"]), np.int32)

    # The module (jaxtrans.inference's own name "translate" is the function).
    translate_module = importlib.import_module("jaxtrans.inference.translate")
    monkeypatch.setattr(translate_module, "generate", recorded)
    translator.translate(SENTENCES, **processors)
    assert (searched[0].repetition_penalty, searched[0].no_repeat_ngram_size) == (1.3, 2)
    with pytest.raises(UserError, match="^no_repeat_ngram_size=-1: "):
        translator.translate(SENTENCES, no_repeat_ngram_size=-1)


def test_nbest_lists_are_headed_by_the_translation_and_equal_the_tasks_json_lines(workdir):
    translator = jaxtrans.Translator.load(workdir)
    lists = translator.translate(SENTENCES, beam_size=3, nbest=3)
    assert [listed[0].text for listed in lists] == translator.translate(SENTENCES, beam_size=3)
    for listed in lists:
        assert len(listed) == 3 and isinstance(listed[0], Hypothesis)
        assert [h.score for h in listed] == sorted((h.score for h in listed), reverse=True)
    lines = restore_task(workdir).predict(SENTENCES, options={"beam_size": 3, "nbest": 3})
    assert [json.loads(line) for line in lines] == [
        {"source": s, "hypotheses": [dataclasses.asdict(h) for h in listed]}
        for s, listed in zip(SENTENCES, lists, strict=True)
    ]
    with pytest.raises(UserError, match="^nbest=4 with beam_size=3: "):
        translator.translate(SENTENCES, beam_size=3, nbest=4)
    with pytest.raises(UserError, match="leave nbest out"):
        translator.score(SENTENCES, SENTENCES, nbest=2)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_prefix_starts_every_translation_as_the_tasks_prefix_option_does(workdir, beam_size):
    translator = jaxtrans.Translator.load(workdir)
    forced = translator.translate(SENTENCES, beam_size=beam_size, prefix="the man")
    assert all(translation.startswith("the man") for translation in forced)
    options = {"beam_size": beam_size, "prefix": "the man"}
    assert restore_task(workdir).predict(SENTENCES, options=options) == forced
    each = translator.translate(SENTENCES, beam_size=beam_size, prefix=["a", "", "the dog"])
    assert each[0].startswith("a") and each[2].startswith("the dog")
    assert each[1] == translator.translate(SENTENCES[1:2], beam_size=beam_size)[0]


def test_an_ensemble_of_one_translates_as_its_model(workdir):
    alone, one = jaxtrans.Translator.load(workdir), jaxtrans.Translator.load([workdir])
    for beam_size in (1, 3):
        assert one.translate(SENTENCES, beam_size=beam_size) == alone.translate(
            SENTENCES, beam_size=beam_size
        )
    ours, theirs = (t.translate(SENTENCES, beam_size=3, nbest=2) for t in (one, alone))
    for listed, expected in zip(ours, theirs, strict=True):
        assert [h.text for h in listed] == [h.text for h in expected]
        assert [h.score for h in listed] == pytest.approx([h.score for h in expected], abs=1e-5)
    assert one.step == 4 and one.description == f"ensemble of 1: {workdir} step 4"


def test_an_ensemble_of_two_checkpoints_decodes_with_nbest_prefixes_and_sampling(workdir):
    two = jaxtrans.Translator.load([f"{workdir}:2", workdir])
    assert two.description == f"ensemble of 2: {workdir} step 2; {workdir} step 4"
    lists = two.translate(SENTENCES, beam_size=3, nbest=2, prefix="the man")
    assert all(len(listed) == 2 for listed in lists)
    assert all(h.text.startswith("the man") for listed in lists for h in listed)
    sampled = two.translate(SENTENCES, sampling=True, seed=1)
    assert two.translate(SENTENCES, sampling=True, seed=1, batch_size=1) == sampled
    with pytest.raises(UserError, match="give each member its own, as DIR:CHECKPOINT"):
        jaxtrans.Translator.load([workdir], checkpoint="2")
