"""Serving trained translation runs with CTranslate2, both routes, token for token: CTranslate2's
greedy and beam-4 translations (translate_batch, set by ctranslate2_decoding to jaxtrans's
search) equal jaxtrans.Translator's, float32, on the demo's test sentences.

- A Post-LN demo run trained with the zero decoder start and Marian's LayerNorm epsilon:
  its Marian export (python -m jaxtrans.export), converted by CTranslate2's own
  ct2-transformers-converter (TransformersConverter), and its --format ctranslate2 export.
- A configs/small_data.py-shaped run (Pre-LN, epsilon 1e-6, a learned start row), which the
  Marian export refuses: --format ctranslate2.
- Greedy search with a repetition penalty and an n-gram ban (--format ctranslate2 of the
  Post-LN run): the same translations as Translator.translate with the same settings.
- A workdir of an older version (its config.json without decoder_start_embedding): it
  restores with the learned start it was trained with, the Marian export refuses it in one
  line, --format ctranslate2 converts it exactly.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import sentencepiece as spm
from paths import REPO
from tiny_configs import TINY_TRANSLATION, tiny_translation_config

import jaxtrans
from jaxtrans.data.translation.sources import read_split
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.tasks import train_and_evaluate
from jaxtrans.tasks.translation.ctranslate2_decoding import translate_tokens
from jaxtrans.vocab import EOS_ID

ctranslate2 = pytest.importorskip("ctranslate2")
transformers = pytest.importorskip("transformers")

STEPS = 150
# Short enough for the Marian export's position table (model.max_len 64 rows).
MAX_EXTRA = 12
SEARCHES = [(1, 0.0), (4, 0.6)]  # (beam size, alpha of the "hf" length penalty)


def trained(workdir: str, config) -> str:
    config.update_from_flattened_dict(
        {"train.checkpoint_every": STEPS, "train.compilation_cache_dir": ""}
    )
    train_and_evaluate(config, workdir)
    return workdir


@pytest.fixture(scope="module")
def post_ln_run(tmp_path_factory):
    """configs/demo.py shrunk, as a run meant for the Marian export trains."""
    config = tiny_translation_config(
        STEPS, **{"model.layer_norm_epsilon": 1e-5, "model.decoder_start_embedding": "zero"}
    )
    return trained(str(tmp_path_factory.mktemp("post_ln")), config)


@pytest.fixture(scope="module")
def pre_ln_run(tmp_path_factory):
    """configs/small_data.py on the demo corpus, shrunk as the demo is (steps, not minutes)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import small_data

    config = small_data.get_config()
    config.update_from_flattened_dict(
        {**TINY_TRANSLATION, "data.batch_size": 0, "data.tokens_per_batch": 192,
         "train.num_steps": STEPS, "train.max_minutes": 0.0, "optimizer.warmup_steps": 20}
    )  # fmt: skip
    return trained(str(tmp_path_factory.mktemp("pre_ln")), config)


@pytest.fixture(scope="module")
def sentences(post_ln_run):
    task = jaxtrans.Translator.load(post_ln_run).task
    return [pair.source for pair in read_split(task.run_config.data, "test").pairs]


def export(workdir: str, output, *flags: str) -> str:
    from jaxtrans.programs.export import main

    main(["export", "--workdir", workdir, "--output", str(output), *flags])
    return str(output)


def refused(capsys, workdir: str, output, *flags: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        export(workdir, output, *flags)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert not os.path.exists(output)
    return err


def jaxtrans_pieces(translator, sentences, beam_size: int, alpha: float) -> list[list[str]]:
    """jaxtrans's hypotheses as target pieces (the search Translator.translate runs)."""
    task = translator.task
    ids = [[*task.tokenizer.encode_source(s), EOS_ID] for s in sentences]
    options = SearchOptions(
        beam_size=beam_size, alpha=alpha, max_extra_length=MAX_EXTRA, penalty_form="hf"
    )
    hypotheses = translate_ids(task.model_config, translator.params, ids, options)
    target = task.tokenizer.sentencepiece_model("target")
    return [[target.id_to_piece(i) for i in h] for h in hypotheses]


def assert_translates_as_jaxtrans(translator, sentences, pieces, beam_size, alpha) -> None:
    """``pieces``: CTranslate2's hypotheses. Equal to jaxtrans's, piece for piece, and so
    as text to Translator.translate's."""
    assert pieces == jaxtrans_pieces(translator, sentences, beam_size, alpha)
    target = translator.task.tokenizer.sentencepiece_model("target")
    texts = [target.decode([target.piece_to_id(p) for p in h]) for h in pieces]
    assert texts == translator.translate(
        sentences, beam_size=beam_size, alpha=alpha, penalty_form="hf",
        max_extra_length=MAX_EXTRA,
    )  # fmt: skip
    # Not a degenerate model: translations of many lengths, most ending before the limit.
    assert len({len(h) for h in pieces}) > 3


def direct_translation(directory: str, sentences, beam_size, alpha, **settings):
    """A --format ctranslate2 directory: cut with its source.spm, translate."""
    cutter = spm.SentencePieceProcessor(model_file=os.path.join(directory, "source.spm"))
    model = ctranslate2.Translator(directory, device="cpu", **settings)
    sources = [cutter.encode(s, out_type=str) for s in sentences]
    options = SearchOptions(beam_size=beam_size, alpha=alpha, max_extra_length=MAX_EXTRA)
    return translate_tokens(model, sources, options.replace(penalty_form="hf"))


# -------------------------------------------------- the Marian export, CTranslate2's converter


@pytest.fixture(scope="module")
def converted_marian(post_ln_run, tmp_path_factory):
    """(Marian directory, CTranslate2 directory converted from it by CTranslate2)."""
    hf = export(post_ln_run, tmp_path_factory.mktemp("marian") / "hf")
    ct2 = str(tmp_path_factory.mktemp("marian") / "ct2")
    ctranslate2.converters.TransformersConverter(hf).convert(ct2)
    return hf, ct2


@pytest.mark.parametrize("beam_size, alpha", SEARCHES)
def test_a_marian_export_converted_by_ctranslate2_translates_as_jaxtrans(
    post_ln_run, converted_marian, sentences, beam_size, alpha
):
    hf, ct2 = converted_marian
    tokenizer = transformers.MarianTokenizer.from_pretrained(hf)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in sentences]
    options = SearchOptions(
        beam_size=beam_size, alpha=alpha, max_extra_length=MAX_EXTRA, penalty_form="hf"
    )
    pieces = translate_tokens(
        ctranslate2.Translator(ct2, device="cpu"), sources, options, sources_end_with_eos=True
    )
    translator = jaxtrans.Translator.load(post_ln_run)
    assert_translates_as_jaxtrans(translator, sentences, pieces, beam_size, alpha)


def documented_int8_conversion(marian: str, output: str) -> list[str]:
    """docs/pretrained.md's command that converts a Marian export to int8 weights, with
    the directories of this test."""
    with open(os.path.join(REPO, "docs", "pretrained.md"), encoding="utf-8") as f:
        doc = f.read()
    found = re.search(r"^ct2-transformers-converter .*?(?<!\\)\n", doc, re.M | re.S)
    assert found, "docs/pretrained.md gives no ct2-transformers-converter command"
    words = shlex.split(found.group(0).replace("\\\n", " "))
    assert words[words.index("--quantization") + 1] == "int8"
    words[words.index("--model") + 1] = marian
    words[words.index("--output_dir") + 1] = output
    return words


def test_the_documented_int8_conversion_of_a_marian_export_runs_and_translates(
    converted_marian, sentences, tmp_path
):
    """The command docs/pretrained.md gives, run as a user runs it: int8 weights (the model
    file under half the float32 one's size; loaded as int8), every sentence translated,
    and the float32 conversion's translations scored within 0.5 nats a token of it."""
    hf, float32 = converted_marian
    int8 = str(tmp_path / "int8")
    command = documented_int8_conversion(hf, int8)
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr

    size = lambda d: os.path.getsize(os.path.join(d, "model.bin"))  # noqa: E731
    assert size(int8) < 0.5 * size(float32)
    model = ctranslate2.Translator(int8, device="cpu")
    assert model.compute_type.startswith("int8")
    tokenizer = transformers.MarianTokenizer.from_pretrained(hf)
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in sentences]
    options = SearchOptions(max_extra_length=MAX_EXTRA, penalty_form="hf")
    translated = translate_tokens(model, sources, options, sources_end_with_eos=True)
    assert sum(map(bool, translated)) >= 0.9 * len(sentences)
    reference = ctranslate2.Translator(float32, device="cpu")
    targets = translate_tokens(reference, sources, options, sources_end_with_eos=True)
    exact = np.array([np.mean(r.log_probs) for r in reference.score_batch(sources, targets)])
    quantized = np.array([np.mean(r.log_probs) for r in model.score_batch(sources, targets)])
    assert np.abs(quantized - exact).mean() < 0.5


# ------------------------------------------------------------------ --format ctranslate2


@pytest.fixture(scope="module")
def direct(post_ln_run, pre_ln_run, tmp_path_factory):
    """--format ctranslate2 directories of both runs, by run name."""
    runs = {"post_ln": post_ln_run, "pre_ln": pre_ln_run}
    return {
        name: export(workdir, tmp_path_factory.mktemp(name) / "ct2", "--format", "ctranslate2")
        for name, workdir in runs.items()
    }


@pytest.mark.parametrize("beam_size, alpha", SEARCHES)
@pytest.mark.parametrize("name", ["pre_ln", "post_ln"])
def test_format_ctranslate2_translates_as_jaxtrans(
    request, direct, sentences, name, beam_size, alpha
):
    translator = jaxtrans.Translator.load(request.getfixturevalue(f"{name}_run"))
    pieces = direct_translation(direct[name], sentences, beam_size, alpha)
    assert_translates_as_jaxtrans(translator, sentences, pieces, beam_size, alpha)


@pytest.fixture(scope="module")
def direct_post_ln(post_ln_run, tmp_path_factory):
    """The post-LN run's --format ctranslate2 directory alone."""
    return export(
        post_ln_run, tmp_path_factory.mktemp("post_ln_only") / "ct2", "--format", "ctranslate2"
    )


@pytest.mark.parametrize(
    "settings", [dict(repetition_penalty=1.3), dict(repetition_penalty=1.2, no_repeat_ngram_size=2)]
)
def test_greedy_search_with_logits_processors_translates_as_jaxtrans(
    post_ln_run, direct_post_ln, sentences, settings
):
    """Both run the processors on the logits in greedy search (CTranslate2's beam search
    renormalises after them, jaxtrans's does not: ctranslate2_decoding refuses that)."""
    cutter = spm.SentencePieceProcessor(model_file=os.path.join(direct_post_ln, "source.spm"))
    join = spm.SentencePieceProcessor(model_file=os.path.join(direct_post_ln, "target.spm"))
    ct2 = ctranslate2.Translator(direct_post_ln, device="cpu")
    sources = [cutter.encode(s, out_type=str) for s in sentences]
    greedy = SearchOptions(beam_size=1, alpha=0.0, max_extra_length=MAX_EXTRA)
    pieces = translate_tokens(ct2, sources, greedy.replace(**settings))
    translator = jaxtrans.Translator.load(post_ln_run)
    ours = translator.translate(sentences, beam_size=1, max_extra_length=MAX_EXTRA, **settings)
    assert [join.decode_pieces(p) for p in pieces] == ours
    assert ours != translator.translate(sentences, beam_size=1, max_extra_length=MAX_EXTRA)


def test_the_directory_holds_the_model_and_what_cuts_and_joins_its_text(direct):
    files = set(os.listdir(direct["pre_ln"]))
    assert {"model.bin", "config.json", "source.spm", "target.spm"} <= files
    with open(os.path.join(direct["pre_ln"], "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["layer_norm_epsilon"] == pytest.approx(1e-6)
    assert config["add_source_eos"] is True and config["decoder_start_token"] == "<s>"


def mean_token_logprobs(directory: str, sentences, targets, **settings) -> np.ndarray:
    """Each target's mean log-probability per token, scored by the model in ``directory``."""
    cutter = spm.SentencePieceProcessor(model_file=os.path.join(directory, "source.spm"))
    model = ctranslate2.Translator(directory, device="cpu", **settings)
    sources = [cutter.encode(s, out_type=str) for s in sentences]
    return np.array([np.mean(r.log_probs) for r in model.score_batch(sources, targets)])


def test_an_int8_model_translates_every_sentence_and_scores_as_float32_does(direct, sentences):
    """A 150-step model's beams hold near-ties that int8's arithmetic breaks either way (0
    to 20 of the 40 translations equal float32's, by CPU), so the int8 model is held to
    what it computes: the log-probabilities it gives float32's translations. Measured: 0.20
    nats a token apart on average; the other run's model is 1.98 apart. Such a model may
    also end a sentence at once, in float32 as in int8 (2 of the 40 on one AMD EPYC, where
    jaxtrans does the same): a broken int8 path is one that translates few of them."""
    int8 = direct_translation(direct["pre_ln"], sentences, 4, 0.6, compute_type="int8")
    assert len(int8) == len(sentences) and all(isinstance(t, list) for t in int8)
    assert sum(map(bool, int8)) >= 0.9 * len(sentences)
    float32 = direct_translation(direct["pre_ln"], sentences, 4, 0.6)
    exact = mean_token_logprobs(direct["pre_ln"], sentences, float32)
    quantized = mean_token_logprobs(direct["pre_ln"], sentences, float32, compute_type="int8")
    other = mean_token_logprobs(direct["post_ln"], sentences, float32)
    assert np.abs(quantized - exact).mean() < 0.5 < np.abs(other - exact).mean()


def test_the_marian_export_refuses_pre_ln_in_one_line(pre_ln_run, tmp_path, capsys):
    assert "model.norm='pre'" in refused(capsys, pre_ln_run, tmp_path / "hf")


def test_an_unknown_format_is_a_one_line_error(post_ln_run, tmp_path, capsys):
    assert "--format onnx" in refused(capsys, post_ln_run, tmp_path / "x", "--format", "onnx")


# ------------------------------------------------------------------ an older workdir


def test_an_older_workdir_keeps_its_learned_start_and_converts_by_the_direct_route(
    post_ln_run, sentences, tmp_path, capsys
):
    """config.json written before decoder_start_embedding existed: the learned start row
    it was trained with (here, the zero-start run's row read as learned)."""
    workdir = str(tmp_path / "older")
    shutil.copytree(post_ln_run, workdir)
    path = os.path.join(workdir, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    del config["model"]["decoder_start_embedding"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    translator = jaxtrans.Translator.load(workdir)
    assert translator.task.model_config.decoder_start_embedding == "learned"
    # The Marian export writes the learned row as <pad>'s and says who does not read it.
    capsys.readouterr()
    export(workdir, tmp_path / "hf")
    said = capsys.readouterr().out
    assert "learned row" in said and "--format ctranslate2" in said
    directory = export(workdir, tmp_path / "ct2", "--format", "ctranslate2")
    pieces = direct_translation(directory, sentences, 1, 0.0)
    assert_translates_as_jaxtrans(translator, sentences, pieces, 1, 0.0)
