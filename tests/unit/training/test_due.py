"""What is due after a training step (training/due.py), decided without training: the
loop's logs, checkpoints, evaluations, stops and the schedule's refit to the time budget."""

import dataclasses
import math

import pytest

from jaxtrans.training.due import LAST_STEP, TIME_BUDGET, Due, due_after_step

# log every 2 steps, checkpoint every 6, evaluate every 4, of 20 steps.
EVERY = {"log_every": 2, "checkpoint_every": 6, "eval_every": 4}


def due(step: int, num_steps: int | float = 20, **changes) -> Due:
    return due_after_step(step, num_steps, **{**EVERY, **changes})


def test_nothing_is_due_between_intervals():
    assert due(3) == Due()
    assert due(3).stop is None


def test_a_log_step_is_logged_only():
    assert due(2) == Due(log=True)


def test_a_checkpoint_step_is_also_logged():
    assert due(6) == Due(log=True, checkpoint=True)


def test_a_checkpoint_step_off_the_log_interval_is_logged():
    assert due(3, checkpoint_every=3, log_every=2) == Due(log=True, checkpoint=True)


def test_an_evaluation_step_is_evaluated_without_a_checkpoint():
    assert due(4) == Due(log=True, evaluate=True)


def test_an_evaluation_step_off_the_log_interval_is_not_logged():
    assert due(4, log_every=3) == Due(evaluate=True)


def test_the_last_step_is_logged_checkpointed_and_evaluated():
    assert due(19, num_steps=19) == Due(log=True, checkpoint=True, evaluate=True, stop=LAST_STEP)


def test_eval_every_0_disables_evaluation():
    assert not due(4, eval_every=0).evaluate
    assert not due(20, eval_every=0).evaluate  # the last step
    assert not due(5, eval_every=0, out_of_time=True).evaluate


def test_a_stop_signal_saves_a_checkpoint_and_skips_the_evaluation():
    assert due(5, stop_signal="SIGTERM") == Due(log=True, checkpoint=True, stop="SIGTERM")
    assert not due(4, stop_signal="SIGINT").evaluate  # an evaluation step
    assert not due(20, stop_signal="SIGINT").evaluate  # the last step


def test_a_stop_signal_at_the_last_step_stops_for_the_signal():
    assert due(20, stop_signal="SIGINT").stop == "SIGINT"


def test_out_of_time_evaluates_then_stops():
    assert due(5, out_of_time=True) == Due(
        log=True, checkpoint=True, evaluate=True, stop=TIME_BUDGET
    )


def test_a_stop_signal_wins_over_the_time_budget():
    assert due(5, stop_signal="SIGTERM", out_of_time=True) == Due(
        log=True, checkpoint=True, stop="SIGTERM"
    )


def test_a_run_without_a_step_count_stops_only_for_a_signal_or_the_time():
    assert due(10**9, num_steps=math.inf).stop is None
    assert due(7, num_steps=math.inf, out_of_time=True).stop == TIME_BUDGET


def test_the_schedule_is_refit_once_at_the_second_log_of_a_time_bounded_linear_run():
    timed = {"num_steps": math.inf, "timed_schedule": True}
    assert due(2, logs_so_far=0, **timed) == Due(log=True)  # the first log: compilation
    assert due(4, logs_so_far=1, **timed).refit_schedule  # the second
    assert not due(6, logs_so_far=2, **timed).refit_schedule  # the third
    assert not due(3, logs_so_far=1, **timed).refit_schedule  # no log at this step


def test_the_second_log_is_a_refit_whatever_made_it_due():
    timed = {"num_steps": math.inf, "timed_schedule": True, "logs_so_far": 1}
    assert due(5, out_of_time=True, **timed).refit_schedule  # the stop's log
    assert due(5, stop_signal="SIGTERM", **timed).refit_schedule


def test_a_schedule_already_fit_is_not_refit():
    # Restored from a checkpoint (or refit before): the run has a step count.
    assert not due(4, num_steps=50, logs_so_far=1, timed_schedule=True).refit_schedule


def test_a_schedule_that_is_not_timed_is_never_refit():
    assert not due(4, num_steps=math.inf, logs_so_far=1).refit_schedule


def test_a_decision_cannot_be_changed():
    with pytest.raises(dataclasses.FrozenInstanceError):
        due(2).log = False  # type: ignore[misc]
