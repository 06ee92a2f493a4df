"""The training loop: step, log, evaluate, checkpoint, stop.

``train_and_evaluate(config, workdir, make_task)`` is the whole program behind
``train.py``; ``make_task(config, workdir)`` builds what is trained (tokenizer, model,
batches, loss, dev evaluation: a ``TrainingTask``, see jaxtrans.tasks). The run is set up
(and resumed) in run_setup.py; what is due after each step is decided in due.py and done
here, by the named steps below, on the RunState that they pass along. Side effects
(files, console, signals) live here; the step itself is pure (step.py); the lock, signal
and finite-update guards are in guards.py.
"""

import math
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxtrans.compilation_cache import use_compilation_cache
from jaxtrans.errors import UserError
from jaxtrans.training import distributed, sharding
from jaxtrans.training.best import after_evaluation, describe_patience, patience_spent
from jaxtrans.training.budget import TimeBudget
from jaxtrans.training.dropout_rng import partition_rng_on_tpu
from jaxtrans.training.due import LAST_STEP, PATIENCE, TIME_BUDGET, due_after_step
from jaxtrans.training.guards import StopSignal, WorkdirLock, finishing_checkpoint_writes
from jaxtrans.training.metrics import log_window, say
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.run_sections import RunSections
from jaxtrans.training.run_settings import check_run_settings, run_length
from jaxtrans.training.run_setup import (
    Run,
    RunState,
    TaskFactory,
    check_resumable,
    fitted_schedule,
    set_up_run,
)

# global_batch is looked up in this module at each use (and make_train_step in
# step_layout.py): the reliability tests patch them to slow the steps down without
# changing a number.
from jaxtrans.training.step import make_nonfinite_diagnosis
from jaxtrans.training.step_layout import StepLayout, jit_train_step, place_eval_batch
from jaxtrans.training.task import TrainingTask
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta

# Importable from here: the programs, benchmarks and tests use them. check_run_settings
# and run_length come from run_settings.py, check_resumable from run_setup.py.
__all__ = [
    "TaskFactory",
    "check_resumable",
    "check_run_settings",
    "evaluate",
    "global_batch",
    "run_length",
    "train_and_evaluate",
]


def global_batch(local: dict[str, np.ndarray], sharding_) -> dict[str, jax.Array]:
    """Assemble each process's rows into arrays laid out over the mesh."""
    return {
        key: jax.make_array_from_process_local_data(sharding_, value)
        for key, value in local.items()
    }


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str,
    make_task: TaskFactory,
    started: float | None = None,
) -> dict[str, Any]:
    """Train (or resume) the run in ``workdir`` and return the last logged metrics.

    ``make_task(config, workdir)`` is called once the workdir is locked (it may train a
    tokenizer into it), e.g. ``jaxtrans.tasks.load_task``. ``started``: when the program
    started (time.time()), from which train.max_minutes counts; None: the process's start."""
    sections = RunSections.of(config)  # the sections the loop reads, typed, checked
    budget = TimeBudget(sections.train.max_minutes, started)
    # Before the backends start: a TPU then draws rbg dropout masks chip by chip.
    partition_rng_on_tpu(sections.train.dropout_rng_impl)
    distributed.initialize_from_env()
    is_main = jax.process_index() == 0
    workdir = os.path.abspath(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"cannot create --workdir {workdir}: {error.strerror}; choose another directory"
        ) from error
    if not os.access(workdir, os.W_OK):
        raise UserError(f"--workdir {workdir} is not writable; choose another directory")
    use_compilation_cache(sections.train.compilation_cache_dir)  # restarts compile in seconds
    with WorkdirLock(workdir, enabled=is_main):
        return _train(config, sections, workdir, make_task, is_main, budget)


def _train(
    config: ml_collections.ConfigDict,
    sections: RunSections,
    workdir: str,
    make_task: TaskFactory,
    is_main: bool,
    budget: TimeBudget,
) -> dict[str, Any]:
    """Set up (or resume) the run in the locked ``workdir``, train it until its last step, a
    stop signal, the time budget or train.patience, and return the last logged metrics."""
    run, rs = set_up_run(config, sections, workdir, make_task, is_main, budget)
    rs.train_step, rs.diagnosis = compile_steps(run, fitted_schedule(run, rs))
    train = run.config.train
    rs.window_start = time.time()
    stopped_early = said_stopped_early(run, rs)
    with StopSignal() as stop, finishing_checkpoint_writes(run.checkpoints.checkpointer):
        while rs.step < rs.num_steps and not stopped_early:
            take_step(run, rs)
            # Read the signal flag once: a signal arriving later in this iteration must not
            # skip the checkpoint that the stop below reports as saved.
            stop_signal = stop.received
            # Asked before the last step only; with several processes, at log steps only.
            out_of_time = rs.step < rs.num_steps and run.budget.spent(
                at_log_step=rs.step % train.log_every == 0
            )
            due = due_after_step(
                rs.step,
                rs.num_steps,
                log_every=train.log_every,
                checkpoint_every=train.checkpoint_every,
                eval_every=train.eval_every,
                stop_signal=stop_signal,
                out_of_time=out_of_time,
                logs_so_far=rs.logs_so_far,
                timed_schedule=run.timed_schedule,
                keep_best=rs.best is not None,
            )
            if due.log:
                log(run, rs, refit=due.refit_schedule)
            # Never after a stop signal: it stops at once. Before the checkpoint, which
            # records the best evaluation so far (train.keep_best).
            patience_stop = evaluate_dev(run, rs) if due.evaluate else None
            if due.checkpoint:
                save(run, rs)
            # Patience first: a run it stopped stays stopped when rerun, unlike the others.
            reason = patience_stop or due.stop
            if reason is not None:
                report_stop(run, rs, reason)
                break
    run.checkpoints.wait()
    run.checkpoints.checkpointer.close()
    run.writer.close()
    return rs.last_metrics


def compile_steps(run: Run, schedule_end: int | None) -> tuple[Callable, Callable]:
    """The train step and its non-finite diagnosis (guards.py), jit-compiled at first use:
    with the optimizer of set-up, or (``schedule_end``) with the linear schedule decaying
    to 0 at that step (the optimizer state's layout does not depend on it)."""
    if schedule_end is None:
        optimizer, schedule = run.optimizer, run.schedule
    else:
        optimizer, schedule = make_optimizer(
            run.config.optimizer, run.task.model_config.d_model, schedule_end
        )
    layout = StepLayout.of(run.mesh, run.rules, run.state_shardings)
    train_step = sharding.with_axis_rules(
        jit_train_step(run.task, optimizer, schedule, run.accum, run.guard.mode, layout),
        run.mesh,
        run.rules,
    )
    diagnosis = make_nonfinite_diagnosis(run.task, optimizer, run.accum)
    jit_diagnosis = sharding.with_axis_rules(
        jax.jit(
            lambda state, batch: diagnosis(state, batch, state.dropout_key()),
            in_shardings=(run.state_shardings, run.batch_sharding),
            out_shardings=run.replicated,
        ),
        run.mesh,
        run.rules,
    )
    return train_step, jit_diagnosis


def take_step(run: Run, rs: RunState) -> None:
    """Dispatch the next training step on the next batch; its metrics join ``rs.pending``
    (on the devices until the next log fetches them)."""
    waiting = time.perf_counter()
    local_batch = next(run.train_iter)
    rs.input_wait += time.perf_counter() - waiting  # an input-bound run shows in the log
    batch = global_batch(local_batch, run.batch_sharding)
    rs.state, metrics = rs.train_step(rs.state, batch, run.guard.frozen)
    rs.step += 1
    rs.pending.append((rs.step, metrics))
    rs.window_steps += 1
    # At most guards.STEPS_IN_FLIGHT steps in flight (never waiting for the newest): the
    # device keeps steps queued, a stop signal is answered promptly, a failure found.
    run.guard.after_dispatch(
        rs.step, local_batch, rs.pending, lambda batch: diagnose(run, rs, batch)
    )


def diagnose(run: Run, rs: RunState, local_batch: dict) -> dict:
    """The failed step again, from the state it left unchanged (guards.py)."""
    return rs.diagnosis(rs.state, global_batch(local_batch, run.batch_sharding))


def log(run: Run, rs: RunState, refit: bool) -> None:
    """Fetch the metrics of the steps since the last log (a non-finite one stops the run or
    is counted, guards.py), write their means to metrics.jsonl and show the console line.
    In a run the time budget alone bounds, estimate the steps that fit, and at the second
    log (``refit``) refit a linear schedule to them. Starts the next window."""
    jax.block_until_ready(rs.pending[-1][1])  # time the work, not its dispatch
    rs.pending = jax.device_get(rs.pending)
    rs.skipped_steps += run.guard.check(rs.pending, lambda batch: diagnose(run, rs, batch))
    window_seconds = time.time() - rs.window_start
    if rs.logs_so_far == 0:
        rs.first_window = (window_seconds, rs.window_steps)
    metrics = log_window(
        [m for _, m in rs.pending],
        window_seconds,
        rs.window_steps,
        run.step_flops,
        run.peak,
        run.train_iter.stats(),
    )
    metrics["skipped_steps"] = rs.skipped_steps
    metrics["input_wait"] = rs.input_wait
    metrics["input_wait_fraction"] = rs.input_wait / max(window_seconds, 1e-9)
    rs.last_metrics = metrics
    run.writer.write(rs.step, metrics)
    if rs.num_steps == math.inf:  # a run bounded by time: the steps that fit
        seconds_per_step = 1 / metrics["steps_per_sec"]
        run.progress.last_step = run.budget.last_step(rs.step, seconds_per_step)
        if rs.logs_so_far == 1:  # the second window: no compilation in it
            say(f"about {run.progress.last_step} steps fit in the time left", run.is_main)
        if refit:
            refit_schedule(run, rs, seconds_per_step)
    rs.logs_so_far += 1
    run.progress.log(rs.step, metrics)
    rs.pending, rs.window_start, rs.window_steps, rs.input_wait = [], time.time(), 0, 0.0


def refit_schedule(run: Run, rs: RunState, seconds_per_step: float) -> None:
    """End the linear schedule (and the run) at the last step that fits in the time left at
    ``seconds_per_step``, and compile the step with that schedule."""
    # Compiling the step again costs about what the first window spent beyond its steps.
    compile_seconds = rs.first_window[0] - rs.first_window[1] * seconds_per_step
    rs.num_steps = run.budget.schedule_steps(rs.step, seconds_per_step, max(compile_seconds, 0.0))
    rs.train_step, rs.diagnosis = compile_steps(run, rs.num_steps)
    run.progress.last_step = rs.num_steps
    say(
        f"the linear schedule decays to 0 at step {rs.num_steps}, the last "
        "that fits in train.max_minutes at this step time",
        run.is_main,
    )


def save(run: Run, rs: RunState) -> None:
    """Checkpoint the state with what resuming needs: every process's data position, the
    model's shape fields, the skipped steps and a fitted schedule's length."""
    meta = CheckpointMeta(
        step=rs.step,
        model={k: run.task.config.model.get(k) for k in run.task.shape_fields},
        skipped_steps=rs.skipped_steps,
        schedule_steps=fitted_schedule(run, rs),
        best=rs.best,  # the best so far (None: not kept), its checkpoint out of the rotation
        data=run.train_iter.get_state(),
    )
    run.checkpoints.save(rs.step, rs.state, meta, best=None if rs.best is None else rs.best.step)


def evaluate_dev(run: Run, rs: RunState) -> str | None:
    """The dev evaluation of the current parameters: metrics.jsonl and the console. With
    train.keep_best the best so far (best.py) is updated and joins the record (best_step,
    evals_since_best); returns PATIENCE (and the record says ``"stop": "patience"``) where
    train.patience evaluations in a row have not improved on it before the last step, else
    None."""
    layout = StepLayout.of(run.mesh, run.rules, run.state_shardings)
    record = evaluate(run.task, run.eval_step, layout, rs.state.params, rs.step)
    stop = None
    if rs.best is not None:
        rs.best = after_evaluation(rs.best, rs.step, record)
        record.update(best_step=rs.best.step, evals_since_best=rs.best.evals_since)
        patience = run.config.train.patience
        if patience_spent(rs.best, patience) and rs.step < rs.num_steps:
            stop = record["stop"] = PATIENCE
    if record:
        run.writer.write(rs.step, record, prefix="dev")
        say(
            "  ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in record.items()
            ),
            run.is_main,
        )
    rs.window_start = time.time()  # evaluation time is not training throughput
    return stop


def said_stopped_early(run: Run, rs: RunState) -> bool:
    """Whether the run resumed where train.patience had stopped it (a rerun of a run that
    stopped early: nothing to train), and then says so."""
    patience = run.config.train.patience
    if not (rs.step < rs.num_steps and patience_spent(rs.best, patience)):
        return False
    say(
        f"the run stopped early at step {rs.step}: {describe_patience(rs.best, patience)}; "
        "nothing to train (raise train.patience to go on)",
        run.is_main,
    )
    return True


def report_stop(run: Run, rs: RunState, reason: str) -> None:
    """Before the last step (a signal, the time budget, train.patience): wait for the
    checkpoint just saved, then say why and how to go on. At the last step: nothing (the
    run's end waits)."""
    if reason == LAST_STEP:
        return
    run.checkpoints.wait()
    if reason == PATIENCE:
        best, patience = rs.best.step, run.config.train.patience
        restores = "" if best is None else f"; --checkpoint best restores step {best}"
        say(
            f"stopped early after step {rs.step}: {describe_patience(rs.best, patience)}; "
            f"saved checkpoint {rs.step}{restores}",
            run.is_main,
        )
    elif reason == TIME_BUDGET:
        budget = run.budget
        say(
            f"stopped after step {rs.step}: train.max_minutes={budget.minutes:g} spent "
            f"({budget.minutes_used():.1f} minutes since the program started); "
            f"saved checkpoint {rs.step}; rerun the command to go on",
            run.is_main,
        )
    else:  # the signal's name
        say(f"{reason}: saved checkpoint {rs.step}; rerun the command to resume", run.is_main)


def evaluate(
    task: TrainingTask, eval_step, layout: StepLayout, params, step: int
) -> dict[str, Any] | None:
    """Dev loss over the task's dev batches, each split over the devices as a training
    batch is (``layout``; step_layout.place_eval_batch), plus the task's own metrics
    (e.g. BLEU, decoded over the same devices)."""
    batches = task.eval_batches()
    if batches is None:
        return None
    totals: dict[str, Any] | None = None
    for batch in batches:
        sums = jax.device_get(eval_step(params, place_eval_batch(batch, layout)))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    if totals is None:
        return None
    summary = jax.device_get(task.summarize(totals))
    record: dict[str, Any] = {"split": "dev"}
    record.update({k: float(v) for k, v in summary.items() if k != "tokens"})
    record.update(task.extra_eval(params, step, layout.batch))
    return record
