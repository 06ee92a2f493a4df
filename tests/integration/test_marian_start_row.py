"""A Marian directory whose decoder start row is not zero (as transformers 5 makes and
fine-tunes them), and one that starts from another token than <pad>: asked through
evaluate.py --init_from and Translator.load, greedy and beam 4, every sentence as
transformers' MarianMTModel.generate gives it; and what their exports reproduce.

The directories are random-weight models built in the test (helpers/marian_directories.py);
nothing is downloaded."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from marian_directories import GERMAN, SPANISH, corpus, marian_generate, marian_model_directory

import jaxtrans
from jaxtrans.errors import UserError
from jaxtrans.models.ctranslate2_spec import transformer_spec
from jaxtrans.models.marian.marian_from_huggingface import from_huggingface, marian_to_model_ids
from jaxtrans.tasks.translation import ctranslate2_export, translation_init
from jaxtrans.vocab import BOS_ID

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
SENTENCES = GERMAN[:8]
MAX_EXTRA = 10
# The other start token: an ordinary piece's id (</s> 0, <unk> 1, pieces from 2).
START_ID = 5


@pytest.fixture(scope="module", params=["pad_row", "start_token"])
def directory(request, tmp_path_factory):
    """German -> Spanish, random weights, EOS biased so that translations end both ways;
    the decoder starts from <pad>'s row drawn at random, or from token START_ID."""
    path = tmp_path_factory.mktemp("opus") / f"opus-mt-{request.param}"
    start = {"start_token": dict(start_id=START_ID)}.get(request.param, {})
    return marian_model_directory(
        path, corpus(GERMAN), corpus(SPANISH), eos_bias=7.0, start_row=True, **start
    )


def start_row(path) -> np.ndarray:
    model = transformers.MarianMTModel.from_pretrained(path)
    weight = model.get_decoder().embed_tokens.weight
    return weight[model.config.decoder_start_token_id].detach().numpy()


def test_the_start_row_is_not_zero(directory):
    assert np.linalg.norm(start_row(directory)) > 0.5


def test_evaluate_init_from_translates_greedily_as_marian_generate(directory, tmp_path):
    from jaxtrans.programs.evaluate import main

    source = tmp_path / "input.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    main(["evaluate.py", "--init_from", directory, "--input", str(source), "--output",
          str(output), "--beam_size", "1", "--max_extra_length", str(MAX_EXTRA)])  # fmt: skip
    expected = marian_generate(directory, SENTENCES, num_beams=1, max_extra=MAX_EXTRA)
    assert output.read_text(encoding="utf-8").splitlines() == expected
    assert "" in expected and any(len(t) > 20 for t in expected)  # both ways of ending


def test_translator_load_beam_search_equals_marian_generate(directory):
    translator = jaxtrans.Translator.load(directory)
    assert translator.task.model_config.decoder_start_embedding == "learned"
    got = translator.translate(SENTENCES, beam_size=4, max_extra_length=MAX_EXTRA)
    assert got == marian_generate(directory, SENTENCES, num_beams=4, max_extra=MAX_EXTRA)


def test_a_zero_start_would_translate_otherwise(directory, monkeypatch):
    """The rule these directories broke (the start as a zero vector) gives other
    translations: the tests above see the start row."""
    monkeypatch.setattr(translation_init, "directory_start_embedding", lambda *_: "zero")
    translator = jaxtrans.Translator.load(directory)
    got = translator.translate(SENTENCES, beam_size=1, max_extra_length=MAX_EXTRA)
    assert got != marian_generate(directory, SENTENCES, num_beams=1, max_extra=MAX_EXTRA)


def test_the_marian_export_starts_where_the_directory_starts(directory, tmp_path):
    """to_huggingface writes the start row as <pad>'s, the exported decoder's start: the
    export generates the original's tokens (greedy and beam 4)."""
    from safetensors.numpy import save_file

    from jaxtrans.models.marian.marian_to_huggingface import to_huggingface
    from jaxtrans.tasks.translation.translation_export import CONFIG_FILE, WEIGHTS_FILE

    hf_config, state = to_huggingface(*from_huggingface(directory))
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / CONFIG_FILE).write_text(json.dumps(hf_config))
    save_file(state, str(exported / WEIGHTS_FILE), metadata={"format": "pt"})
    np.testing.assert_array_equal(start_row(exported), start_row(directory))
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    models = [transformers.MarianMTModel.from_pretrained(d).eval() for d in (directory, exported)]
    for sentence in SENTENCES:
        inputs = tokenizer([sentence], return_tensors="pt")
        for beams in (1, 4):
            with torch.no_grad():
                original, export = (
                    m.generate(**inputs, num_beams=beams, do_sample=False, length_penalty=1.0,
                               early_stopping="never", forced_eos_token_id=None,
                               bad_words_ids=[[m.config.pad_token_id]],
                               max_new_tokens=inputs["input_ids"].shape[1] + MAX_EXTRA)[0, 1:]
                    for m in models
                )  # fmt: skip
            assert original.tolist() == export.tolist(), (sentence, beams)


def test_ctranslate2_says_in_one_line_why_it_cannot_export_it(directory):
    """The direct CTranslate2 export writes no Marian vocabulary, and CTranslate2's Marian
    converter starts every model from a zero vector."""
    task = jaxtrans.Translator.load(directory).task
    with pytest.raises(UserError) as error:
        ctranslate2_export.check_tokenizer(task)
    said = str(error.value)
    assert "\n" not in said and "zero vector" in said and "--format huggingface" in said


def test_the_ctranslate2_spec_starts_from_the_start_row_too(directory, tmp_path):
    """transformer_spec of the directory's model (its pieces by model id) translates
    greedily to generate's tokens: CTranslate2 itself can start from the learned row."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    config, params = from_huggingface(directory)
    contents = json.loads((Path(directory) / "config.json").read_text())
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    vocab = tokenizer.get_vocab()
    to_model = marian_to_model_ids(len(vocab), contents["pad_token_id"], contents["eos_token_id"])
    pieces = [""] * (len(vocab) + 1)
    for piece, marian_id in vocab.items():
        pieces[to_model[marian_id]] = piece
    pieces[BOS_ID] = "<s>"
    spec = transformer_spec(config, params, pieces, pieces)
    spec.validate()
    (tmp_path / "ct2").mkdir()
    spec.save(str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(str(tmp_path / "ct2"))
    model = transformers.MarianMTModel.from_pretrained(directory).eval()
    for sentence in SENTENCES:
        ids = tokenizer([sentence], return_tensors="pt")["input_ids"]
        source = tokenizer.convert_ids_to_tokens(ids[0, :-1].tolist())  # CTranslate2 adds </s>
        (result,) = translator.translate_batch(
            [source],
            beam_size=1,
            max_decoding_length=ids.shape[1] + MAX_EXTRA,
            min_decoding_length=0,  # CTranslate2's default 1 forbids EOS first
        )
        with torch.no_grad():
            out = model.generate(input_ids=ids, num_beams=1, do_sample=False,
                                 forced_eos_token_id=None,
                                 bad_words_ids=[[contents["pad_token_id"]]],
                                 max_new_tokens=ids.shape[1] + MAX_EXTRA)[0, 1:]  # fmt: skip
        expected = [t for t in tokenizer.convert_ids_to_tokens(out.tolist()) if t != "</s>"]
        assert result.hypotheses[0] == expected, sentence
