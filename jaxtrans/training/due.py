"""What is due after a training step: a log, a checkpoint, a dev evaluation, a stop (and
why), the linear schedule's refit to the time budget.

Decisions only, no JAX, files or clock: the loop reads the stop signal and the time budget
once per step and passes what it found; it then acts on the answer in this order: log
(and refit), evaluation, checkpoint (which records the evaluation's best so far, see
best.py), stop (loop.py). An evaluation may stop the run too: PATIENCE (the loop asks
best.patience_spent).
"""

import math
from dataclasses import dataclass

# Why a run stops, besides a signal's name (SIGTERM, SIGINT).
TIME_BUDGET = "time budget"
LAST_STEP = "last step"
PATIENCE = "patience"  # train.patience evaluations without improving on the best


@dataclass(frozen=True)
class Due:
    """What the loop does after a step.

    log             fetch the window's metrics: metrics.jsonl and the console line
    checkpoint      save the state (every checkpoint is also logged)
    evaluate        the dev evaluation
    stop            None (go on), the signal's name, TIME_BUDGET or LAST_STEP (the
                    evaluation may then stop the run for PATIENCE)
    refit_schedule  at this log, refit the linear schedule's length to the time left
    """

    log: bool = False
    checkpoint: bool = False
    evaluate: bool = False
    stop: str | None = None
    refit_schedule: bool = False


def due_after_step(
    step: int,
    num_steps: int | float,
    *,
    log_every: int,
    checkpoint_every: int,
    eval_every: int,
    stop_signal: str | None = None,
    out_of_time: bool = False,
    logs_so_far: int = 0,
    timed_schedule: bool = False,
    keep_best: bool = False,
) -> Due:
    """What is due after ``step`` (counted from 1) of a run of ``num_steps`` (math.inf: a
    run the time budget alone bounds).

    ``log_every``, ``checkpoint_every``, ``eval_every``: train.* (eval_every 0: never).
    ``stop_signal``: the name of the stop signal received (read once this step), or None.
    ``out_of_time``: whether train.max_minutes is spent (the loop asks only before the last
    step). ``logs_so_far``: the logs before this step's, in this process. ``timed_schedule``:
    a linear schedule whose length the time budget sets (run_settings.has_time_length_schedule).
    ``keep_best``: train.keep_best is set, so that each evaluation is also a checkpoint.
    """
    # A signal asks for a prompt stop: no evaluation then. A run out of time is evaluated
    # before it stops, as a run at its last step is.
    evaluate = (
        not stop_signal
        and bool(eval_every)
        and (step % eval_every == 0 or step == num_steps or out_of_time)
    )
    # A stop saves the state it stops at, so that a rerun resumes from it. With keep_best
    # an evaluated step is saved too: it may be the best, and its checkpoint carries the
    # best so far and the count of evaluations since (a rerun goes on counting).
    checkpoint = (
        step % checkpoint_every == 0
        or step == num_steps
        or bool(stop_signal)
        or out_of_time
        or (keep_best and evaluate)
    )
    # A checkpoint's step is logged: metrics.jsonl then ends at the step a rerun resumes.
    log = step % log_every == 0 or checkpoint
    # The second window has no compilation in it: its step time is the run's. A schedule
    # refit once already has a length (num_steps is no longer math.inf).
    refit = log and timed_schedule and num_steps == math.inf and logs_so_far == 1
    if stop_signal:
        stop = stop_signal
    elif out_of_time:
        stop = TIME_BUDGET
    elif step >= num_steps:
        stop = LAST_STEP
    else:
        stop = None
    return Due(log=log, checkpoint=checkpoint, evaluate=evaluate, stop=stop, refit_schedule=refit)
