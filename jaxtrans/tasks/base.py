"""The Task protocol: one kind of model and data, for the whole life of a run.

A task is built for training with ``from_config(config, workdir)`` (a new or resumed run:
the tokenizer is trained into, or loaded from, the workdir) and for using a trained run
with ``from_workdir(workdir, run_config)`` (its config.json and tokenizer; nothing is
trained or downloaded). Besides what the training loop asks of it (``TrainingTask``:
model, batches, loss, dev metrics) it answers the evaluate.py program: ``evaluate`` writes
the report of a split, ``predict`` answers user input, ``plot_attention`` draws one.
"""

import abc
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from jaxtrans.errors import UserError
from jaxtrans.training.task import Batch, TrainingTask
from jaxtrans.workdirs import checkpoint_choice

__all__ = ["Batch", "Restored", "Task", "report_stem"]


@dataclasses.dataclass(frozen=True)
class Restored:
    """Parameters read from a workdir's checkpoints."""

    params: Any
    step: int
    # "step N", "step N (best dev bleu 23.1)" or "average of steps [...]".
    description: str
    # The --checkpoint it was asked for: latest, best, a step, or avg:K.
    spec: str


def report_stem(split: str, restored: Restored, suffix: str = "") -> str:
    """File name stem of a report: ``{split}-step{N}``, ``-avg{K}`` for averaged checkpoints
    (so that they do not overwrite step N's own report), then ``suffix``: what else tells
    reports of one checkpoint apart, e.g. translation's decoding settings (``-beam4``), so
    that an evaluation with other settings does not overwrite them either."""
    kind, count = checkpoint_choice.parse_checkpoint_spec(restored.spec)
    return f"{split}-step{restored.step}" + (f"-avg{count}" if kind == "avg" else "") + suffix


class Task(TrainingTask):
    """A TrainingTask that can also be restored from its workdir, evaluated and asked."""

    # The value of ``config.task`` that selects this class (jaxtrans.tasks.TASKS).
    name: str = ""
    # Splits ``evaluate`` accepts, the first being evaluate.py's default.
    splits: tuple[str, ...] = ("test", "dev")
    # Whether ``predict`` (evaluate.py --input) and ``plot_attention`` are implemented.
    predicts: bool = False
    plots_attention: bool = False
    # What ``export`` writes (python -m jaxtrans.export), e.g. "Hugging Face Marian"; "": none.
    export_format: str = ""
    # The formats ``export`` writes besides that one ("huggingface"), by their --format
    # name: what each is, e.g. {"ctranslate2": "CTranslate2"}.
    other_export_formats: dict[str, str] = {}

    # The flax module built from the model config.
    model_class: type[nn.Module]
    # The workdir a task restored by ``from_workdir`` reads its checkpoints from.
    workdir: str | None = None

    def __init__(self, run_config: ml_collections.ConfigDict, model_config: Any, tokenizer: Any):
        """The task of a run config, its model config and its tokenizer (None where only
        parameter shapes are needed)."""
        super().__init__(run_config)
        self.model_config = model_config
        self.model = self.model_class(model_config)
        self.tokenizer = tokenizer

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str) -> "Task":
        """The task of a new or resumed training run in ``workdir``."""

    @classmethod
    @abc.abstractmethod
    def from_workdir(cls, workdir: str, run_config: ml_collections.ConfigDict) -> "Task":
        """The task of a trained run, from its saved config and its own tokenizer."""

    def restore_params(self, checkpoint: str = "latest") -> Restored:
        """Parameters of ``self.workdir``'s checkpoint ``latest``, ``best``, a step, or
        ``avg:K`` (jaxtrans.workdirs.checkpoint_choice)."""
        if self.workdir is None:
            raise ValueError("restore_params needs a task made by from_workdir")
        # The parameters' shapes and dtypes: an abstract trace of the model's init.
        abstract = jax.eval_shape(lambda: nn.unbox(self.init_params(jax.random.key(0))))
        params, step, description = checkpoint_choice.restore_params(
            self.workdir, abstract, checkpoint
        )
        return Restored(params, step, description, checkpoint)

    @abc.abstractmethod
    def evaluate(
        self,
        split: str,
        *,
        checkpoint: str = "latest",
        outdir: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score ``split`` with a checkpoint, print a summary, write the report files to
        ``outdir`` (default WORKDIR/eval) and return the report. ``options``: the
        evaluate.py settings given on the command line (None where not given)."""

    def predict(
        self,
        lines: Sequence[str],
        *,
        checkpoint: str = "latest",
        options: dict[str, Any] | None = None,
    ) -> list[str]:
        """One output line per input line (evaluate.py --input)."""
        raise NotImplementedError(f"the {self.name} task does not predict from input")

    def plot_attention(
        self,
        sentence: str,
        output_png: str,
        *,
        checkpoint: str = "latest",
        options: dict[str, Any] | None = None,
    ) -> str:
        """Draw the attention of one input to ``output_png``; returns the model's output."""
        raise NotImplementedError(f"the {self.name} task does not plot attention")

    def export(
        self, output: Path, checkpoint: str = "latest", export_format: str = "huggingface"
    ) -> str:
        """Write a trained run's model and tokenizer into ``output`` (a new or empty
        directory, written whole or not at all) in ``export_format``: "huggingface" (the
        task's ``export_format``) or a name of ``other_export_formats``; returns what was
        written, in words."""
        raise NotImplementedError(f"the {self.name} task does not export")

    def outdir(self, outdir: str | None) -> str:
        """Where reports go: ``outdir``, else WORKDIR/eval."""
        return outdir or os.path.join(self.workdir or ".", "eval")

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise UserError(f"--split {split}: use {' or '.join(self.splits)}")
