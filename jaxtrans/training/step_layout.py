"""The train step as a run compiles it: the state laid out over the mesh by the
logical-axis rules, the batch's rows split over data and fsdp, the old state donated,
the non-finite guard around it. The loop (loop.py) and ahead-of-time compilation
(ahead_of_time.py) take it from here, so that what is compiled for a TPU that is not
there is the program a run on it executes.

StepLayout       mesh, rules and the shardings of the state and the batch
jit_train_step   ``step(state, batch, frozen) -> (state, metrics)``, jitted in a layout
jit_eval_step    ``eval_step(params, batch) -> sums``, the dev loss in the same layout
place_eval_batch a dev batch (whole on every process) over the mesh, padded to split
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, Sharding

from jaxtrans.training import sharding
from jaxtrans.training.guards import guarded_step
from jaxtrans.training.state import TrainState
from jaxtrans.training.step import make_eval_step, make_train_step
from jaxtrans.training.task import TrainingTask


@dataclass(frozen=True)
class StepLayout:
    """Where a step's arrays live."""

    mesh: Mesh
    rules: Any  # the logical-axis rules (sharding.logical_rules)
    state: TrainState  # the NamedSharding of every leaf of the train state
    batch: Sharding  # every batch array: rows over data and fsdp
    replicated: Sharding  # scalars: the guard's flag, the metrics

    @classmethod
    def of(cls, mesh: Mesh, rules, state_shardings: TrainState) -> "StepLayout":
        return cls(
            mesh, rules, state_shardings, sharding.batch_sharding(mesh), sharding.replicated(mesh)
        )


def jit_train_step(
    task: TrainingTask,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum_steps: int,
    guard_mode: str,
    layout: StepLayout,
) -> Callable:
    """The guarded train step (guards.guarded_step) jitted with ``layout``'s shardings,
    donating the old state. Trace it (call it, or lower it) under the layout's
    logical-axis rules: ``sharding.axis_rules(layout.mesh, layout.rules)``."""
    step = guarded_step(make_train_step(task, optimizer, schedule, grad_accum_steps), guard_mode)
    return jax.jit(
        step,
        in_shardings=(layout.state, layout.batch, layout.replicated),
        out_shardings=(layout.state, layout.replicated),
        donate_argnums=(0,),
    )


def jit_eval_step(task: TrainingTask, layout: StepLayout) -> Callable:
    """``eval_step(params, batch) -> sums`` (step.make_eval_step) jitted with ``layout``'s
    shardings: the parameters as the train state holds them, the batch's rows split over
    data and fsdp as a training batch's, the sums added over every device (replicated).
    Traced under the layout's logical-axis rules, as the train step is, so that an
    attention kernel that runs per device (splash, in a shard_map) finds the mesh."""
    jitted = jax.jit(
        make_eval_step(task),
        in_shardings=(layout.state.params, layout.batch),
        out_shardings=layout.replicated,
    )
    return sharding.with_axis_rules(jitted, layout.mesh, layout.rules)


def place_eval_batch(batch: dict[str, np.ndarray], layout: StepLayout) -> dict[str, jax.Array]:
    """A dev batch that every process holds whole (TrainingTask.eval_batches), arrays
    [rows, ...] -> arrays over ``layout``'s mesh, rows split as a training batch's. Rows
    of zeros are added until the rows split evenly: they count for nothing in a task's
    loss sums (TrainingTask.eval_batches), so the dev loss is the one of the batch."""
    shards = sharding.batch_shards(layout.mesh)
    placed = {}
    for key, value in batch.items():
        value = np.asarray(value)
        extra = -len(value) % shards
        if extra:
            value = np.concatenate([value, np.zeros((extra, *value.shape[1:]), value.dtype)])
        placed[key] = jax.make_array_from_callback(
            value.shape, layout.batch, lambda index, value=value: value[index]
        )
    return placed
