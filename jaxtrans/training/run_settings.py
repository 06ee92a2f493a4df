"""The settings of a run checked before anything is written, and its length in steps.

batch_rows          data.batch_size from data.tokens_per_batch, where that is set
check_run_settings  batch, logging, checkpoint, length and guard settings -> UserError
run_length          train.num_steps, or train.num_epochs counted from the task's data,
                    or no count (math.inf) when train.max_minutes alone bounds the run
"""

import copy
import math

import jax
import ml_collections

from jaxtrans.config_sections import section_values
from jaxtrans.errors import UserError
from jaxtrans.training.metrics import say
from jaxtrans.training.run_sections import TrainConfig
from jaxtrans.training.task import TrainingTask


def rows_for_tokens(tokens_per_batch: int, max_target_length: int, multiple: int = 1) -> int:
    """Rows of ``max_target_length`` target tokens that hold ``tokens_per_batch``:
    ceil(tokens / length), rounded up to a multiple of ``multiple`` (e.g. the devices the
    rows are split over)."""
    rows = math.ceil(tokens_per_batch / max_target_length)
    return math.ceil(rows / multiple) * multiple


def batch_rows(
    config: ml_collections.ConfigDict,
    mesh,
    is_main: bool = True,
    process_count: int | None = None,
) -> ml_collections.ConfigDict:
    """``config``, or with data.tokens_per_batch set a copy whose data.batch_size is the
    rows that hold that many target tokens, a multiple of the data-parallel devices (and of
    the processes times train.grad_accum_steps); said on the console. ``process_count``:
    the run's processes (default: this one's jax.process_count()). ``config`` has every
    field of its data section (a config.json of an older version is completed first:
    run_config.complete_run_config)."""
    data = config.data
    tokens = data.tokens_per_batch
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise UserError(f"--config.data.tokens_per_batch={tokens!r}: use a whole number >= 0")
    if not tokens:
        return config
    if "max_target_length" not in data:
        raise UserError(
            f"--config.data.tokens_per_batch={tokens} is for translation; a "
            f"{config.get('task')} step is --config.data.batch_size examples (set it, and "
            "tokens_per_batch=0)"
        )
    if data.batch_size:
        raise UserError(
            f"--config.data.batch_size={data.batch_size} and --config.data.tokens_per_batch="
            f"{tokens}: set one of them, the other to 0"
        )
    if not data.pack:
        raise UserError(
            f"--config.data.tokens_per_batch={tokens} needs packed rows of "
            "data.max_target_length tokens (data.pack=True); without packing set "
            "--config.data.batch_size instead, and tokens_per_batch=0"
        )
    data_parallel = mesh.shape["data"] * mesh.shape["fsdp"]
    accum = max(int(config.train.grad_accum_steps), 1)
    processes = jax.process_count() if process_count is None else process_count
    multiple = math.lcm(data_parallel, processes * accum)
    length = int(data.max_target_length)
    rows = rows_for_tokens(tokens, length, multiple)
    asked = rows_for_tokens(tokens, length)
    grown = (
        f", {rows / asked:.2f}x the {asked} rows asked for: docs/recipes.md says how the "
        "learning rate follows the batch"
        if rows > asked
        else ""
    )
    say(
        f"data.tokens_per_batch={tokens}: {rows} rows of {length} target tokens a step "
        f"({rows * length} token slots; rows a multiple of {multiple}{grown})",
        is_main,
    )
    resolved = copy.deepcopy(config)
    resolved.data.batch_size = rows
    return resolved


def check_run_settings(
    config: ml_collections.ConfigDict, mesh, process_count: int | None = None
) -> None:
    """Settings that need neither data nor model, checked before anything is written; the
    train section's own checks are TrainConfig's (run_sections.py). ``process_count``: as
    batch_rows."""
    batch_size = config.data.batch_size
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(
            f"--config.data.batch_size={batch_size!r}: use a whole number >= 1 "
            "(or set data.tokens_per_batch)"
        )
    train = train_settings(config)
    data_parallel = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_size % data_parallel:
        by_tokens = (
            " (or batch_size=0 and data.tokens_per_batch, rounded up to the devices)"
            if "tokens_per_batch" in config.data
            else ""
        )
        raise UserError(
            f"--config.data.batch_size={batch_size} is not divisible by the "
            f"{data_parallel} data-parallel devices; choose a multiple of {data_parallel}"
            + by_tokens
        )
    accum = int(train.grad_accum_steps)
    local_rows = batch_size // (jax.process_count() if process_count is None else process_count)
    if accum < 1 or local_rows % accum:
        raise UserError(
            f"--config.train.grad_accum_steps={accum} does not divide the per-process batch "
            f"of {local_rows} rows"
        )


def train_settings(config: ml_collections.ConfigDict) -> TrainConfig:
    """The run's train section as a TrainConfig (a field it lacks takes its default), which
    checks its values: UserError naming the first bad one."""
    return section_values(TrainConfig, config.train)


def has_time_length_schedule(config: ml_collections.ConfigDict, num_steps: int | float) -> bool:
    """Whether the run's learning-rate schedule takes its length from the time budget: a
    linear decay (to 0 at the last step) in a run that only train.max_minutes bounds."""
    return num_steps == math.inf and config.optimizer.schedule == "linear"


def run_length(config: ml_collections.ConfigDict, task: TrainingTask, is_main: bool) -> int | float:
    """The run's number of steps: train.num_steps, or train.num_epochs times the task's
    count of the steps of one epoch (said on the console); math.inf for a run that only
    train.max_minutes bounds."""
    train = train_settings(config)
    epochs = int(train.num_epochs)
    if not epochs:
        if not train.num_steps and train.max_minutes:
            return math.inf
        return int(train.num_steps)
    counted = task.steps_per_epoch(config.seed, jax.process_count())
    if counted is None:
        raise UserError(
            f"--config.train.num_epochs is for translation runs; this {config.get('task')} run "
            "counts --config.train.num_steps (set it, and num_epochs=0)"
        )
    per_epoch, how = counted
    say(
        f"one epoch = {per_epoch} steps ({how}); {epochs} epochs = {epochs * per_epoch} steps",
        is_main,
    )
    return epochs * per_epoch
