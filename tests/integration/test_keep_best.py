"""train.keep_best and train.patience end to end: the real train.py on the tiny demo run of
tests/helpers/reliability_runs.py, whose dev loss is best at an early step.

The run warms its learning rate up linearly to 1.0, far too high: the first step changes
nothing (its rate is 0), the second lowers the dev loss, and from the third on the loss is
far above that (5.05 at step 2, then 9.2, 10.2, 7.7, 19.1, 27.7, ...). Evaluated at every
step with patience 3, the run keeps step 2 as its best and stops after step 5.
"""

import json
import os
import random
import shutil
import signal
import time

import jax
import numpy as np
import pytest
from reliability_runs import checkpoint_leaves, checkpoint_steps, tiny_flags, train

from jaxtrans.programs.translator import Translator

PEAK = 2  # the step of the lowest dev loss
PATIENCE = 3
STOP = PEAK + PATIENCE  # evaluated every step: the step the run stops after
KEEP = 2  # train.keep_checkpoints
TIMING_KEYS = {"tokens_per_sec", "steps_per_sec", "mfu", "input_wait", "input_wait_fraction"}


def keep_best_flags(**overrides) -> list[str]:
    """The run's flags (plus ``overrides``, e.g. ``train__patience=5``)."""
    values = {
        "train__eval_every": 1,
        "train__keep_best": "loss",
        "train__patience": PATIENCE,
        "train__keep_checkpoints": KEEP,
        "eval__bleu_during_training": False,
        "optimizer__schedule": "linear",
        "optimizer__learning_rate": 1.0,
        "optimizer__warmup_steps": 8,
    }
    return tiny_flags(20, **{**values, **overrides})


def records(workdir, split: str | None) -> list[dict]:
    """metrics.jsonl's records of ``split`` (None: the training records), timing left out."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        found = [json.loads(line) for line in f]
    return [
        {k: v for k, v in r.items() if k not in TIMING_KEYS}
        for r in found
        if r.get("split") == split
    ]


def leaves(translator: Translator) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(translator.params)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run, uninterrupted: its workdir and stdout."""
    workdir = tmp_path_factory.mktemp("keep_best") / "run"
    run = train(workdir, *keep_best_flags())
    assert run.returncode == 0, run.stderr
    return workdir, run.stdout


def test_the_dev_loss_of_the_tiny_run_is_lowest_at_the_peak_step(reference):
    losses = [r["loss"] for r in records(reference[0], "dev")]
    assert min(losses) == losses[PEAK - 1]
    assert all(loss > losses[PEAK - 1] + 1 for loss in losses[PEAK:])  # by a wide margin


def test_the_run_stops_after_patience_evaluations_without_improvement(reference):
    workdir, stdout = reference
    dev = records(workdir, "dev")
    assert [r["step"] for r in dev] == list(range(1, STOP + 1))
    assert [r["step"] for r in records(workdir, None)] == list(range(1, STOP + 1))
    assert [r["best_step"] for r in dev] == [1, 2, 2, 2, 2]
    assert [r["evals_since_best"] for r in dev] == [0, 0, 1, 2, 3]
    assert dev[-1]["stop"] == "patience" and "stop" not in dev[-2]
    stopped = [line for line in stdout.splitlines() if line.startswith("stopped early")]
    assert stopped == [
        f"stopped early after step {STOP}: {PATIENCE} dev evaluations in a row did not "
        f"improve on step {PEAK}'s loss {dev[PEAK - 1]['loss']:.4g} "
        f"(train.patience={PATIENCE}); saved checkpoint {STOP}; --checkpoint best restores "
        f"step {PEAK}"
    ]


def test_the_best_checkpoint_stays_after_newer_ones_rotate_out(reference):
    assert checkpoint_steps(reference[0]) == [PEAK, STOP - 1, STOP]


def test_checkpoint_best_restores_exactly_the_params_of_the_peak_step(reference, tmp_path):
    # The same run keeping every checkpoint: the same compiled step, so its checkpoint of
    # the peak step holds the same bits. (A shorter run would compile another schedule,
    # whose rounding XLA does not promise to keep.)
    kept = tmp_path / "every_checkpoint_kept"
    assert train(kept, *keep_best_flags(train__keep_checkpoints=STOP)).returncode == 0
    assert checkpoint_steps(kept) == list(range(1, STOP + 1))

    best = Translator.load(str(reference[0]), checkpoint="best")
    latest = Translator.load(str(reference[0]), checkpoint="latest")
    peak = Translator.load(str(kept), checkpoint=str(PEAK))

    assert (best.step, latest.step, peak.step) == (PEAK, STOP, PEAK)
    loss = records(reference[0], "dev")[PEAK - 1]["loss"]
    assert best.description == f"step {PEAK} (best dev loss {loss:.4g})"
    for got, want in zip(leaves(best), leaves(peak), strict=True):
        np.testing.assert_array_equal(got, want)
    assert any(not np.array_equal(a, b) for a, b in zip(leaves(best), leaves(latest), strict=True))


def test_a_rerun_of_a_stopped_run_trains_nothing_and_a_larger_patience_goes_on_counting(
    reference, tmp_path
):
    workdir = tmp_path / "run"
    shutil.copytree(reference[0], workdir)

    again = train(workdir, *keep_best_flags())
    assert again.returncode == 0, again.stderr
    assert f"the run stopped early at step {STOP}" in again.stdout
    assert "nothing to train" in again.stdout
    assert checkpoint_steps(workdir) == [PEAK, STOP - 1, STOP]

    # Two evaluations more: the count goes on from the checkpoint's 3, not from 0.
    longer = train(workdir, *keep_best_flags(train__patience=PATIENCE + 2))
    assert longer.returncode == 0, longer.stderr
    assert f"stopped early after step {STOP + 2}" in longer.stdout
    assert checkpoint_steps(workdir) == [PEAK, STOP + 1, STOP + 2]


# Kills the process (SIGKILL) the moment orbax renames the finished temporary directory
# of checkpoint {step} into place: written, not committed, as in
# tests/reliability/test_reliability_faults.py.
KILL_BEFORE_COMMITTING = """
import os, signal
from orbax.checkpoint._src.path import async_path
rename = async_path.rename
async def rename_or_die(source, destination, *args, **kwargs):
    if os.path.basename(str(destination)) == "{step}":
        os.kill(os.getpid(), signal.SIGKILL)
    return await rename(source, destination, *args, **kwargs)
async_path.rename = rename_or_die
"""


def test_killed_while_checkpointing_the_rerun_keeps_the_same_best_count_and_stop(
    reference, tmp_path
):
    seed = int(os.environ.get("JAXTRANS_KILL_SEED", time.time_ns() % 10_000))
    # Killed at checkpoint 4 or 5, the rerun resumes from 3 or 4: its best is step 2 and
    # its count 1 or 2, which the rerun must go on from to stop after step 5 as well.
    killed_at = random.Random(seed).choice([STOP - 1, STOP])
    workdir = tmp_path / "run"
    prelude = KILL_BEFORE_COMMITTING.replace("{step}", str(killed_at))
    run = train(workdir, *keep_best_flags(), prelude=prelude)
    assert run.returncode == -signal.SIGKILL, f"seed {seed}: {run.stderr}"
    assert checkpoint_steps(workdir)[-1] == killed_at - 1, f"seed {seed}"

    rerun = train(workdir, *keep_best_flags())

    assert rerun.returncode == 0, f"seed {seed}: {rerun.stderr}"
    assert f"resuming from checkpoint {killed_at - 1}" in rerun.stdout, f"seed {seed}"
    assert f"stopped early after step {STOP}" in rerun.stdout, f"seed {seed}"
    for split in ("dev", None):  # best step, count and stop, step by step
        assert records(workdir, split) == records(reference[0], split), f"seed {seed}"
    assert checkpoint_steps(workdir) == checkpoint_steps(reference[0]), f"seed {seed}"
    for step in (PEAK, STOP):
        for got, want in zip(
            checkpoint_leaves(workdir, step), checkpoint_leaves(reference[0], step), strict=True
        ):
            np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}, step {step}")
