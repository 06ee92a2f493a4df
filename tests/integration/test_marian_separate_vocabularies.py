"""A Marian directory with separate source and target vocabularies of different sizes
(separate_vocabs, target_vocab.json, decoder_vocab_size != vocab_size, untied tables):
numbered, computed and translated as transformers does, fine-tuned and exported back; and
a directory whose tokenizer numbers a side otherwise than its config.json, refused.

config.json has one pad_token_id (also the decoder start) and one eos_token_id for both
sides, by which jaxtrans loads the weights (marian_to_model_ids); each vocabulary file
numbers its own side's text. They agree when both vocabularies hold <pad> at that one id:
here the smaller one's last id, inside the larger one (helpers/marian_directories.py).
The ids below are compared through config.json's numbering, not the tokenizer's own.
Nothing is downloaded.
"""

import json
import os
import random
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
import transformers
from marian_directories import CHINESE, GERMAN, corpus, marian_generate, marian_model_directory
from paths import REPO
from reliability_runs import run_program, scratch

import jaxtrans
from jaxtrans.errors import UserError
from jaxtrans.models import Transformer
from jaxtrans.models.marian.marian_from_huggingface import marian_to_model_ids
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
SENTENCES = CHINESE[:8]
MAX_EXTRA = 10
STEPS = 3


@pytest.fixture(scope="module")
def separate(tmp_path_factory):
    """Chinese -> German, a vocabulary each (the target's the larger), random weights;
    EOS biased so that some translations end at once and others run to their limit."""
    path = tmp_path_factory.mktemp("opus") / "opus-mt-zh-de"
    return marian_model_directory(path, corpus(CHINESE), corpus(GERMAN), separate=True,
                                  eos_bias=4.0)  # fmt: skip


def read_json(path, name):
    with open(os.path.join(path, name), encoding="utf-8") as f:
        return json.load(f)


def loader_numbering(path) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) model id of each Marian id, as the weights are loaded: by
    config.json's sizes and its one pad and eos id."""
    hf = read_json(path, "config.json")
    pad, eos = hf["pad_token_id"], hf["eos_token_id"]
    target_size = hf.get("decoder_vocab_size") or hf["vocab_size"]
    return (
        marian_to_model_ids(hf["vocab_size"], pad, eos),
        marian_to_model_ids(target_size, pad, eos),
    )


def random_text(count: int, seed: int = 1) -> list[str]:
    alphabet = "".join(set("".join(CHINESE + GERMAN))) + "0123456789 ,.!?<>/" + "Жж∑"
    rng = random.Random(seed)
    return ["".join(rng.choices(alphabet, k=rng.randint(0, 30))) for _ in range(count)]


def assert_ids_equal_marian_tokenizer(path, tokenizer, texts) -> None:
    """jaxtrans's ids (with EOS appended) are MarianTokenizer's through the loader's
    numbering, on both sides."""
    theirs = transformers.MarianTokenizer.from_pretrained(path)
    source_ids, target_ids = loader_numbering(path)
    for text, source, target in zip(
        texts, theirs(texts).input_ids, theirs(text_target=texts).input_ids, strict=True
    ):
        assert tokenizer.encode_source(text) + [EOS_ID] == source_ids[source].tolist(), text
        assert tokenizer.encode_target(text) + [EOS_ID] == target_ids[target].tolist(), text


def marian_and_jaxtrans_logits(path, model_config, params, tokenizer, pairs):
    """(transformers' logits [rows, length, V_target], jaxtrans's in Marian order, the
    mask of real target positions) for the pairs, teacher-forced: MarianMTModel on
    MarianTokenizer's ids, jaxtrans's Transformer on its own tokenizer's."""
    theirs = transformers.MarianTokenizer.from_pretrained(path)
    model = transformers.MarianMTModel.from_pretrained(path).eval()
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    batch = theirs(sources, text_target=targets, padding=True, return_tensors="pt")
    labels = batch["labels"]
    start = torch.full_like(labels[:, :1], model.config.decoder_start_token_id)
    with torch.no_grad():
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=torch.cat([start, labels[:, :-1]], dim=1),
        )
    marian = out.logits.numpy()
    rows, length = labels.shape
    source = np.full(batch["input_ids"].shape, PAD_ID)
    target = np.full((rows, length), PAD_ID)
    for row, (s, t) in enumerate(pairs):
        ids = tokenizer.encode_source(s) + [EOS_ID]
        source[row, : len(ids)] = ids
        ids = [BOS_ID] + tokenizer.encode_target(t)
        target[row, : len(ids)] = ids
    ours = np.asarray(Transformer(model_config).apply({"params": params}, source, target))
    order = loader_numbering(path)[1][: marian.shape[-1]]  # the model id of each Marian id
    return marian, ours[..., order], (labels != model.config.pad_token_id).numpy()


# ------------------------------------------------------------------ the directory as it is


def test_the_directory_has_two_vocabularies_of_different_sizes_and_one_pad(separate):
    hf = read_json(separate, "config.json")
    source, target = read_json(separate, "vocab.json"), read_json(separate, "target_vocab.json")
    assert read_json(separate, "tokenizer_config.json")["separate_vocabs"] is True
    assert (hf["vocab_size"], hf["decoder_vocab_size"]) == (len(source), len(target))
    assert len(source) != len(target) and not hf["share_encoder_decoder_embeddings"]
    assert source["<pad>"] == target["<pad>"] == hf["pad_token_id"] == len(source) - 1


def test_both_sides_are_numbered_as_marian_tokenizer_and_as_the_weights(separate):
    tokenizer = jaxtrans.Translator.load(separate).task.tokenizer
    texts = CHINESE + GERMAN + ["", "你好 <pad> Welt", "<unk></s>"] + random_text(100)
    assert_ids_equal_marian_tokenizer(separate, tokenizer, texts)


def test_logits_equal_marian_over_the_whole_target_vocabulary(separate):
    translator = jaxtrans.Translator.load(separate)
    pairs = list(zip(CHINESE[:6], GERMAN[:6], strict=True))
    marian, ours, real = marian_and_jaxtrans_logits(
        separate, translator.task.model_config, translator.params, translator.task.tokenizer,
        pairs,
    )  # fmt: skip
    np.testing.assert_allclose(ours[real], marian[real], atol=1e-5, rtol=0)


def test_evaluate_init_from_input_equals_marian_greedy_generate(separate, tmp_path):
    from jaxtrans.programs.evaluate import main

    source = tmp_path / "input.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    main(["evaluate.py", "--init_from", separate, "--input", str(source), "--output",
          str(output), "--beam_size", "1", "--max_extra_length", str(MAX_EXTRA)])  # fmt: skip
    expected = marian_generate(separate, SENTENCES, num_beams=1, max_extra=MAX_EXTRA)
    assert output.read_text(encoding="utf-8").splitlines() == expected
    assert "" in expected and any(len(t) > 5 for t in expected)  # both ways of ending


def test_translator_load_beam_search_equals_marian_generate(separate):
    got = jaxtrans.Translator.load(separate).translate(
        SENTENCES, beam_size=4, max_extra_length=MAX_EXTRA
    )
    expected = marian_generate(separate, SENTENCES, num_beams=4, max_extra=MAX_EXTRA)
    assert got == expected
    assert any(len(t) > 5 for t in expected)  # not a model that ends every translation at once


# ------------------------------------------------------- a tokenizer that does not fit


def moved(directory, tmp_path, name, piece, to) -> str:
    """A copy of ``directory`` whose ``name`` holds ``piece`` at id ``to`` (-1: the last;
    swapped with the piece there): a vocabulary laid out on its own (<pad> last)."""
    copy = str(shutil.copytree(directory, tmp_path / "moved"))
    vocabulary = read_json(copy, name)
    to = len(vocabulary) - 1 if to == -1 else to
    other = next(p for p, i in vocabulary.items() if i == to)
    vocabulary[other], vocabulary[piece] = vocabulary[piece], to
    with open(os.path.join(copy, name), "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)
    return copy


@pytest.mark.parametrize(
    "name, piece, to, key",
    [
        ("target_vocab.json", "<pad>", -1, "pad_token_id"),
        ("vocab.json", "</s>", 5, "eos_token_id"),
        ("target_vocab.json", "</s>", 5, "eos_token_id"),
    ],
)
def test_a_side_numbered_otherwise_than_config_json_is_refused_naming_both(
    separate, tmp_path, capsys, name, piece, to, key
):
    from jaxtrans.programs.evaluate import main

    copy = moved(separate, tmp_path, name, piece, to)
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate.py", "--init_from", copy, "--input", "-"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    expected = read_json(copy, "config.json")[key]
    for part in (f"{copy}/{name}", f"{copy}/config.json", f"{key}={expected}", piece):
        assert part in err, err
    with pytest.raises(UserError, match=f"{key}={expected}"):
        jaxtrans.Translator.load(copy)


def test_a_vocabulary_of_another_size_than_config_json_is_refused(separate, tmp_path):
    copy = str(shutil.copytree(separate, tmp_path / "resized"))
    hf = read_json(copy, "config.json")
    hf["decoder_vocab_size"] += 1
    with open(os.path.join(copy, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f)
    with pytest.raises(
        UserError, match=r"target_vocab.json holds \d+ pieces .* decoder_vocab_size"
    ):
        jaxtrans.Translator.load(copy)


# --------------------------------------------------------------- fine-tuned and exported


@pytest.fixture(scope="module")
def fine_tuned(separate, tmp_path_factory):
    """A few steps of configs/marian_finetune.py on a small local file of pairs."""
    folder = tmp_path_factory.mktemp("separate-run")
    pairs = zip(corpus(CHINESE, 60), corpus(GERMAN, 60, seed=1), strict=True)
    (folder / "train.tsv").write_text("".join(f"{z}\t{d}\n" for z, d in pairs), "utf-8")
    values = {
        "init_from": separate,
        "data.train": folder / "train.tsv",
        "data.batch_size": 4,
        "data.max_source_length": 48,
        "data.max_target_length": 48,
        "model.dtype": "float32",  # the recipe's bfloat16 off: compared with transformers
        "optimizer.learning_rate": 1e-3,
        "optimizer.warmup_steps": 1,
        "train.num_steps": STEPS,
        "train.log_every": 1,
        "train.checkpoint_every": STEPS,
        "train.eval_every": 0,
        "train.compilation_cache_dir": os.path.join(scratch(), "xla"),
    }
    flags = ["--config", "configs/marian_finetune.py"]
    flags += [f"--config.{key}={value}" for key, value in values.items()]
    run = run_program("train.py", [*flags, "--workdir", str(folder / "run")])
    assert run.returncode == 0, run.stderr
    return str(folder / "run")


@pytest.fixture(scope="module")
def exported(fine_tuned, tmp_path_factory):
    output = str(tmp_path_factory.mktemp("exported") / "marian")
    run = subprocess.run(
        [sys.executable, "-m", "jaxtrans.export", "--workdir", fine_tuned, "--output", output],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return output


def test_the_export_keeps_both_sizes_and_the_one_pad(separate, exported):
    hf, original = read_json(exported, "config.json"), read_json(separate, "config.json")
    for key in ("vocab_size", "decoder_vocab_size", "pad_token_id", "decoder_start_token_id"):
        assert hf[key] == original[key], key
    for name in ("vocab.json", "target_vocab.json", "tokenizer_config.json"):
        assert read_json(exported, name) == read_json(separate, name), name


def test_the_export_is_numbered_by_marian_tokenizer_as_the_run(fine_tuned, exported):
    tokenizer = jaxtrans.Translator.load(fine_tuned).task.tokenizer
    assert_ids_equal_marian_tokenizer(exported, tokenizer, CHINESE + GERMAN + random_text(50))


def test_the_exports_logits_equal_the_runs(fine_tuned, exported):
    """Every column but Marian's <pad>, the decoder start, which neither side ever emits:
    its output row is the run's start row, trained down, and the export's, zero."""
    run = jaxtrans.Translator.load(fine_tuned)
    pairs = list(zip(CHINESE[8:14], GERMAN[8:14], strict=True))
    marian, ours, real = marian_and_jaxtrans_logits(
        exported, run.task.model_config, run.params, run.task.tokenizer, pairs
    )
    columns = np.arange(marian.shape[-1]) != read_json(exported, "config.json")["pad_token_id"]
    np.testing.assert_allclose(ours[real][:, columns], marian[real][:, columns], atol=1e-5,
                               rtol=0)  # fmt: skip
    assert run.step == STEPS


def test_the_export_translates_as_the_run(fine_tuned, exported):
    got = jaxtrans.Translator.load(fine_tuned).translate(
        SENTENCES, beam_size=1, max_extra_length=MAX_EXTRA
    )
    assert got == marian_generate(exported, SENTENCES, num_beams=1, max_extra=MAX_EXTRA)
