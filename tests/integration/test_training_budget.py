"""train.max_minutes: a run stops itself when its wall-clock budget is spent (the runs
here on a virtual clock, so that they stop at the same step on any machine)."""

import json
import os
import time

import pytest
from tiny_configs import tiny_translation_config

from jaxtrans.errors import UserError
from jaxtrans.tasks import load_task
from jaxtrans.training import budget, loop
from jaxtrans.training.budget import TimeBudget, process_start_time
from jaxtrans.training.run_settings import check_run_settings
from jaxtrans.workdirs.checkpoints import Checkpointer

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


class VirtualClock:
    """``time.time()`` for the loop and the budget: it moves only when a training step runs,
    by the step's given duration, so that the run sees the same times on any machine."""

    def __init__(self, step_seconds):
        self.now = 0.0  # the program's start
        self.step_seconds = step_seconds  # step number -> its virtual seconds

    def time(self) -> float:
        return self.now

    perf_counter = time  # the input wait's clock: no virtual time passes in next()

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(budget, "time", self)
        monkeypatch.setattr(loop, "time", self)
        take_step = loop.take_step

        def timed_step(run, rs):
            take_step(run, rs)
            self.now += self.step_seconds(rs.step)

        monkeypatch.setattr(loop, "take_step", timed_step)


# Step 1 pays the compilation (10 s), step 3 the recompilation with the fitted schedule.
COMPILING_STEPS = {1: 10.0, 3: 10.0}


@pytest.mark.parametrize(
    "later_steps, stops_at, spent",
    [
        # 1 s a step, as the second log measured: at step 2 (11 s) the 30 s budget has 19 s
        # left, 9 of them for the recompilation (the first log's 10 s less its 1 s step):
        # the schedule ends at step 2 + 10 = 12, at 21 + 9 = 30 s, with the budget.
        (1.0, 12, False),
        # 3 s a step after the refit: the budget is spent at step 6 (21 + 3 * 3 = 30 s).
        (3.0, 6, True),
    ],
    ids=["the-fitted-schedule-ends-first", "the-budget-is-spent-first"],
)
def test_with_only_a_time_budget_the_run_fits_its_schedule_and_stops_when_it_is_spent(
    tmp_path, monkeypatch, capsys, later_steps, stops_at, spent
):
    """A linear schedule there takes its length from the step time at the second log; the
    run stops at the schedule's end or the budget's, whichever comes first. The clock is
    virtual (VirtualClock): the steps take the seconds given here, everything else none."""
    peak, warmup = 1e-3, 1
    config = tiny_translation_config(
        0,
        **{"train.max_minutes": 0.5, "train.checkpoint_every": 10_000,
           "train.compilation_cache_dir": "", "train.eval_every": 10_000,
           "eval.beam_size": 1, "eval.dev_sentences": 4, "optimizer.schedule": "linear",
           "optimizer.learning_rate": peak, "optimizer.warmup_steps": warmup},
    )  # fmt: skip
    clock = VirtualClock(lambda step: COMPILING_STEPS.get(step, 1.0 if step < 3 else later_steps))
    clock.install(monkeypatch)
    loop.train_and_evaluate(config, str(tmp_path), load_task, started=0.0)
    out = capsys.readouterr().out

    assert "no step count; at most 0.5 minutes" in out
    assert "about 21 steps fit in the time left" in out  # 2 + 19 s at 1 s a step
    last = 12
    assert f"the linear schedule decays to 0 at step {last}," in out
    stops = [line for line in out.splitlines() if line.startswith("stopped after")]
    if spent:
        assert stops == [
            f"stopped after step {stops_at}: train.max_minutes=0.5 spent (0.5 minutes since "
            f"the program started); saved checkpoint {stops_at}; rerun the command to go on"
        ]
    else:
        assert not stops and f"step {last:>7}/{last}" in out
    assert checkpoint_steps(tmp_path) == [stops_at]
    assert [r["step"] for r in records(tmp_path) if r.get("split") == "dev"] == [stops_at]
    assert Checkpointer(str(tmp_path)).restore_meta(stops_at).schedule_steps == last
    # From step 3 on, the step compiled with that length: logged lr = schedule(step - 1).
    logged = {r["step"]: r["lr"] for r in records(tmp_path) if "lr" in r and r["step"] > 2}
    assert sorted(logged) == list(range(3, stops_at + 1))
    for at, lr in logged.items():
        assert lr == pytest.approx(peak * (1 - (at - 1 - warmup) / (last - warmup)), rel=1e-5)
