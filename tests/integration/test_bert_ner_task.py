"""The bert_token_classification task end to end: train.py + evaluate.py (--workdir and
--input) on tiny CoNLL files, reports equal to seqeval on the gold tags read from the files
themselves, a Chinese character-level run (a Hugging Face BertForTokenClassification
directory: test_bert_ner_huggingface.py)."""

import io
import json
import os
import subprocess
import sys
import warnings

from compilation_cache_settings import restore_compilation_cache_settings  # noqa: F401
from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model is built here, not fetched

import pytest
from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities

from jaxtrans import tasks
from jaxtrans.data.ner.conll import TaggedSentence, write_conll
from jaxtrans.data.ner.demo import demo_sentences
from jaxtrans.errors import UserError
from jaxtrans.inference.entities import convert_tags
from jaxtrans.programs.evaluate import main
from jaxtrans.programs.export import main as export_main

sys.path.insert(0, REPO)

from configs import bert_ner, bert_ner_demo  # noqa: E402

# configs/bert_ner_demo.py shrunk to seconds; 20 steps, so that the model predicts entities
# (after 4 it predicts almost none, and the entity checks below would check nothing).
STEPS = 20
TINY = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_layers": 1,
    "model.max_len": 20,
    "model.dropout_rate": 0.0,
    "data.max_seq_length": 20,
    "data.vocab_size": 300,
    "data.batch_size": 8,
    "data.tag_scheme": "iobes",
    "optimizer.schedule": "constant",
    "optimizer.learning_rate": 3e-3,
    "train.num_steps": STEPS,
    "train.log_every": 10,
    "train.eval_every": STEPS,
    "train.checkpoint_every": STEPS,
    "train.async_checkpoints": False,
    "eval.batch_size": 8,
}


def in_iobes(sentences):
    return [TaggedSentence(s.words, tuple(convert_tags(s.tags, "iobes"))) for s in sentences]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """configs/bert_ner_demo.py (tiny) trained through train.py on IOBES files."""
    data = tmp_path_factory.mktemp("ner_files")
    write_conll(in_iobes(demo_sentences("train", 60)), data / "train.txt")
    write_conll(in_iobes(demo_sentences("dev", 12)), data / "dev.txt")
    write_conll(in_iobes(demo_sentences("test", 10)), data / "test.txt")
    workdir = tmp_path_factory.mktemp("ner_run")
    flags = [f"--config.{k}={v}" for k, v in TINY.items()]
    flags += [f"--config.data.ner_{split}={data}/{split}.txt" for split in ("train", "dev", "test")]
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/bert_ner_demo.py",
         "--workdir", str(workdir), *flags],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, data


def evaluate_py(monkeypatch, capsys, *flags: str, stdin: str = "") -> str:
    """evaluate.py (in this process, to save an interpreter start) -> what it printed."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    main(["evaluate.py", *flags])
    return capsys.readouterr().out


def test_training_logs_dev_entity_scores_and_keeps_bio_labels(trained):
    workdir, _ = trained
    with open(workdir / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    (dev,) = [r for r in records if r.get("split") == "dev"]
    assert {"loss", "accuracy", "precision", "recall", "f1"} <= set(dev)
    config = json.loads((workdir / "config.json").read_text())
    assert config["data"]["labels"] == "O,B-LOC,I-LOC,B-ORG,I-ORG,B-PER,I-PER"
    assert config["model"]["num_labels"] == 7
    assert (workdir / "bert_tokenizer" / "spm.model").is_file()


def test_evaluate_py_writes_entity_scores_of_the_test_split(trained, monkeypatch, capsys):
    workdir, _ = trained
    printed = evaluate_py(monkeypatch, capsys, "--workdir", str(workdir))
    assert "test (10 sentences" in printed and "f1" in printed
    report = json.loads((workdir / "eval" / f"test-step{STEPS}.json").read_text())
    assert report["sentences"] == 10 and report["split"] == "test"
    for key in ("precision", "recall", "f1", "accuracy", "loss"):
        assert 0 <= report[key] <= 1 or key == "loss", report
    assert set(report["by_type"]) <= {"PER", "LOC", "ORG"}


def test_evaluate_py_input_prints_entities_with_character_offsets(trained, monkeypatch, capsys):
    workdir, _ = trained
    lines = ["Talia Renvik visited Port Elvara on Monday.", "", "  Prices rose again ."]
    printed = evaluate_py(
        monkeypatch, capsys, "--workdir", str(workdir), "--input", "-", stdin="\n".join(lines)
    )
    outputs = [json.loads(line) for line in printed.splitlines()]
    assert [o["text"] for o in outputs] == lines
    assert outputs[1]["entities"] == []
    assert outputs[0]["entities"], "the trained model finds no entity: the checks check nothing"
    for output in outputs:
        for entity in output["entities"]:
            assert output["text"][entity["start"] : entity["end"]] == entity["text"]
            assert entity["entity"] in ("PER", "LOC", "ORG") and 0 < entity["score"] <= 1


def read_gold_tags(path) -> list[list[str]]:
    """The tags of a CoNLL file as written, read here rather than by jaxtrans's reader:
    the last column of each line, a blank line ending a sentence."""
    sentences, tags = [], []
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.strip() and not line.startswith("-DOCSTART-"):
            tags.append(line.split()[-1])
        elif tags:
            sentences.append(tags)
            tags = []
    return sentences


@pytest.mark.parametrize("split", ["dev", "test"])
def test_report_equals_seqeval_on_the_gold_file_and_the_predictions_with_windows(
    trained, tmp_path, split
):
    workdir, data = trained
    gold = read_gold_tags(data / f"{split}.txt")
    assert all(g[0][:2] in ("O", "B-", "S-") for g in gold)  # the files are IOBES
    task = tasks.restore_task(str(workdir))
    # Most sentences are longer than 20 pieces: they are cut into windows.
    _, windows, _ = task.split_data(split)
    assert len(windows) > len(gold)
    report = task.evaluate(split, outdir=str(tmp_path))
    _, _, predicted, _, _ = task.tag_split(split, task.restore_params().params)
    assert [len(p) for p in predicted] == [len(g) for g in gold]
    gold_entities, predicted_entities = set(get_entities(gold)), set(get_entities(predicted))
    correct = len(gold_entities & predicted_entities)
    # Entities predicted, some right: precision, recall and F1 are neither 0 nor 1 by default.
    assert predicted_entities and correct, (correct, len(predicted_entities))
    assert report["entities"] == {
        "correct": correct, "predicted": len(predicted_entities), "gold": len(gold_entities)
    }  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [f(gold, predicted) for f in (precision_score, recall_score, f1_score)]
        by_type = classification_report(gold, predicted, output_dict=True, zero_division=0)
    assert [report[k] for k in ("precision", "recall", "f1")] == pytest.approx(expected, abs=1e-12)
    types = set(by_type) - {"micro avg", "macro avg", "weighted avg"}
    assert set(report["by_type"]) == types
    for t in types:
        ours, theirs = report["by_type"][t], by_type[t]
        assert ours["gold"] == theirs["support"], t
        assert [ours["precision"], ours["recall"], ours["f1"]] == pytest.approx(
            [theirs["precision"], theirs["recall"], theirs["f1-score"]], abs=1e-12
        ), t


def test_a_dev_file_with_an_unknown_entity_type_names_its_line(trained, tmp_path):
    workdir, _ = trained
    (tmp_path / "dev.txt").write_text("Anna S-PER\n\nAcme S-COMPANY\n")
    task = tasks.restore_task(str(workdir))
    task.config.data.ner_dev = str(tmp_path / "dev.txt")
    with pytest.raises(UserError, match=r"dev.txt:3: the model has no label B-COMPANY"):
        task.split_data("dev")


# --------------------------------------------------------------------------- Chinese

PEOPLE, PLACES = ["张三", "李四", "王小明"], ["北京", "上海", "广州"]


def chinese_sentences():
    """One character a word: PER 在 LOC 工作 。 and LOC 欢迎 PER 。"""
    sentences = []
    for person in PEOPLE:
        for place in PLACES:
            for chars, kinds in (
                ([person, "在", place, "工作", "。"], ["PER", "O", "LOC", "O", "O"]),
                ([place, "欢迎", person, "。"], ["LOC", "O", "PER", "O"]),
            ):
                words, tags = [], []
                for text, kind in zip(chars, kinds, strict=True):
                    words += list(text)
                    if kind == "O":
                        tags += ["O"] * len(text)
                    else:
                        tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(text) - 1)
                sentences.append(TaggedSentence(tuple(words), tuple(tags)))
    return sentences


def test_chinese_characters_train_evaluate_and_predict_entities_at_their_offsets(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += sorted({c for s in chinese_sentences() for c in s.words})
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    write_conll(chinese_sentences(), tmp_path / "train.txt")
    config = bert_ner_demo.get_config()
    config.update_from_flattened_dict(
        {**TINY, "data.tag_scheme": "bio", "train.num_steps": 60, "train.eval_every": 60,
         "train.checkpoint_every": 60, "train.log_every": 60, "model.d_model": 64,
         "optimizer.learning_rate": 5e-3, "data.hf_checkpoint": str(tmp_path / "vocab"),
         "data.ner_train": str(tmp_path / "train.txt"),
         "data.ner_dev": str(tmp_path / "train.txt")}
    )  # fmt: skip
    workdir = str(tmp_path / "run")
    tasks.train_and_evaluate(config, workdir)
    task = tasks.restore_task(workdir)
    assert task.evaluate("dev")["f1"] == 1.0
    lines = ["李四在广州工作。", " 广州欢迎王小明。"]
    outputs = [json.loads(line) for line in task.predict(lines)]
    found = [
        [(e["entity"], e["text"], e["start"], e["end"]) for e in o["entities"]] for o in outputs
    ]
    assert found == [
        [("PER", "李四", 0, 2), ("LOC", "广州", 3, 5)],
        [("LOC", "广州", 1, 3), ("PER", "王小明", 5, 8)],
    ]
    # Exported as a Hugging Face directory, it predicts the same through from_pretrained.
    export_main(["jaxtrans.export", "--workdir", workdir, "--output", str(tmp_path / "hf")])
    exported = tasks.pretrained_task("bert_token_classification", str(tmp_path / "hf"), config)
    assert exported.predict(lines) == task.predict(lines)


def test_a_resumed_run_reuses_the_workdirs_tokenizer_and_labels(trained):
    workdir, data = trained
    model_file = workdir / "bert_tokenizer" / "spm.model"
    before = (model_file.read_bytes(), model_file.stat().st_mtime_ns)
    config = bert_ner_demo.get_config()
    config.update_from_flattened_dict(
        {**TINY, **{f"data.ner_{s}": str(data / f"{s}.txt") for s in ("train", "dev", "test")}}
    )
    task = tasks.load_task(config, str(workdir))
    assert (model_file.read_bytes(), model_file.stat().st_mtime_ns) == before
    assert task.run_config.data.labels == tasks.restore_task(str(workdir)).run_config.data.labels


def test_fine_tuning_without_init_from_or_a_model_shape_is_a_user_error(trained):
    _, data = trained
    config = bert_ner.get_config()
    config.data.ner_train = str(data / "train.txt")
    config.data.tag_scheme = "iobes"
    with pytest.raises(UserError, match="--config.init_from is required"):
        tasks.load_task(config, "/nonexistent/workdir")
