"""A training run set up for the loop: the mesh, the task, the optimizer, the train state
laid out over the mesh, resumed from the workdir's latest checkpoint where it has one.

Run              what stays the same for the whole run: config, task, layout, writers
RunState         what the loop changes as it goes: train state, compiled step, step count
set_up_run       both, said on the console as the loop starts from them, in steps:
  mesh_and_batch   the mesh, its rules and the rows of a step, checked before anything is written
  checked_task     the task; a resumed run checked; config.json and the task's data written
  initial_state    a fresh train state over the mesh, the dropout generator chosen
  _resume          the latest checkpoint's state and data position, where there is one
  starting_point   the step, skipped steps, schedule length and best the loop starts from
check_resumable  a resumed run has the parameter shapes its checkpoints hold
"""

import functools
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
from jaxtrans.training.run_sections import RunSections, TrainConfig
from jaxtrans.training.run_settings import (
    batch_rows,
    check_run_settings,
    has_time_length_schedule,
    run_length,
)
from jaxtrans.training.state import TrainState, init_train_state
from jaxtrans.training.step_layout import StepLayout, jit_eval_step
from jaxtrans.training.task import TrainingTask
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.workdir import load_run_config, save_run_config

TaskFactory = Callable[[ml_collections.ConfigDict, str], TrainingTask]


@dataclass(frozen=True)
class Run:
    """What a run holds from set-up to its end (the objects in it may keep their own state:
    the iterator's position, the progress line's last step, the guard's batches).

    One config: ``config``, the sections the loop reads, typed (run_sections.RunSections).
    The whole run config (the model, data and eval sections too, data.batch_size as
    resolved, what the tokenizer decided) is the task's, ``task.config``: what config.json
    keeps. What follows from these is a property, not a field."""

    config: RunSections  # seed, optimizer, train and mesh, each as its dataclass
    task: TrainingTask
    workdir: str
    is_main: bool
    budget: TimeBudget
    mesh: Mesh
    timed_schedule: bool  # a linear schedule whose length the time budget sets
    # The optimizer the state was made with, and its schedule: too long to matter in a
    # timed-schedule run until the step time is known (the warm-up is the same).
    optimizer: optax.GradientTransformation
    schedule: optax.Schedule
    state_shardings: TrainState
    guard: NonFiniteGuard
    eval_step: Callable  # (params, batch placed by step_layout.place_eval_batch) -> sums
    checkpoints: RunCheckpoints
    train_iter: Any  # the task's checkpointable iterator of local batches
    writer: MetricsWriter
    progress: Progress

    @functools.cached_property
    def rules(self) -> tuple:
        """The logical-axis rules of mesh.rules (sharding.py)."""
        return sharding.logical_rules(self.config.mesh.rules)

    @property
    def accum(self) -> int:
        """Micro-batches a step (train.grad_accum_steps)."""
        return self.config.train.grad_accum_steps

    @functools.cached_property
    def batch_sharding(self) -> jax.sharding.Sharding:
        return sharding.batch_sharding(self.mesh)

    @functools.cached_property
    def replicated(self) -> jax.sharding.Sharding:
        return sharding.replicated(self.mesh)

    @functools.cached_property
    def step_flops(self) -> float | None:
        """Model FLOPs of one training step, for the MFU; None where unknown."""
        return self.task.step_flops()

    @functools.cached_property
    def peak(self) -> float | None:
        """The device's peak FLOP/s, for the MFU (train.peak_flops_per_device, else the
        device table's)."""
        return flops.device_peak_flops(self.config.train.peak_flops_per_device)


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
    current = task.config
    changed = [
        f"{key}={saved.model.get(key)!r} (config now says {current.model.get(key)!r})"
        for key in task.shape_fields
        if saved.model.get(key) != current.model.get(key)
    ]
    # A config.json written before ``task`` existed is a translation run's.
    saved_task = saved.task if "task" in saved else "translation"
    current_task = current.task if "task" in current else "translation"
    if saved_task != current_task:
        changed.insert(0, f"task={saved_task!r}")
    if changed:
        raise UserError(
            f"{workdir} was trained with {'; '.join(changed[:3])}; "
            "use the same model config to resume, or a new --workdir"
        )


def set_up_run(
    config: ml_collections.ConfigDict,
    sections: RunSections,
    workdir: str,
    make_task: TaskFactory,
    is_main: bool,
    budget: TimeBudget,
) -> tuple[Run, RunState]:
    """The run of ``config`` (``sections``: its typed sections, RunSections.of(config)) in
    the (locked) ``workdir``, and the state it starts from: the latest checkpoint's, or a
    new one. Writes config.json; says the run's size and length. The returned RunState
    has no compiled steps yet (the loop compiles them, loop.py). The steps, in order:
    the mesh and the batch, the task, the length and optimizer, the state, the resume."""
    mesh, rules, config = mesh_and_batch(config, sections, is_main)
    task = checked_task(config, workdir, make_task, is_main)
    num_steps = run_length(config, task, is_main)
    timed_schedule = has_time_length_schedule(config, num_steps)
    optimizer, schedule = make_optimizer(
        sections.optimizer,
        task.model_config.d_model,
        _UNTIL_STEP_TIME if timed_schedule else num_steps,
    )
    checkpoints = RunCheckpoints(workdir, sections.train)
    state, state_shardings, abstract = initial_state(
        task, optimizer, mesh, rules, sections, checkpoints, is_main
    )
    train_iter = task.train_iterator(sections.seed, jax.process_index(), jax.process_count())
    state, meta = _resume(
        task, checkpoints, train_iter, state, state_shardings, abstract, workdir, is_main
    )
    rs = starting_point(state, num_steps, timed_schedule, meta, sections.train, is_main)
    run = Run(
        config=sections,
        task=task,
        workdir=workdir,
        is_main=is_main,
        budget=budget,
        mesh=mesh,
        timed_schedule=timed_schedule,
        optimizer=optimizer,
        schedule=schedule,
        state_shardings=state_shardings,
        guard=NonFiniteGuard(
            sections.train.on_nonfinite, _leaf_names(abstract), sharding.replicated(mesh)
        ),
        # The dev loss laid out as the train step is: rows over data and fsdp.
        eval_step=jit_eval_step(task, StepLayout.of(mesh, rules, state_shardings)),
        checkpoints=checkpoints,
        train_iter=train_iter,
        writer=MetricsWriter(workdir, enabled=is_main, first_step=rs.step),
        progress=Progress(rs.num_steps, task.headline, enabled=is_main),
    )
    if rs.num_steps == math.inf:
        run.progress.last_step = rs.step  # estimated from the step time at each log
    say(_size_and_length(run, abstract, config.data.batch_size, rs.num_steps), is_main)
    # Which kernel each attention runs (xla, splash, cudnn) and why one falls back.
    say(describe_attention_kernels(task.model_config, packed=task.packs_rows), is_main)
    return run, rs


# The schedule length of a timed-schedule run until the step time is known: a decay too
# long to matter (the warm-up is the same); the loop then refits it (loop.refit_schedule).
_UNTIL_STEP_TIME = 2**31 - 1


def mesh_and_batch(
    config: ml_collections.ConfigDict, sections: RunSections, is_main: bool
) -> tuple[Mesh, tuple, ml_collections.ConfigDict]:
    """The device mesh, its logical-axis rules (mesh.rules), and ``config`` with
    data.batch_size the rows of a step over it (from data.tokens_per_batch, where that is
    set). First, so that a rule, batch, logging or guard setting the mesh cannot serve
    stops the run before anything is written."""
    mesh = sharding.make_mesh(sections.mesh)
    rules = sharding.logical_rules(sections.mesh.rules)
    config = batch_rows(config, mesh, is_main)
    check_run_settings(config, mesh)
    return mesh, rules, config


def checked_task(
    config: ml_collections.ConfigDict, workdir: str, make_task: TaskFactory, is_main: bool
) -> TrainingTask:
    """What is trained (tokenizer, model, batches, loss), with config.json and the task's
    data written. The task is made on process 0 first: it trains the tokenizer where the
    workdir has none, the others then load it. A resumed run is checked against its
    config.json before that file or the data are written, so that a run refused for
    other shapes leaves its workdir as it was."""
    task = distributed.main_process_first(lambda: make_task(config, workdir))
    if os.path.exists(os.path.join(workdir, "config.json")):
        check_resumable(task, load_run_config(workdir), workdir)
    if is_main:
        save_run_config(workdir, task.config)
    distributed.main_process_first(task.prepare_data)
    return task


def initial_state(
    task: TrainingTask,
    optimizer: optax.GradientTransformation,
    mesh: Mesh,
    rules: tuple,
    sections: RunSections,
    checkpoints: RunCheckpoints,
    is_main: bool,
) -> tuple[TrainState, TrainState, TrainState]:
    """A fresh train state laid out over the mesh by the logical-axis rules: (state, its
    shardings, its abstract shapes). Its dropout key has the generator of the run's
    checkpoints (a resumed run keeps the masks it drew) or else train.dropout_rng_impl's;
    the parameters come from the seed (a resumed run then restores them)."""
    rng_impl, note = dropout_rng_impl(checkpoints.checkpointer, sections.train.dropout_rng_impl)
    if note:
        say(note, is_main)
    rng = jax.random.key(sections.seed)
    return init_train_state(task.init_params, optimizer, mesh, rng, rules, rng_impl)


def starting_point(
    state: TrainState,
    num_steps: int | float,
    timed_schedule: bool,
    meta: CheckpointMeta | None,
    train: TrainConfig,
    is_main: bool,
) -> RunState:
    """Where the loop starts: the state's step, and what the checkpoint's ``meta`` carries
    across restarts (None: a new run, none of it): the non-finite steps skipped, the
    length a timed schedule was fit to (the first run set it; a resumed run keeps that
    schedule), and with train.keep_best the best evaluation and the count since it (so
    that the rerun goes on counting towards train.patience)."""
    if timed_schedule and meta is not None and meta.schedule_steps:
        num_steps = meta.schedule_steps  # its length, set by the first run
    rs = RunState(
        state=state,
        num_steps=num_steps,
        step=int(jax.device_get(state.step)),
        skipped_steps=0 if meta is None else meta.skipped_steps,
    )
    if train.keep_best:
        rs.best, note = from_meta(meta, train.keep_best)
        if note:
            say(note, is_main)
    return rs


def _leaf_names(abstract: TrainState) -> list[str]:
    """The parameters' paths, as the non-finite guard names a tensor."""
    return [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_leaves_with_path(abstract.params)
    ]


def _resume(
    task: TrainingTask,
    checkpoints: RunCheckpoints,
    train_iter: Any,
    state: TrainState,
    state_shardings: TrainState,
    abstract: TrainState,
    workdir: str,
    is_main: bool,
) -> tuple[TrainState, CheckpointMeta | None]:
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
    note = train_iter.restore_states(meta.data, jax.process_index(), jax.process_count())
    say(f"resuming from checkpoint {latest} in {workdir}", is_main)
    if note:
        say(note, is_main)
    return state, meta


def _size_and_length(run: Run, abstract: TrainState, rows: int, num_steps: int | float) -> str:
    """The console line that opens the training: parameters, mesh, batch, steps, budget."""
    rules = run.rules
    return (
        f"{sum(x.size for x in jax.tree.leaves(abstract.params)):,} parameters; mesh "
        f"{dict(run.mesh.shape)}"
        + (f" ({sharding.rules_text(rules)})" if rules != sharding.LOGICAL_RULES else "")
        + "; "
        f"{rows} rows per step; "
        + (f"{num_steps} steps" if num_steps < math.inf else "no step count")
        + (f"; at most {run.budget.minutes:g} minutes" if run.budget.minutes else "")
    )
