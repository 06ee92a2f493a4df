"""A training run set up for the loop: the mesh, the task, the optimizer, the train state
laid out over the mesh, resumed from the workdir's latest checkpoint where it has one.

Run              what stays the same for the whole run: config, task, layout, writers
RunState         what the loop changes as it goes: train state, compiled step, step count
set_up_run       both, said on the console as the loop starts from them
check_resumable  a resumed run has the parameter shapes its checkpoints hold
"""

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import ml_collections
import optax
from jax.sharding import Mesh

from jaxtrans.errors import UserError
from jaxtrans.nn.attention_kernels import describe_attention_kernels
from jaxtrans.training import distributed, sharding
from jaxtrans.training import mfu as flops
from jaxtrans.training.best import Best, from_meta
from jaxtrans.training.budget import TimeBudget
from jaxtrans.training.guards import NonFiniteGuard
from jaxtrans.training.metrics import MetricsWriter, Progress, say
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.run_checkpoints import RunCheckpoints, dropout_rng_impl, restore_state
from jaxtrans.training.run_settings import (
    batch_rows,
    check_run_settings,
    has_time_length_schedule,
    run_length,
    train_settings,
)
from jaxtrans.training.state import TrainState, init_train_state
from jaxtrans.training.step_layout import StepLayout, jit_eval_step
from jaxtrans.training.task import TrainingTask
from jaxtrans.workdir import load_run_config, save_run_config

TaskFactory = Callable[[ml_collections.ConfigDict, str], TrainingTask]


@dataclass(frozen=True)
class Run:
    """What a run holds from set-up to its end (the objects in it may keep their own state:
    the iterator's position, the progress line's last step, the guard's batches)."""

    config: ml_collections.ConfigDict  # as resolved (data.batch_size from tokens_per_batch)
    workdir: str
    is_main: bool
    budget: TimeBudget
    mesh: Mesh
    rules: Any  # the logical-axis rules (sharding.py)
    task: TrainingTask
    run_config: ml_collections.ConfigDict
    timed_schedule: bool  # a linear schedule whose length the time budget sets
    # The optimizer the state was made with, and its schedule: too long to matter in a
    # timed-schedule run until the step time is known (the warm-up is the same).
    optimizer: optax.GradientTransformation
    schedule: optax.Schedule
    state_shardings: TrainState
    batch_sharding: jax.sharding.Sharding
    replicated: jax.sharding.Sharding
    accum: int  # train.grad_accum_steps
    guard: NonFiniteGuard
    eval_step: Callable  # (params, batch placed by step_layout.place_eval_batch) -> sums
    checkpoints: RunCheckpoints
    train_iter: Any  # the task's checkpointable iterator of local batches
    writer: MetricsWriter
    progress: Progress
    step_flops: float | None
    peak: float | None  # the device's peak FLOP/s, for the MFU


@dataclass
class RunState:
    """What the loop changes as it goes; set-up fills the first four fields, the loop the
    compiled steps, and its steps and logs the rest."""

    state: TrainState
    # math.inf in a run the time budget alone bounds, until a linear schedule is refit to it.
    num_steps: int | float
    step: int  # the last step taken
    skipped_steps: int  # non-finite updates skipped, checkpoints carry it across restarts
    train_step: Callable | None = None  # (state, batch, frozen) -> (state, metrics)
    diagnosis: Callable | None = None  # (state, batch) -> which tensor was not finite
    # (step, metrics) of the steps since the last log, on the devices until it fetches them.
    pending: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    window_start: float = 0.0  # when the log window began (time.time())
    window_steps: int = 0
    input_wait: float = 0.0  # seconds blocked in next(train_iter) in the log window
    first_window: tuple[float, int] = (0.0, 0)  # seconds (compilation included), steps
    logs_so_far: int = 0
    last_metrics: dict[str, Any] = field(default_factory=dict)
    # The best dev evaluation by train.keep_best so far (best.py); None: keep_best is off.
    best: Best | None = None


def fitted_schedule(run: Run, rs: RunState) -> int | None:
    """The step at which the linear schedule of a timed-schedule run decays to 0, once it
    is fit to the time budget (at the second log, or restored from a checkpoint); None
    otherwise. Checkpoints record it, so that a resumed run keeps that schedule."""
    return int(rs.num_steps) if run.timed_schedule and rs.num_steps < math.inf else None


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


def set_up_run(
    config: ml_collections.ConfigDict,
    workdir: str,
    make_task: TaskFactory,
    is_main: bool,
    budget: TimeBudget,
) -> tuple[Run, RunState]:
    """The run in the (locked) ``workdir``, and the state it starts from: the latest
    checkpoint's, or a new one. Writes config.json; says the run's size and length. The
    returned RunState has no compiled steps yet (the loop compiles them, loop.py)."""
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
    distributed.main_process_first(task.prepare_data)
    num_steps = run_length(config, task, is_main)
    # A linear schedule in a run that only the time budget bounds: until the step time is
    # known, a decay too long to matter (the warm-up is the same); then the real length.
    timed_schedule = has_time_length_schedule(config, num_steps)
    optimizer, schedule = make_optimizer(
        config.optimizer, task.model_config.d_model, 2**31 - 1 if timed_schedule else num_steps
    )

    # State, laid out over the mesh by the logical-axis rules, with the dropout generator
    # of the run's checkpoints (a resumed run) or of its config.
    checkpoints = RunCheckpoints(workdir, config.train)
    rng_impl, note = dropout_rng_impl(
        checkpoints.checkpointer, train_settings(config).dropout_rng_impl
    )
    if note:
        say(note, is_main)
    rng = jax.random.key(config.seed)
    state, state_shardings, abstract = init_train_state(
        task.init_params, optimizer, mesh, rng, rules, rng_impl
    )
    batch_sharding = sharding.batch_sharding(mesh)
    replicated = sharding.replicated(mesh)
    leaf_names = [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_leaves_with_path(abstract.params)
    ]
    guard = NonFiniteGuard(config.train.on_nonfinite, leaf_names, replicated)
    # The dev loss laid out as the train step is: rows over data and fsdp.
    eval_step = jit_eval_step(task, StepLayout.of(mesh, rules, state_shardings))
    train_iter = task.train_iterator(config.seed, jax.process_index(), jax.process_count())
    state, meta = _resume(
        task, checkpoints, train_iter, state, state_shardings, abstract, workdir, is_main
    )
    if meta is not None and timed_schedule and meta.get("schedule_steps"):
        num_steps = int(meta["schedule_steps"])  # its length, set by the first run

    first_step = int(jax.device_get(state.step))
    writer = MetricsWriter(workdir, enabled=is_main, first_step=first_step)
    progress = Progress(num_steps, task.headline, enabled=is_main)
    run = Run(
        config=config,
        workdir=workdir,
        is_main=is_main,
        budget=budget,
        mesh=mesh,
        rules=rules,
        task=task,
        run_config=run_config,
        timed_schedule=timed_schedule,
        optimizer=optimizer,
        schedule=schedule,
        state_shardings=state_shardings,
        batch_sharding=batch_sharding,
        replicated=replicated,
        accum=int(config.train.grad_accum_steps),
        guard=guard,
        eval_step=eval_step,
        checkpoints=checkpoints,
        train_iter=train_iter,
        writer=writer,
        progress=progress,
        step_flops=task.step_flops(),
        peak=flops.device_peak_flops(config.train.peak_flops_per_device),
    )
    say(_size_and_length(run, abstract, num_steps), is_main)
    # Which kernel each attention runs (xla, splash, cudnn) and why one falls back.
    say(
        describe_attention_kernels(task.model_config, packed=config.data.get("pack", False)),
        is_main,
    )
    if num_steps == math.inf:
        progress.last_step = first_step  # estimated from the step time at each log
    skipped = 0 if meta is None else int(meta.get("skipped_steps", 0))
    rs = RunState(state=state, num_steps=num_steps, step=first_step, skipped_steps=skipped)
    metric = config.train.get("keep_best", "")
    if metric:  # the checkpoint's best and count, so that the rerun goes on counting
        rs.best, note = from_meta(meta, metric)
        if note:
            say(note, is_main)
    return run, rs


def _resume(
    task: TrainingTask,
    checkpoints: RunCheckpoints,
    train_iter: Any,
    state: TrainState,
    state_shardings: TrainState,
    abstract: TrainState,
    workdir: str,
    is_main: bool,
) -> tuple[TrainState, dict[str, Any] | None]:
    """The state from the latest complete checkpoint and its metadata, the iterator moved
    to its data position; without one, ``state`` with the task's initial parameters and
    None. Says which on the console."""
    latest = checkpoints.checkpointer.latest_step()
    if latest is None:
        params = task.initial_params(state.params)
        if params is not state.params:
            state = state.replace(params=jax.device_put(params, state_shardings.params))
        say(f"training from scratch in {workdir}", is_main)
        return state, None
    state, meta = restore_state(
        checkpoints.checkpointer, latest, abstract, state_shardings, workdir
    )
    # Every process's saved data position; a new process count re-splits the data.
    note = train_iter.restore_states(meta["data"], jax.process_index(), jax.process_count())
    say(f"resuming from checkpoint {latest} in {workdir}", is_main)
    if note:
        say(note, is_main)
    return state, meta


def _size_and_length(run: Run, abstract: TrainState, num_steps: int | float) -> str:
    """The console line that opens the training: parameters, mesh, batch, steps, budget."""
    rules = run.rules
    return (
        f"{sum(x.size for x in jax.tree.leaves(abstract.params)):,} parameters; mesh "
        f"{dict(run.mesh.shape)}"
        + (f" ({sharding.rules_text(rules)})" if rules != sharding.LOGICAL_RULES else "")
        + "; "
        f"{run.config.data.batch_size} rows per step; "
        + (f"{num_steps} steps" if num_steps < math.inf else "no step count")
        + (f"; at most {run.budget.minutes:g} minutes" if run.budget.minutes else "")
    )
