"""Logits processors on a Marian (opus-mt) directory: Translator.translate with
repetition_penalty and no_repeat_ngram_size gives, sentence for sentence,
MarianMTModel.generate's translations with the same settings (greedy search and beam 4
with the "hf" length penalty), and in greedy search CTranslate2's translate_batch on the
directory converted by CTranslate2's own converter.

The model is random (helpers/marian_directories.py) and, with EOS barely favoured, says
one token over and over until its length limit: every processor changes its output.
Its <pad> row (the decoder's start) is zero, as every opus-mt converted from Marian has
it and as CTranslate2's Marian models start (from a zero vector)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import transformers
from marian_directories import GERMAN, SPANISH, corpus, marian_model_directory

import jaxtrans
from jaxtrans.inference.options import SearchOptions
from jaxtrans.tasks.translation.ctranslate2_decoding import translate_tokens

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
SENTENCES = GERMAN[:8]
MAX_EXTRA = 10
# (A penalty below 1 changes nothing here: the model repeats itself already.)
SETTINGS = [
    dict(repetition_penalty=1.5),
    dict(no_repeat_ngram_size=2),
    dict(repetition_penalty=1.2, no_repeat_ngram_size=3),
]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """German -> Spanish, random weights, its <pad> (start) row zeroed."""
    path = tmp_path_factory.mktemp("opus") / "opus-mt-de-es"
    marian_model_directory(path, corpus(GERMAN), corpus(SPANISH), eos_bias=2.0, seed=1)
    model = transformers.MarianMTModel.from_pretrained(path)
    with torch.no_grad():
        model.get_decoder().embed_tokens.weight[model.config.pad_token_id] = 0.0
    model.save_pretrained(path)
    return str(path)


def ours(path, **settings) -> list[str]:
    """Translator.translate's translations of SENTENCES with ``settings``."""
    translator = jaxtrans.Translator.load(path)
    return translator.translate(SENTENCES, max_extra_length=MAX_EXTRA, **settings)


def generate(path, num_beams: int, **settings) -> list[str]:
    """MarianMTModel.generate, one sentence at a time, as jaxtrans decodes: the limit
    source ids + MAX_EXTRA, length_penalty 1.0, no early stop, EOS not forced."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(path)
    model = transformers.MarianMTModel.from_pretrained(path).eval()
    out = []
    for sentence in SENTENCES:
        inputs = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            tokens = model.generate(
                **inputs, num_beams=num_beams, do_sample=False, length_penalty=1.0,
                early_stopping="never", forced_eos_token_id=None,
                max_new_tokens=inputs["input_ids"].shape[1] + MAX_EXTRA, **settings,
            )  # fmt: skip
        out.append(tokenizer.decode(tokens[0], skip_special_tokens=True))
    return out


@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("settings", SETTINGS)
def test_translate_with_processors_equals_marian_generate(marian, beam_size, settings):
    got = ours(marian, beam_size=beam_size, alpha=1.0, penalty_form="hf", **settings)
    expected = generate(marian, beam_size, **settings)
    assert got == expected
    assert expected != generate(marian, beam_size)  # the processors changed the output


@pytest.fixture(scope="module")
def converted(marian, tmp_path_factory):
    ctranslate2 = pytest.importorskip("ctranslate2")
    output = str(tmp_path_factory.mktemp("ct2") / "model")
    ctranslate2.converters.TransformersConverter(marian).convert(output)
    return ctranslate2.Translator(output, device="cpu")


@pytest.mark.parametrize("settings", SETTINGS)
def test_ctranslate2_greedy_search_with_processors_translates_as_jaxtrans(
    marian, converted, settings
):
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in SENTENCES]
    greedy = SearchOptions(beam_size=1, alpha=0.0, max_extra_length=MAX_EXTRA, **settings)
    pieces = translate_tokens(converted, sources, greedy, sources_end_with_eos=True)
    theirs = [tokenizer.convert_tokens_to_string(p) for p in pieces]
    assert theirs == ours(marian, beam_size=1, **settings)
