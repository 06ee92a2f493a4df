"""What the training loop needs to know about one kind of training.

The loop owns the mesh, optimizer, checkpoints, logging and signals; a ``TrainingTask``
owns the tokenizer, model, batches, loss and dev evaluation. The tasks themselves live in
``jaxtrans.tasks`` and are handed to the loop; nothing in ``jaxtrans.training`` imports
them.
"""

import abc
from collections.abc import Iterable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from jax.sharding import Sharding

from jaxtrans.errors import UserError

Batch = dict[str, jnp.ndarray]


class TrainingTask(abc.ABC):
    """One kind of training, for the run config ``config`` (the config with everything the
    tokenizer decided, e.g. vocabulary sizes; also ``run_config``: what config.json keeps).
    Subclasses set ``model`` and ``model_config``."""

    # Metrics shown on the console after the loss.
    headline: tuple[str, ...] = ()
    # Model config fields that fix parameter shapes; a resumed run must keep them.
    shape_fields: tuple[str, ...] = ()

    model: nn.Module
    model_config: Any
    run_config: ml_collections.ConfigDict

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = self.run_config = config

    @abc.abstractmethod
    def init_params(self, rng: jax.Array) -> Any:
        """Freshly initialised (boxed, logically partitioned) parameters."""

    def initial_params(self, params: Any) -> Any:
        """Parameters to start a new run from (fine-tuning replaces some); default: as is."""
        return params

    @abc.abstractmethod
    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        """Normalisers of the whole step's batch (e.g. its real target tokens)."""

    @abc.abstractmethod
    def loss_sums(
        self, params, batch: Batch, rng: jax.Array | None, deterministic: bool
    ) -> dict[str, jnp.ndarray]:
        """Summed loss terms and counts of a (micro-)batch."""

    @abc.abstractmethod
    def objective(self, sums: dict[str, jnp.ndarray], counts: dict[str, jnp.ndarray]):
        """The scalar to differentiate: this micro-batch's share of the step's mean loss."""

    @abc.abstractmethod
    def summarize(self, sums: dict[str, jnp.ndarray]) -> dict[str, jnp.ndarray]:
        """Means from sums; must include ``loss`` and ``tokens`` (for tokens/s)."""

    def prepare_data(self) -> None:  # noqa: B027 - a hook: most tasks have nothing to write
        """Write what training reads ahead of it into the workdir (e.g. the tokenised
        training data); default nothing. Set-up calls it once the run is known to resume
        (or start) cleanly, on process 0 first, so that a refused run writes nothing."""

    @abc.abstractmethod
    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        """Checkpointable iterator of local training batches: ``get_state()``,
        ``set_state(state)`` and ``stats()`` (see jaxtrans.data.iterators)."""

    def eval_batches(self) -> Iterable[Batch] | None:
        """Dev batches (full, identical on every process), or None without a dev split.
        A row of zeros must count for nothing in ``loss_sums``: the loop adds such rows
        to a batch whose rows do not split over the devices (step_layout.place_eval_batch)."""
        return None

    def extra_eval(self, params, step: int, rows: Sharding | None = None) -> dict[str, Any]:
        """Dev metrics beyond the loss (e.g. BLEU); default none. ``params`` as the train
        state holds them (sharded over the mesh, maybe over several processes: never
        ``jax.device_get`` them whole); ``rows``: how the loop splits a batch's rows over
        the devices (its dev batches), for a metric that computes over batches of its own
        (None: on one device)."""
        return {}

    def steps_per_epoch(self, seed: int, process_count: int) -> tuple[int, str] | None:
        """(training steps of one pass over the training data, how they were counted), for
        ``train.num_epochs``; None where the task cannot count them."""
        return None

    def batch_shapes(self, rows: int) -> Batch:
        """The shapes and dtypes (jax.ShapeDtypeStruct) of a training batch of ``rows``
        rows as train_iterator makes them, to compile the step with no data
        (ahead_of_time.py)."""
        raise UserError(
            f"{type(self).__name__} has no batch shapes: its runs cannot be compiled ahead "
            "of time (translation and bert_pretraining runs can)"
        )

    @property
    def packs_rows(self) -> bool:
        """Whether a training row holds several sequences (packed, told apart by segment
        ids: data.pack), which decides the attention kernels a run can use. A data section
        without the field (the BERT tasks') does not pack."""
        data = self.config.data
        return "pack" in data and bool(data.pack)

    def step_flops(self) -> float | None:
        """Model FLOPs of one training step, if known."""
        return None
