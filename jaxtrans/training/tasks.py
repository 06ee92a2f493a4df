"""What the training loop needs to know about one kind of training.

A task owns its tokenizer, model, batches, loss and evaluation; the loop owns the mesh,
optimizer, checkpoints, logging and signals. ``config.task`` names the task:

    translation          encoder-decoder Transformer (jaxtrans.training.translation)
    bert_pretraining     BERT masked-LM + next-sentence (jaxtrans.training.bert_tasks)
    bert_classification  BERT fine-tuning for sequence classification
"""

import abc
import importlib
from collections.abc import Iterable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.errors import UserError

Batch = dict[str, jnp.ndarray]

TASKS = {
    "translation": "jaxtrans.training.translation:TranslationTask",
    "bert_pretraining": "jaxtrans.training.bert_tasks:BertPretrainingTask",
    "bert_classification": "jaxtrans.training.bert_tasks:BertClassificationTask",
}


class Task(abc.ABC):
    """One kind of training. Subclasses set ``model``, ``model_config`` and ``run_config``
    (the config with everything the tokenizer decided, e.g. vocabulary sizes), and build
    themselves for a run with ``from_config(config, workdir)``."""

    # Metrics shown on the console after the loss.
    headline: tuple[str, ...] = ()
    # Model config fields that fix parameter shapes; a resumed run must keep them.
    shape_fields: tuple[str, ...] = ()

    model: nn.Module
    model_config: Any
    run_config: ml_collections.ConfigDict

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = config

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str) -> "Task":
        """The task of a run: tokenizer (trained into or loaded from ``workdir``), model."""

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

    @abc.abstractmethod
    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        """Checkpointable (get_state/set_state) iterator of local training batches."""

    def eval_batches(self) -> Iterable[Batch] | None:
        """Dev batches (full, identical on every process), or None without a dev split."""
        return None

    def extra_eval(self, params, step: int) -> dict[str, Any]:
        """Evaluation beyond the dev loss (e.g. BLEU); default none."""
        return {}

    def step_flops(self) -> float | None:
        """Model FLOPs of one training step, if known."""
        return None


def load_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
    name = config.get("task", "translation")
    if name not in TASKS:
        raise UserError(f"--config.task={name!r} is not one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls).from_config(config, workdir)
