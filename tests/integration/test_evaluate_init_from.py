"""evaluate.py --init_from HF_DIR --task NAME: a Hugging Face directory scored or asked
with no training, its data and eval settings from --config; the flags that go with it
and those that do not are one-line errors (exit 2) that write nothing."""

import io
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import numpy as np
import pytest
import torch
import transformers
from paths import REPO
from test_bert_predict import save_model

from jaxtrans.programs.evaluate import main

TOL = 1e-5
LABELS = {0: "neg", 1: "neutral", 2: "pos"}
TEST_LINES = [
    ("pos", "paris is the capital of france .", None),
    ("neg", "rome , italy", "berlin , germany"),
    ("neutral", "a big city", None),
    ("pos", "the river", "a small city and a big river"),
    ("neg", "france", None),
]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    directory = tmp_path_factory.mktemp("classifier")
    model = save_model(
        transformers.BertForSequenceClassification, directory, seed=2, id2label=LABELS
    )
    return directory, model


def evaluate(*flags: str) -> None:
    # The config flag finds --config.KEY overrides in sys.argv, as the program is run.
    argv = ["evaluate.py", *flags]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", argv)
        main(argv)


def test_scoring_a_test_file_reports_the_accuracy_of_transformers_predictions(
    classifier, tmp_path, capsys
):
    directory, model = classifier
    test_file = tmp_path / "test.tsv"
    rows = ["\t".join(x for x in line if x is not None) for line in TEST_LINES]
    test_file.write_text("\n".join(rows) + "\n")
    outdir = tmp_path / "reports"
    evaluate(
        "--init_from", str(directory), "--task", "bert_classification",
        "--config", os.path.join(REPO, "configs", "bert_classify.py"),
        f"--config.data.classification_test={test_file}", "--config.eval.batch_size=2",
        "--config.model.dtype=float32",  # the recipe's bfloat16 off: compared with torch
        "--outdir", str(outdir),
    )  # fmt: skip
    report = json.loads((outdir / "test-step0.json").read_text())
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)
    losses, correct = [], 0
    for label, text, text_b in TEST_LINES:
        with torch.no_grad():
            logits = model(**tokenizer(text, text_b, return_tensors="pt")).logits[0]
        target = [k for k, v in LABELS.items() if v == label][0]
        losses.append(float(torch.nn.functional.cross_entropy(logits, torch.tensor(target))))
        correct += int(logits.argmax()) == target
    assert (report["task"], report["split"], report["examples"]) == (
        "bert_classification", "test", 5
    )  # fmt: skip
    assert report["labels"] == list(LABELS.values())
    assert report["accuracy"] == pytest.approx(correct / 5, abs=1e-6)
    assert report["loss"] == pytest.approx(np.mean(losses), abs=TOL)
    assert "Hugging Face weights" in report["checkpoint"]
    assert "wrote" in capsys.readouterr().out


def refused(capsys, *flags: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        evaluate(*flags)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    "flags, says",
    [
        (("--init_from", "{hf}", "--input", "-"), "holds a bert model; give --task NAME, one of"),
        (("--workdir", "{tmp}", "--task", "bert_classification"), "--task goes with --init_from"),
        (("--workdir", "{tmp}", "--config", "{classify}"), "--config goes with --init_from"),
        (("--workdir", "{tmp}", "--init_from", "{hf}"), "either --workdir"),
        (("--task", "bert_classification"), "--workdir is required"),
        (("--init_from", "{hf}", "--task", "bert_classification", "--checkpoint", "3",
          "--input", "-"), "--checkpoint 3: a Hugging Face directory has one set"),
        (("--init_from", "{hf}", "--task", "bert_classification"), "--outdir is required"),
        (("--init_from", "{hf}", "--task", "bert_pretraining", "--config", "{classify}",
          "--input", "-"), "--config is a bert_classification config but --task is"),
        (("--init_from", "{hf}", "--task", "bert_pretraining", "--input", "-"),
         "holds a BertForSequenceClassification model; the bert_pretraining task needs one of"),
        (("--init_from", "{hf}", "--task", "tagging", "--input", "-"), "--task='tagging'"),
        (("--init_from", "{tmp}/none", "--task", "bert_classification", "--input", "-"),
         "no such directory"),
    ],
)  # fmt: skip
def test_flags_of_the_wrong_source_are_one_line_errors(classifier, tmp_path, capsys, flags, says):
    names = dict(hf=classifier[0], tmp=tmp_path, classify=f"{REPO}/configs/bert_classify.py")
    assert says in refused(capsys, *[f.format(**names) for f in flags])
    assert list(tmp_path.iterdir()) == []


def test_a_split_the_config_has_no_data_for_is_a_one_line_error(classifier, tmp_path, capsys):
    err = refused(
        capsys, "--init_from", str(classifier[0]), "--task", "bert_classification",
        "--outdir", str(tmp_path / "reports"), "--split", "dev",
    )  # fmt: skip
    assert "names no dev data" in err
    assert not (tmp_path / "reports").exists()


def test_a_checkpoint_without_the_tasks_head_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    # A token classifier has a classifier but no pooler; with its architectures entry
    # removed, only the weights tell that it cannot classify sentences.
    save_model(transformers.BertForTokenClassification, tmp_path, seed=3, id2label=LABELS)
    config_file = tmp_path / "config.json"
    config = json.loads(config_file.read_text())
    del config["architectures"]
    config_file.write_text(json.dumps(config))
    capsys.readouterr()  # the save's progress output
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a big city\n")))
    err = refused(
        capsys, "--init_from", str(tmp_path), "--task", "bert_classification", "--input", "-"
    )
    assert "has no bert/pooler weights" in err


def test_a_directory_saved_without_vocab_txt_answers_as_with_it(
    classifier, tmp_path, capsys, monkeypatch
):
    # transformers 5's save_pretrained writes tokenizer.json and no vocab.txt.
    with_vocab = classifier[0]
    without = tmp_path / "no_vocab_txt"
    shutil.copytree(with_vocab, without)
    (without / "vocab.txt").unlink()
    assert (without / "tokenizer.json").is_file()
    lines = "Paris is the CAPITAL of France .\nrome , italy\tBerlin , Germanys\nzebra ? a city\n"

    def answers(directory) -> list[dict]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
        capsys.readouterr()
        evaluate("--init_from", str(directory), "--task", "bert_classification", "--input", "-")
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    expected = answers(with_vocab)
    assert len(expected) == 3
    assert answers(without) == expected
    assert not (without / "vocab.txt").exists()
