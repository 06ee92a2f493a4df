"""The training loop: set up a run, step, log, evaluate, checkpoint, resume.

``train_and_evaluate(config, workdir, make_task)`` is the whole program behind
``train.py``; ``make_task(config, workdir)`` builds what is trained (tokenizer, model,
batches, loss, dev evaluation: a ``TrainingTask``, see jaxtrans.tasks). Side effects
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

from jaxtrans.errors import UserError
from jaxtrans.training import distributed, sharding
from jaxtrans.training import mfu as flops
from jaxtrans.training.budget import TimeBudget
from jaxtrans.training.guards import (
    NonFiniteGuard,
    StopSignal,
    WorkdirLock,
    finishing_checkpoint_writes,
    wait_for_step_before_last,
)
from jaxtrans.training.metrics import MetricsWriter, Progress, log_window, say
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.run_checkpoints import RunCheckpoints, restore_state
from jaxtrans.training.run_settings import (
    batch_rows,
    check_run_settings,
    run_length,
    schedule_from_time,
)
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_eval_step, make_nonfinite_diagnosis, make_train_step
from jaxtrans.training.task import TrainingTask
from jaxtrans.workdir import load_run_config, save_run_config

TaskFactory = Callable[[ml_collections.ConfigDict, str], TrainingTask]


def check_resumable(task: TrainingTask, saved: ml_collections.ConfigDict, workdir: str) -> None:
    """A resumed run must have the parameter shapes its checkpoints hold."""
    current = task.run_config
    changed = [
        f"{key}={saved.model.get(key)!r} (config now says {current.model.get(key)!r})"
        for key in task.shape_fields
        if saved.model.get(key) != current.model.get(key)
    ]
    if saved.get("task", "translation") != current.get("task", "translation"):
        changed.insert(0, f"task={saved.get('task', 'translation')!r}")
    if changed:
        raise UserError(
            f"{workdir} was trained with {'; '.join(changed[:3])}; "
            "use the same model config to resume, or a new --workdir"
        )


def setup_compilation_cache(cache_dir: str) -> None:
    """Persistent XLA compilation cache, so restarts compile in seconds."""
    if not cache_dir:
        return
    os.makedirs(os.path.expanduser(cache_dir), exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(cache_dir))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


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
    budget = TimeBudget(config.train.get("max_minutes", 0), started)
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
    setup_compilation_cache(config.train.compilation_cache_dir)
    with WorkdirLock(workdir, enabled=is_main):
        return _train(config, workdir, make_task, is_main, budget)


def _train(
    config: ml_collections.ConfigDict,
    workdir: str,
    make_task: TaskFactory,
    is_main: bool,
    budget: TimeBudget,
) -> dict[str, Any]:
    mesh = sharding.make_mesh(config.mesh)
    rules = sharding.logical_rules(config.mesh.get("rules", ""))
    config = batch_rows(config, mesh, is_main)
    check_run_settings(config, mesh)

    # What is trained: tokenizer, model, batches, loss.
    # Process 0 trains the tokenizer (if the workdir has none yet); the others then load it.
    task = distributed.main_process_first(lambda: make_task(config, workdir))
    run_config = task.run_config
    if os.path.exists(os.path.join(workdir, "config.json")):
        check_resumable(task, load_run_config(workdir), workdir)
    if is_main:
        save_run_config(workdir, run_config)
    num_steps = run_length(config, task, is_main)
    # A linear schedule in a run that only the time budget bounds: until the step time is
    # known, a decay too long to matter (the warm-up is the same); then the real length.
    timed_schedule = schedule_from_time(config, num_steps)
    optimizer, schedule = make_optimizer(
        config.optimizer, task.model_config.d_model, 2**31 - 1 if timed_schedule else num_steps
    )

    # State, laid out over the mesh by the logical-axis rules.
    rng = jax.random.key(config.seed)
    state, state_shardings, abstract = init_train_state(
        task.init_params, optimizer, mesh, rng, rules
    )
    batch_sharding = sharding.batch_sharding(mesh)
    replicated = sharding.replicated(mesh)

    accum = int(config.train.grad_accum_steps)
    leaf_names = [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_leaves_with_path(abstract.params)
    ]
    guard = NonFiniteGuard(config.train.on_nonfinite, leaf_names, replicated)

    def jitted_steps(optimizer, schedule) -> tuple[Callable, Callable]:
        """The train step and its non-finite diagnosis (guards.py), compiled at first use."""
        train_step = sharding.with_axis_rules(
            jax.jit(
                guard.guarded(make_train_step(task, optimizer, schedule, accum)),
                in_shardings=(state_shardings, batch_sharding, replicated),
                out_shardings=(state_shardings, replicated),
                donate_argnums=(0,),
            ),
            mesh,
            rules,
        )
        diagnosis = make_nonfinite_diagnosis(task, optimizer, accum)
        jit_diagnosis = sharding.with_axis_rules(
            jax.jit(
                lambda state, batch: diagnosis(state, batch, state.dropout_key()),
                in_shardings=(state_shardings, batch_sharding),
                out_shardings=replicated,
            ),
            mesh,
            rules,
        )
        return train_step, jit_diagnosis

    def schedule_ending_at(last_step: int) -> tuple[Callable, Callable]:
        """The steps again, with the linear schedule decaying to 0 at ``last_step`` (the
        optimizer state's layout does not depend on it)."""
        return jitted_steps(*make_optimizer(config.optimizer, task.model_config.d_model, last_step))

    jit_train_step, jit_diagnosis = jitted_steps(optimizer, schedule)
    eval_step = jax.jit(
        make_eval_step(task),
        in_shardings=(state_shardings.params, replicated),
        out_shardings=replicated,
    )

    # Checkpoints: resume from the latest complete one.
    checkpoints = RunCheckpoints(workdir, config.train)
    checkpointer = checkpoints.checkpointer
    train_iter = task.train_iterator(config.seed, jax.process_index(), jax.process_count())
    latest = checkpointer.latest_step()
    if latest is None:
        params = task.initial_params(state.params)
        if params is not state.params:
            state = state.replace(params=jax.device_put(params, state_shardings.params))
        say(f"training from scratch in {workdir}", is_main)
    else:
        state, meta = restore_state(checkpointer, latest, abstract, state_shardings, workdir)
        # Every process's saved data position; a new process count re-splits the data.
        note = train_iter.restore_states(meta["data"], jax.process_index(), jax.process_count())
        say(f"resuming from checkpoint {latest} in {workdir}", is_main)
        if note:
            say(note, is_main)
        if timed_schedule and meta.get("schedule_steps"):  # its length, set by the first run
            num_steps = int(meta["schedule_steps"])
            jit_train_step, jit_diagnosis = schedule_ending_at(num_steps)

    first_step = int(jax.device_get(state.step))
    # Skipped (non-finite) updates so far; checkpoints carry the count across restarts.
    skipped_total = 0 if latest is None else int(meta.get("skipped_steps", 0))
    writer = MetricsWriter(workdir, enabled=is_main, first_step=first_step)
    progress = Progress(num_steps, task.headline, enabled=is_main)
    step_flops = task.step_flops()
    peak = flops.device_peak_flops(config.train.peak_flops_per_device)

    def save(step: int) -> None:
        meta = {
            "step": step,
            "data": train_iter.get_state(),
            "model": {k: run_config.model.get(k) for k in task.shape_fields},
            "skipped_steps": skipped_total,
        }
        if timed_schedule and num_steps < math.inf:
            meta["schedule_steps"] = num_steps
        checkpoints.save(step, state, meta)

    def diagnose(local_batch: dict) -> dict:
        """The failed step again, from the state it left unchanged (guards.py)."""
        batch = global_batch(local_batch, batch_sharding)
        return jit_diagnosis(state, batch)

    say(
        f"{sum(x.size for x in jax.tree.leaves(abstract.params)):,} parameters; mesh "
        f"{dict(mesh.shape)}"
        + (f" ({sharding.rules_text(rules)})" if rules != sharding.LOGICAL_RULES else "")
        + "; "
        f"{config.data.batch_size} rows per step; "
        + (f"{num_steps} steps" if num_steps < math.inf else "no step count")
        + (f"; at most {budget.minutes:g} minutes" if budget.minutes else ""),
        is_main,
    )
    if num_steps == math.inf:
        progress.last_step = first_step  # estimated from the step time at each log
    first_window = (0.0, 0)  # the first log window's time (compilation and steps), steps
    logs_so_far = 0
    last_metrics: dict[str, Any] = {}
    pending: list[tuple[int, dict[str, jax.Array]]] = []
    step = first_step
    window_start, window_steps = time.time(), 0
    with StopSignal() as stop, finishing_checkpoint_writes(checkpointer):
        while step < num_steps:
            local_batch = next(train_iter)
            batch = global_batch(local_batch, batch_sharding)
            state, metrics = jit_train_step(state, batch, guard.frozen)
            step += 1
            pending.append((step, metrics))
            window_steps += 1
            wait_for_step_before_last(pending)  # so that a stop signal is answered promptly
            guard.track(step, local_batch, pending)
            # Read the signal flag once: a signal arriving later in this iteration must not
            # skip the checkpoint that the stop below reports as saved.
            stopping = stop.received
            out_of_time = step < num_steps and budget.spent(
                at_log_step=step % config.train.log_every == 0
            )
            checkpoint_due = (
                step % config.train.checkpoint_every == 0
                or step == num_steps
                or stopping
                or out_of_time
            )
            if step % config.train.log_every == 0 or checkpoint_due:
                jax.block_until_ready(pending[-1][1])  # time the work, not its dispatch
                pending = jax.device_get(pending)
                skipped_total += guard.check(pending, diagnose)
                window_seconds = time.time() - window_start
                if logs_so_far == 0:
                    first_window = (window_seconds, window_steps)
                last_metrics = log_window(
                    [m for _, m in pending],
                    window_seconds,
                    window_steps,
                    step_flops,
                    peak,
                    train_iter.stats(),
                )
                last_metrics["skipped_steps"] = skipped_total
                writer.write(step, last_metrics)
                if num_steps == math.inf:  # a run bounded by time: the steps that fit
                    seconds_per_step = 1 / last_metrics["steps_per_sec"]
                    progress.last_step = budget.last_step(step, seconds_per_step)
                    if logs_so_far == 1:  # the second window: no compilation in it
                        say(f"about {progress.last_step} steps fit in the time left", is_main)
                    if logs_so_far == 1 and timed_schedule:
                        # Compiling the step again costs about what the first window
                        # spent beyond its steps.
                        compile_seconds = first_window[0] - first_window[1] * seconds_per_step
                        num_steps = budget.schedule_steps(
                            step, seconds_per_step, max(compile_seconds, 0.0)
                        )
                        jit_train_step, jit_diagnosis = schedule_ending_at(num_steps)
                        progress.last_step = num_steps
                        say(
                            f"the linear schedule decays to 0 at step {num_steps}, the last "
                            "that fits in train.max_minutes at this step time",
                            is_main,
                        )
                logs_so_far += 1
                progress.log(step, last_metrics)
                pending, window_start, window_steps = [], time.time(), 0
            if checkpoint_due:
                save(step)
            if stopping:
                checkpoints.wait()
                say(
                    f"{stopping}: saved checkpoint {step}; rerun the command to resume",
                    is_main,
                )
                break
            if config.train.eval_every and (
                step % config.train.eval_every == 0 or step == num_steps or out_of_time
            ):
                record = evaluate(task, eval_step, replicated, state.params, step)
                if record:
                    writer.write(step, record, prefix="dev")
                    say(
                        "  ".join(
                            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in record.items()
                        ),
                        is_main,
                    )
                window_start = time.time()  # evaluation time is not training throughput
            if out_of_time:
                checkpoints.wait()
                say(
                    f"stopped after step {step}: train.max_minutes={budget.minutes:g} spent "
                    f"({budget.minutes_used():.1f} minutes since the program started); "
                    f"saved checkpoint {step}; rerun the command to go on",
                    is_main,
                )
                break
    checkpoints.wait()
    checkpointer.close()
    writer.close()
    return last_metrics


def evaluate(task: TrainingTask, eval_step, replicated, params, step: int) -> dict[str, Any] | None:
    """Dev loss over the task's dev batches, plus the task's own metrics (e.g. BLEU)."""
    batches = task.eval_batches()
    if batches is None:
        return None
    totals: dict[str, Any] | None = None
    for batch in batches:
        batch = global_batch(batch, replicated)
        sums = jax.device_get(eval_step(params, batch))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    if totals is None:
        return None
    summary = jax.device_get(task.summarize(totals))
    record: dict[str, Any] = {"split": "dev"}
    record.update({k: float(v) for k, v in summary.items() if k != "tokens"})
    record.update(task.extra_eval(params, step))
    return record
