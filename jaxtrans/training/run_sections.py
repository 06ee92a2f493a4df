"""The run config sections the training machinery reads: ``optimizer``, ``train``, ``mesh``.

Each is a frozen dataclass whose fields, defaults and comments are the one description of
the section (docs/configuration.md shows the comments); ``*_section()`` is the section
as a ConfigDict with those defaults (``dataclass_section``). ``TrainConfig`` checks, on
construction, what needs nothing but its own values (one-line UserErrors); the checks
that need the mesh, the process count or other sections are in run_settings.py.

    OptimizerConfig / optimizer_section()   Adam or AdamW and the learning-rate schedule
    TrainConfig / train_section()           steps, budget, logging, checkpoints, guards
    MeshConfig / mesh_section()             the device mesh and the logical-axis rules
    RunSections.of(config)                  the three, and the seed, typed: what a run reads

A run converts its sections once, where it is set up (``RunSections.of``), and reads
typed fields from then on: a field a section lacks (a config.json written before the field
existed) takes the dataclass's default, defined here only; a key that is no field is
ignored (config.json keeps it as it was).
"""

import dataclasses
import re

import ml_collections

from jaxtrans import compilation_cache
from jaxtrans.config_sections import dataclass_section, section_values
from jaxtrans.errors import UserError
from jaxtrans.training import sharding
from jaxtrans.training.dropout_rng import DROPOUT_RNG_IMPLS


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """The ``optimizer`` section: the update rule and the learning-rate schedule."""

    # adam | adamw (decoupled weight decay on matrices, not on biases or LayerNorm).
    name: str = "adam"
    # Adam beta1.
    b1: float = 0.9
    # Adam beta2 (0.98 in the paper).
    b2: float = 0.98
    # Adam epsilon (1e-9 in the paper).
    eps: float = 1e-9
    # AdamW weight decay (ignored by adam).
    weight_decay: float = 0.0
    # noam: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); linear: warm-up
    # to learning_rate then linear decay to 0; constant: learning_rate.
    schedule: str = "noam"
    # Noam schedule factor (1.0 is the paper's formula).
    noam_factor: float = 1.0
    # Peak learning rate of the linear and constant schedules.
    learning_rate: float = 1e-3
    # Warm-up steps (4000 in the paper).
    warmup_steps: int = 4000
    # Clip gradients to this global norm (0 disables clipping).
    clip_norm: float = 1.0


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The ``train`` section: how long the run is, what it logs and saves, its guards."""

    # Optimizer updates in the whole run (0: count them from train.num_epochs).
    num_steps: int = 100_000
    # Passes over the training data (translation runs), instead of num_steps: the steps of
    # one epoch are counted from the packed training data at start; 0 = use num_steps.
    num_epochs: int = 0
    # Wall-clock budget in minutes, 0 = no limit. Counted from the program's start (the
    # tokenizer, compilation and data loading included; a resumed run counts from its own
    # start); when it is spent the run saves a checkpoint, runs the final dev evaluation and
    # says why it stopped. With num_steps=0 and num_epochs=0 the run lasts until then (the
    # console estimates its steps from the step time), and a linear schedule decays to 0 at
    # the last step that fits, estimated from the step time at the second log (the steps
    # compiled again; the length is kept in checkpoints, so a resumed run keeps it).
    max_minutes: float = 0.0
    # Log train metrics every this many steps.
    log_every: int = 100
    # Save a checkpoint every this many steps (and always at the end and on SIGTERM).
    checkpoint_every: int = 2_000
    # Evaluate on the dev split every this many steps (0 disables).
    eval_every: int = 5_000
    # Checkpoints kept on disk (the newest ones).
    keep_checkpoints: int | None = 5
    # Keep the checkpoint of the best dev evaluation by this dev metric (a key of the dev
    # records of metrics.jsonl, e.g. bleu, chrf, loss, accuracy, f1) besides the newest
    # keep_checkpoints, restorable as --checkpoint best; lower is better for loss, nll,
    # perplexity and names ending in _loss, higher for the others. Each evaluation is then
    # also a checkpoint. "" = off.
    keep_best: str = ""
    # Stop the run after this many dev evaluations in a row that do not improve on the
    # best train.keep_best (a tie does not improve); 0 = never.
    patience: int = 0
    # Write checkpoints in the background while training continues.
    async_checkpoints: bool = True
    # Label smoothing epsilon (0.1 in the paper).
    label_smoothing: float = 0.1
    # Translation: the loss projects the decoder's states to the vocabulary this many
    # target tokens (of one device's rows) at a time, never holding the whole batch's
    # logits (jaxtrans/training/chunked_loss.py); same loss and gradient to float
    # rounding. 0 = the model's logits of the whole batch, then the loss.
    loss_chunk_tokens: int = 2048
    # Split each step's batch into this many micro-batches (same update, less memory).
    grad_accum_steps: int = 1
    # A NaN/Inf loss or gradient: "stop" (name the step and tensor, exit) or "skip" the
    # update and count it. Either way no non-finite state is ever saved.
    on_nonfinite: str = "stop"
    # The generator of the dropout masks: "threefry" (JAX's default: the same masks on every
    # platform, mesh and JAX version), "rbg" (XLA's RngBitGenerator draws the masks, threefry
    # derives the keys: cheaper on TPUs; the same masks again on the same platform, mesh and
    # JAX version only) or "unsafe_rbg" (keys derived by RngBitGenerator too: no promise
    # across JAX versions, untested key derivation). Parameters are initialised with
    # threefry whatever this says; a resumed run keeps its checkpoints' generator.
    dropout_rng_impl: str = "threefry"
    # Peak FLOP/s of one device for MFU (0 = look the device up in a table).
    peak_flops_per_device: float = 0.0
    # Persistent XLA compilation cache directory ("" disables it).
    compilation_cache_dir: str = compilation_cache.DEFAULT_DIR

    def __post_init__(self) -> None:
        for key in ("log_every", "checkpoint_every"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"--config.train.{key}={value!r}: use a whole number >= 1")
        keep = self.keep_checkpoints
        if keep is not None and (not isinstance(keep, int) or keep < 1):
            raise UserError(f"--config.train.keep_checkpoints={keep!r}: use a whole number >= 1")
        for key in ("num_steps", "num_epochs"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 0:
                raise UserError(f"--config.train.{key}={value!r}: use a whole number >= 0")
        # Both 0 is a run of no steps (it sets up the workdir: tokenizer, config, and
        # stops), or, with max_minutes, a run until the time is spent.
        if self.num_steps > 0 and self.num_epochs > 0:
            raise UserError(
                f"--config.train.num_steps={self.num_steps} and --config.train.num_epochs="
                f"{self.num_epochs}: set one of them, the other to 0"
            )
        minutes = self.max_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not minutes >= 0:
            raise UserError(
                f"--config.train.max_minutes={minutes!r}: use a number of minutes >= 0 "
                "(0 = no limit)"
            )
        chunk = self.loss_chunk_tokens
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise UserError(
                f"--config.train.loss_chunk_tokens={chunk!r}: use a whole number of tokens "
                ">= 0 (0 = the whole batch's logits at once)"
            )
        if self.on_nonfinite not in ("stop", "skip"):
            raise UserError(f"--config.train.on_nonfinite={self.on_nonfinite!r}: use stop or skip")
        if self.dropout_rng_impl not in DROPOUT_RNG_IMPLS:
            raise UserError(
                f"--config.train.dropout_rng_impl={self.dropout_rng_impl!r}: use "
                + ", ".join(DROPOUT_RNG_IMPLS)
            )
        self._check_keep_best()

    def _check_keep_best(self) -> None:
        """keep_best is a metric's name that dev evaluations report; patience watches it."""
        metric, patience = self.keep_best, self.patience
        if not isinstance(metric, str) or not re.fullmatch(r"([A-Za-z][A-Za-z0-9_]*)?", metric):
            raise UserError(
                f"--config.train.keep_best={metric!r}: use a dev metric's name, e.g. bleu or "
                "loss ('' = off)"
            )
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise UserError(
                f"--config.train.patience={patience!r}: use a whole number >= 0 (0 = never stop "
                "early)"
            )
        if patience and not metric:
            raise UserError(
                f"--config.train.patience={patience} counts evaluations that do not improve "
                "on the best: set --config.train.keep_best to the metric, e.g. bleu or loss"
            )
        if metric and not self.eval_every:
            raise UserError(
                f"--config.train.keep_best={metric} needs dev evaluations: set "
                "--config.train.eval_every"
            )


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """The ``mesh`` section: the (data, fsdp, tensor) device mesh and how arrays map on it."""

    # Data-parallel devices (-1 = all devices not used by the other axes).
    data: int = -1
    # Fully sharded data-parallel devices (parameters split along d_model).
    fsdp: int = 1
    # Tensor-parallel devices (heads and feed-forward width split).
    tensor: int = 1
    # Logical axis -> mesh axes, comma-separated logical=axes: the axes joined by +, none =
    # not split. Given rules replace those of this default table, the others stay, e.g.
    # --config.mesh.rules=embed=none,mlp=fsdp+tensor. Parameters (jaxtrans/nn/layers.py)
    # and the train step's activations (jaxtrans/nn/blocks.py) carry these logical names.
    rules: str = sharding.rules_text(sharding.LOGICAL_RULES)


@dataclasses.dataclass(frozen=True)
class RunSections:
    """The sections the training machinery reads, each as its dataclass (the model, data
    and eval sections are the task's)."""

    # Seed of parameter initialisation, dropout and data shuffling (the top-level seed).
    seed: int
    # The optimizer section.
    optimizer: OptimizerConfig
    # The train section.
    train: TrainConfig
    # The mesh section.
    mesh: MeshConfig

    @classmethod
    def of(cls, config: ml_collections.ConfigDict) -> "RunSections":
        """The typed sections of the run config ``config``; each dataclass checks its
        values (a UserError naming the first bad one)."""
        seed = config.seed
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UserError(f"--config.seed={seed!r}: use a whole number")
        return cls(
            seed=seed,
            optimizer=section_values(OptimizerConfig, config.get("optimizer")),
            train=section_values(TrainConfig, config.get("train")),
            mesh=section_values(MeshConfig, config.get("mesh")),
        )


def optimizer_section(**overrides) -> ml_collections.ConfigDict:
    """The optimizer section: OptimizerConfig's defaults, with ``overrides``."""
    return dataclass_section(OptimizerConfig, **overrides)


def train_section(**overrides) -> ml_collections.ConfigDict:
    """The train section: TrainConfig's defaults, with ``overrides``."""
    return dataclass_section(TrainConfig, **overrides)


def mesh_section(**overrides) -> ml_collections.ConfigDict:
    """The mesh section: MeshConfig's defaults, with ``overrides``."""
    return dataclass_section(MeshConfig, **overrides)
