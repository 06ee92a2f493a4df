"""train.max_minutes: a run stops itself when its wall-clock budget is spent."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from paths import REPO
from tiny_configs import TINY_TRANSLATION, tiny_translation_config

from jaxtrans.checkpoints import Checkpointer
from jaxtrans.errors import UserError
from jaxtrans.tasks import load_task
from jaxtrans.training import loop
from jaxtrans.training.budget import TimeBudget, process_start_time
from jaxtrans.training.run_settings import check_run_settings

IMPORTED_AT = time.time()


class _OneDevice:
    shape = {"data": 1, "fsdp": 1, "tensor": 1}


def checkpoint_steps(workdir) -> list[int]:
    return sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())


def records(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_the_budget_counts_from_the_start_of_the_process():
    started = process_start_time()
    assert started <= IMPORTED_AT  # before this module was imported: the imports count
    assert time.time() - started < 24 * 3600
    assert not TimeBudget(0).spent(at_log_step=True)  # 0: no limit
    assert TimeBudget(1, started=time.time() - 61).spent(at_log_step=False)
    assert not TimeBudget(1, started=time.time()).spent(at_log_step=False)


@pytest.mark.parametrize("minutes", [-1.0, float("nan")])
def test_a_budget_that_is_no_number_of_minutes_is_refused(minutes):
    config = tiny_translation_config(10, **{"train.max_minutes": minutes})
    with pytest.raises(UserError, match="max_minutes.*use a number of minutes >= 0"):
        check_run_settings(config, mesh=_OneDevice())


def test_the_schedule_length_fits_the_time_left_after_a_second_compilation():
    budget = TimeBudget(1, started=time.time() - 30)  # 30 s left
    assert budget.schedule_steps(10, 0.5, setup_seconds=10) in (48, 49, 50)  # 20 s: 40 steps
    assert budget.schedule_steps(10, 0.5, setup_seconds=60) == 11  # always one more step


def test_a_budget_spent_before_training_stops_after_one_step_with_checkpoint_and_eval(tmp_path):
    """In process, with the program's start given: an hour ago, for a one-minute budget."""
    config = tiny_translation_config(
        50,
        **{"train.max_minutes": 1.0, "train.compilation_cache_dir": "",
           "train.eval_every": 1000, "eval.beam_size": 1, "eval.dev_sentences": 4},
    )  # fmt: skip
    loop.train_and_evaluate(config, str(tmp_path), load_task, started=time.time() - 3600)

    assert checkpoint_steps(tmp_path) == [1]
    dev = [r for r in records(tmp_path) if r.get("split") == "dev"]
    assert [r["step"] for r in dev] == [1] and "bleu" in dev[0]


def test_train_py_with_only_a_time_budget_trains_until_it_is_spent_then_says_so(tmp_path):
    """A linear schedule there takes its length from the step time at the second log."""
    peak, warmup = 1e-3, 1
    flags = {**TINY_TRANSLATION, "train.num_steps": 0, "train.max_minutes": 0.5,
             "train.checkpoint_every": 10_000, "train.compilation_cache_dir": "",
             "train.eval_every": 10_000, "eval.beam_size": 1, "eval.dev_sentences": 4,
             "optimizer.schedule": "linear", "optimizer.learning_rate": peak,
             "optimizer.warmup_steps": warmup}  # fmt: skip
    start = time.time()
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/demo.py",
         "--workdir", str(tmp_path), *(f"--config.{k}={v}" for k, v in flags.items())],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    seconds = time.time() - start

    assert result.returncode == 0, result.stderr[-3000:]
    assert "no step count; at most 0.5 minutes" in result.stdout
    stops = [line for line in result.stdout.splitlines() if line.startswith("stopped after")]
    fitted = re.search(r"linear schedule decays to 0 at step (\d+)", result.stdout)
    if stops:  # the budget was spent first
        assert len(stops) == 1, result.stdout
        step = int(re.match(r"stopped after step (\d+): train.max_minutes=0.5 spent", stops[0])[1])
        # Stopped at the budget (plus a step, the checkpoint and the evaluation), not later.
        assert 30 <= seconds < 30 + 60, seconds
    else:  # or the schedule fitted to it ended first (steps ran faster than estimated)
        assert fitted, result.stdout
        step = int(fitted[1])
        assert f"step {step:>7}/{step}" in result.stdout and seconds < 30 + 60, seconds
    assert checkpoint_steps(tmp_path) == [step]
    assert [r["step"] for r in records(tmp_path) if r.get("split") == "dev"] == [step]
    if step < 2:
        return  # no second log on a machine this slow: nothing estimated
    assert re.search(r"about \d+ steps fit in the time left", result.stdout)
    last = int(re.search(r"linear schedule decays to 0 at step (\d+)", result.stdout)[1])
    assert step <= last  # the schedule's end or the budget, whichever came first
    assert Checkpointer(str(tmp_path)).restore_meta(step)["schedule_steps"] == last
    # From step 3 on, the step compiled with that length: logged lr = schedule(step - 1).
    logged = {r["step"]: r["lr"] for r in records(tmp_path) if "lr" in r and r["step"] > 2}
    for at, lr in logged.items():
        assert lr == pytest.approx(peak * (1 - (at - 1 - warmup) / (last - warmup)), rel=1e-5)
