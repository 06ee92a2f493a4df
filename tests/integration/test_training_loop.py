"""The training loop end to end on a tiny model: logs, checkpoints, exact resume, CLI errors."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from paths import REPO
from tiny_configs import tiny_translation_config

from jaxtrans.tasks import train_and_evaluate
from jaxtrans.workdirs.checkpoints import Checkpointer


def tiny_config(num_steps: int):
    return tiny_translation_config(
        num_steps, **{"train.checkpoint_every": 3, "train.compilation_cache_dir": ""}
    )


def read_metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"loss"' in line and "split" not in line]


def final_params(workdir, step):
    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        from orbax.checkpoint import args

        restored = checkpointer.manager.restore(
            step, args=args.Composite(params=args.StandardRestore())
        )
        return jax.tree.leaves(restored["params"])
    finally:
        checkpointer.close()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("straight")
    train_and_evaluate(tiny_config(8), str(workdir))
    return workdir


def test_run_writes_config_tokenizer_metrics_tensorboard_and_checkpoints(uninterrupted):
    names = set(os.listdir(uninterrupted))
    assert {"config.json", "tokenizer", "metrics.jsonl", "tensorboard", "checkpoints"} <= names
    records = read_metrics(uninterrupted)
    assert [r["step"] for r in records] == list(range(1, 9))
    for key in ("loss", "nll", "accuracy", "lr", "grad_norm", "tokens_per_sec", "mfu"):
        assert key in records[0]
    assert records[-1]["loss"] < records[0]["loss"]
    with open(os.path.join(uninterrupted, "config.json")) as f:
        saved = json.load(f)
    assert saved["model"]["vocab_size"] > 0 and saved["train"]["num_steps"] == 8
    assert sorted(int(s) for s in os.listdir(os.path.join(uninterrupted, "checkpoints"))
                  if s.isdigit()) == [3, 6, 8]  # fmt: skip


def test_resumed_run_continues_with_identical_losses_and_parameters(uninterrupted, tmp_path):
    train_and_evaluate(tiny_config(5), str(tmp_path))  # stops after the step-5 checkpoint
    train_and_evaluate(tiny_config(8), str(tmp_path))  # the same command, longer: resumes
    straight, resumed = read_metrics(uninterrupted), read_metrics(tmp_path)
    assert [r["step"] for r in resumed] == list(range(1, 9))
    for a, b in zip(straight, resumed, strict=True):
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"], (a, b)
    for a, b in zip(final_params(uninterrupted, 8), final_params(tmp_path, 8), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def run_train(*args):
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "train.py"), *args],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize(
    "override, message",
    [
        ("--config.train.no_such_key=1", "no_such_key"),
        ("--config.train.num_steps=many", "num_steps"),
    ],
)
def test_bad_override_is_a_one_line_error_with_status_2(tmp_path, override, message):
    result = run_train("--config", "configs/demo.py", "--workdir", str(tmp_path / "w"), override)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and message in error_lines[0]
    assert not os.path.exists(tmp_path / "w")


def test_resuming_with_another_model_shape_is_a_clear_error(uninterrupted):
    config = tiny_config(10)
    config.model.d_model = 64
    from jaxtrans.errors import UserError

    with pytest.raises(UserError, match="d_model"):
        train_and_evaluate(config, str(uninterrupted))


def test_nonfinite_update_stops_the_run_naming_step_and_tensor_and_saves_nothing(tmp_path):
    from jaxtrans.errors import TrainingStopped

    config = tiny_config(6)
    config.optimizer.schedule = "constant"
    config.optimizer.learning_rate = float("inf")  # the first update overflows
    with pytest.raises(TrainingStopped, match=r"step 1: the updated params\[.+\] is not finite"):
        train_and_evaluate(config, str(tmp_path))
    assert not [s for s in os.listdir(tmp_path / "checkpoints") if s.isdigit()]


def test_nonfinite_updates_can_be_skipped_and_counted_keeping_a_finite_state(tmp_path):
    config = tiny_config(3)
    config.optimizer.schedule = "constant"
    config.optimizer.learning_rate = float("inf")
    config.train.on_nonfinite = "skip"
    metrics = train_and_evaluate(config, str(tmp_path))
    assert metrics["skipped_steps"] == 3
    for leaf in final_params(tmp_path, 3):
        assert np.isfinite(np.asarray(leaf)).all()


def test_a_second_training_on_the_same_workdir_refuses(tmp_path):
    import fcntl

    from jaxtrans.errors import UserError

    with open(tmp_path / ".lock", "w") as held:  # as a running training holds it
        held.write("pid 12345")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match="in use by a training run"):
            train_and_evaluate(tiny_config(2), str(tmp_path))
