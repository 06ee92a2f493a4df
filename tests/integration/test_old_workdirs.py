"""Workdirs written by an earlier version (commit 0996837, before jaxtrans/tasks/) still
evaluate to what that version reported, and resume to the losses it trained next.

The fixtures and what that version printed for them: tests/fixtures/workdirs_0996837/.
"""

import json
import os
import shutil

import pytest
from paths import FIXTURES

from jaxtrans.tasks import evaluate_workdir, train_and_evaluate
from jaxtrans.workdirs.workdir import load_run_config

FIXTURES = os.path.join(FIXTURES, "workdirs_0996837")
with open(os.path.join(FIXTURES, "expected.json"), encoding="utf-8") as f:
    EXPECTED = json.load(f)


def copy_of(name: str, tmp_path) -> str:
    """A writable copy, so that the committed fixture is never touched."""
    target = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), target)
    return str(target)


def resumed_losses(workdir: str, **train) -> dict[str, float]:
    """Resume the run with its own config.json (and ``train`` changes) for two more steps;
    their losses."""
    config = load_run_config(workdir)
    config.train.num_steps = 6
    config.train.update(train)
    train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return {str(r["step"]): r["loss"] for r in records if "split" not in r and r["step"] > 4}


def test_an_old_translation_workdir_evaluates_as_it_did(tmp_path):
    expected = EXPECTED["translation"]
    workdir = copy_of("translation", tmp_path)
    report = evaluate_workdir(workdir, split="test", beam_size=2, outdir=str(tmp_path / "eval"))
    with open(tmp_path / "eval" / "test-step4-beam2.hyp.txt", encoding="utf-8") as f:
        assert f.read().splitlines() == expected["hypotheses"]
    assert report["step"] == 4 and report["num_sentences"] == expected["num_sentences"]
    assert report["bleu"] == pytest.approx(expected["bleu"], abs=1e-9)
    assert report["chrf"] == pytest.approx(expected["chrf"], abs=1e-9)


def test_an_old_bert_workdir_evaluates_as_it_did(tmp_path):
    expected = EXPECTED["bert_pretraining"]["report"]
    workdir = copy_of("bert_pretraining", tmp_path)
    report = evaluate_workdir(workdir, outdir=str(tmp_path / "eval"))  # dev: the task's own
    assert report.keys() == expected.keys()
    for key, value in expected.items():
        assert report[key] == (
            pytest.approx(value, rel=1e-5) if isinstance(value, float) else value
        )


@pytest.mark.parametrize(
    "name, train",
    [
        ("translation", {}),
        ("bert_pretraining", {}),
        # Today's accelerator recipes ask for rbg: the old threefry key is kept.
        ("translation", {"dropout_rng_impl": "rbg"}),
    ],
)
def test_an_old_workdir_resumes_where_it_stopped(name, train, tmp_path):
    losses = resumed_losses(copy_of(name, tmp_path), **train)
    expected = EXPECTED[name]["resumed_loss"]
    assert losses.keys() == expected.keys() == {"5", "6"}
    for step, loss in expected.items():
        assert losses[step] == pytest.approx(loss, rel=1e-5)
