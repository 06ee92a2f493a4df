"""BERT pretraining in the training loop: train.py with MLM/NSP metrics, exact resume,
evaluation reports checked against NumPy, evaluate.py on a pretraining workdir. (Fine-tuning:
test_bert_fine_tuning.py; GLUE from TFDS: test_bert_glue.py; BERT-base shapes and step
FLOPs: test_bert_flops.py.)"""

import json
import os
import subprocess
import sys

import bert_training_runs
from bert_training_runs import (
    PRETRAINING_STEPS,
    assert_trees_equal,
    checkpoint_params,
    log_softmax,
    read_records,
    tiny_pretraining_config,
)
from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model is built here, not fetched

import jax
import numpy as np
import pytest

from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_model import BertForPretraining
from jaxtrans.tasks import evaluate_workdir, restore_task, train_and_evaluate
from jaxtrans.tasks.bert.bert_task import bert_config

# The shared fixtures, named here so that pytest finds them in this module: the module's
# compilation cache (autouse) and the tiny pretraining run.
compilation_cache = bert_training_runs.compilation_cache
pretrained = bert_training_runs.pretrained


def test_train_py_pretrains_bert_demo_and_logs_mlm_and_nsp_metrics(pretrained):
    records = read_records(pretrained)
    assert [r["step"] for r in records] == list(range(1, PRETRAINING_STEPS + 1))
    for record in records:
        for key in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "lr", "grad_norm"):
            assert np.isfinite(record[key]), (key, record)
        assert record["loss"] == pytest.approx(record["mlm_loss"] + record["nsp_loss"], rel=1e-6)
        assert 0 <= record["mlm_accuracy"] <= 1 and 0 <= record["nsp_accuracy"] <= 1
    (dev,) = read_records(pretrained, "dev")
    assert dev["step"] == PRETRAINING_STEPS and {"mlm_accuracy", "nsp_accuracy"} <= set(dev)
    events = b"".join(path.read_bytes() for path in (pretrained / "tensorboard").iterdir())
    for tag in (b"train/mlm_loss", b"train/nsp_accuracy", b"dev/mlm_accuracy"):
        assert tag in events
    with open(os.path.join(pretrained, "config.json")) as f:
        saved = json.load(f)
    assert saved["task"] == "bert_pretraining"
    import sentencepiece as spm

    pieces = spm.SentencePieceProcessor(
        model_file=str(pretrained / "bert_tokenizer" / "spm.model")
    ).get_piece_size()
    assert saved["model"]["vocab_size"] == pieces and saved["model"]["d_model"] == 32


def test_resumed_pretraining_continues_with_identical_losses(pretrained, tmp_path):
    train_and_evaluate(tiny_pretraining_config(4), str(tmp_path))  # checkpoints 3 and 4
    train_and_evaluate(tiny_pretraining_config(PRETRAINING_STEPS), str(tmp_path))  # resumes
    straight, resumed = read_records(pretrained), read_records(tmp_path)
    assert [r["step"] for r in resumed] == list(range(1, PRETRAINING_STEPS + 1))
    for a, b in zip(straight, resumed, strict=True):
        for key in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "grad_norm"):
            assert a[key] == b[key], (key, a, b)
    assert_trees_equal(
        checkpoint_params(pretrained, PRETRAINING_STEPS),
        checkpoint_params(tmp_path, PRETRAINING_STEPS),
    )


def test_pretraining_evaluation_report_equals_numpy(pretrained):
    report = evaluate_workdir(str(pretrained), split="dev")
    path = pretrained / "eval" / f"dev-step{PRETRAINING_STEPS}.json"
    assert json.loads(path.read_text()) == report

    with open(pretrained / "config.json") as f:
        run_config = json.load(f)
    task = restore_task(str(pretrained))
    params = checkpoint_params(pretrained, PRETRAINING_STEPS)
    model = jax.jit(BertForPretraining(bert_config(run_config["model"])).apply)
    mlm_nll, mlm_correct, nsp_nll, nsp_correct, predictions, examples = 0, 0, 0, 0, 0, 0
    for batch in task.split_batches("dev"):
        mlm, nsp = model(
            {"params": params}, batch["input_ids"], batch["token_type_ids"],
            batch["attention_mask"], batch["masked_positions"],
        )  # fmt: skip
        weights = batch["masked_weights"]
        mlm_lp = log_softmax(mlm)
        picked = np.take_along_axis(mlm_lp, batch["masked_ids"][..., None], -1)[..., 0]
        mlm_nll -= (picked * weights).sum()
        mlm_correct += ((mlm_lp.argmax(-1) == batch["masked_ids"]) * weights).sum()
        predictions += weights.sum()
        nsp_lp = log_softmax(nsp)
        labels = batch["next_sentence_label"]
        nsp_nll -= nsp_lp[np.arange(len(labels)), labels].sum()
        nsp_correct += (nsp_lp.argmax(-1) == labels).sum()
        examples += len(labels)
    assert report["examples"] == examples == 16
    assert report["mlm_accuracy"] == pytest.approx(mlm_correct / predictions, abs=1e-6)
    assert report["nsp_accuracy"] == pytest.approx(nsp_correct / examples, abs=1e-6)
    assert report["mlm_loss"] == pytest.approx(mlm_nll / predictions, rel=1e-5)
    assert report["nsp_loss"] == pytest.approx(nsp_nll / examples, rel=1e-5)
    # The loop's own dev evaluation at that step scored the same batches with the same code.
    (dev,) = read_records(pretrained, "dev")
    assert dev["mlm_accuracy"] == pytest.approx(report["mlm_accuracy"], abs=1e-6)


def test_evaluating_a_pretraining_run_on_test_or_a_workdir_of_an_unknown_task_is_a_user_error(
    pretrained, tmp_path
):
    with pytest.raises(UserError, match="use --split dev"):
        evaluate_workdir(str(pretrained), split="test")
    (tmp_path / "config.json").write_text(json.dumps({"task": "tagging", "model": {}, "data": {}}))
    with pytest.raises(UserError, match="task='tagging' is not one of translation, bert_"):
        evaluate_workdir(str(tmp_path), split="dev")


def test_evaluate_py_scores_a_pretraining_workdir_on_dev_by_default(pretrained, tmp_path):
    evaluate_py = os.path.join(REPO, "evaluate.py")
    result = subprocess.run(
        [sys.executable, evaluate_py, "--workdir", str(pretrained), "--outdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((tmp_path / f"dev-step{PRETRAINING_STEPS}.json").read_text())
    assert report == evaluate_workdir(str(pretrained), split="dev", outdir=str(tmp_path))
    refused = subprocess.run(
        [sys.executable, evaluate_py, "--workdir", str(pretrained), "--input", "-"],
        capture_output=True, text=True, timeout=300, input="x\n",
    )  # fmt: skip
    assert refused.returncode == 2 and "--input line 1 has no [MASK]" in refused.stderr
