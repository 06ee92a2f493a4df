"""What the BERT tasks share: model fields, the run config they keep, and the evaluation
of a trained BERT workdir by the task's own loss (bert_pretraining.py,
bert_classification.py).

Every BERT workdir keeps its tokenizer in ``WORKDIR/bert_tokenizer/`` (bert_init.py), so
a finished run is evaluated from DIR/config.json, that tokenizer and DIR/checkpoints
alone (nothing from ``init_from`` is read).
"""

import dataclasses
import json
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.models.bert import BertConfig
from jaxtrans.tasks import bert_init
from jaxtrans.tasks.base import Batch, Task, report_stem
from jaxtrans.training.step import make_eval_step

# Model fields that fix parameter shapes: a resumed run must keep them.
SHAPE_FIELDS = (
    "vocab_size",
    "type_vocab_size",
    "d_model",
    "num_heads",
    "d_ff",
    "num_layers",
    "position",
    "max_len",
)
# Model fields a fine-tuning run takes from its own config; every other field (the
# shapes, activation, LayerNorm placement and epsilon, pad id) comes from the checkpoint.
FINE_TUNING_FIELDS = (
    "dropout_rate",
    "attention_dropout_rate",
    "activation_dropout_rate",
    "classifier_dropout_rate",
    "attention_impl",
    "remat",
    "dtype",
    "param_dtype",
)


def bert_config(values: dict[str, Any]) -> BertConfig:
    try:
        return BertConfig.from_dict(values)
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from error


def resolve_run_config(
    config: ml_collections.ConfigDict, model_config: BertConfig
) -> ml_collections.ConfigDict:
    """The run config with every model field the run decided (what config.json keeps)."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model = ml_collections.ConfigDict(dataclasses.asdict(model_config))
    return resolved


def check_sequence_length(model_config: BertConfig, max_seq_length: int) -> None:
    if model_config.position == "learned" and max_seq_length > model_config.max_len:
        raise UserError(
            f"--config.data.max_seq_length={max_seq_length} exceeds the model's position "
            f"table (max_len={model_config.max_len}); use a shorter max_seq_length"
        )


class BertTask(Task):
    """A BERT task scored by its own ``loss_sums`` and ``summarize`` on a split's batches,
    exactly as the training loop's dev evaluation does."""

    shape_fields = SHAPE_FIELDS

    @classmethod
    def from_workdir(cls, workdir: str, run_config: ml_collections.ConfigDict) -> "BertTask":
        """The saved model config and DIR/bert_tokenizer/ (init_from is not read)."""
        task = cls(
            run_config,
            bert_config(run_config.model.to_dict()),
            bert_init.load_run_tokenizer(workdir),
        )
        task.workdir = workdir
        return task

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every example of ``split`` once, in order; None when the config has none."""
        raise NotImplementedError

    def eval_batches(self) -> list[Batch] | None:
        return self.split_batches("dev")

    def report_extras(self) -> dict[str, Any]:
        """Report fields besides the metrics (e.g. the label names)."""
        return {}

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Metrics of ``split`` to OUTDIR/{split}-step{N}[-avgK].json; returns the report:
        task, split, step, checkpoint, examples and the task's metrics."""
        self.check_split(split)
        batches = self.split_batches(split)
        if not batches:
            raise UserError(f"{self.workdir}: its config names no {split} data to evaluate")
        restored = self.restore_params(checkpoint)
        eval_step = jax.jit(make_eval_step(self))
        totals = None
        for batch in batches:
            sums = jax.device_get(eval_step(restored.params, batch))
            totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
        metrics = {k: float(v) for k, v in jax.device_get(self.summarize(totals)).items()}
        del metrics["tokens"]
        examples = totals["examples"] if "examples" in totals else totals["nsp_examples"]
        report: dict[str, Any] = {
            "task": self.name,
            "split": split,
            "step": restored.step,
            "checkpoint": restored.description,
            "examples": int(examples),
            **metrics,
            **self.report_extras(),
        }
        outdir = self.outdir(outdir)
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, report_stem(split, restored) + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(
            f"{split} ({report['examples']} examples, {restored.description}): {shown}\n"
            f"wrote {path}"
        )
        return report
