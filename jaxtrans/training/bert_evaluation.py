"""Evaluate a trained BERT workdir: held-out MLM/NSP metrics, or classification accuracy/F1.

    report = evaluate_bert_workdir("runs/sst2", split="dev")    # or "test"
    report = evaluate_bert_workdir("runs/bert_demo", split="dev", checkpoint="avg:2")

DIR/config.json says which task the run trained (``task``); the model is rebuilt from it,
the tokenizer from DIR/bert_tokenizer/ and the parameters from DIR/checkpoints (nothing
from ``init_from`` is read). The metrics are computed by the task's own ``loss_sums`` and
``summarize``, exactly as the training loop's dev evaluation does. The report goes to
DIR/eval/{split}-step{N}.json (``-avgK`` for averaged checkpoints).
"""

import json
import os
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from jaxtrans import checkpoints
from jaxtrans.errors import UserError
from jaxtrans.training.bert_tasks import BertClassificationTask, BertPretrainingTask
from jaxtrans.training.step import make_eval_step
from jaxtrans.workdir import load_run_config

TASK_CLASSES = {
    "bert_pretraining": BertPretrainingTask,
    "bert_classification": BertClassificationTask,
}


def evaluate_bert_workdir(
    workdir: str,
    *,
    split: str = "dev",
    checkpoint: str = "latest",
    outdir: str | None = None,
) -> dict[str, Any]:
    """Score ``split`` ("dev"; "test" for classification) with a checkpoint (latest, a
    step, or avg:K); print one line, write the JSON report, and return it.

    Report: task, split, step, checkpoint, examples, loss and, for pretraining,
    mlm_loss, mlm_accuracy, nsp_loss, nsp_accuracy; for classification, accuracy, f1
    (two labels only; of the second label) and labels.
    """
    run_config = load_run_config(workdir)
    name = run_config.get("task", "translation")
    if name not in TASK_CLASSES:
        raise UserError(f"{workdir} is a {name} workdir, not a BERT one; check --workdir")
    task = TASK_CLASSES[name].from_run(run_config, workdir)
    batches = task.split_batches(split)
    if not batches:
        raise UserError(f"{workdir}: its config names no {split} data to evaluate")

    abstract = jax.eval_shape(lambda: nn.unbox(task.init_params(jax.random.key(0))))
    params, step, description = checkpoints.restore_params(workdir, abstract, checkpoint)
    eval_step = jax.jit(make_eval_step(task))
    totals = None
    for batch in batches:
        sums = jax.device_get(eval_step(params, batch))
        totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
    metrics = {k: float(v) for k, v in jax.device_get(task.summarize(totals)).items()}
    del metrics["tokens"]

    report: dict[str, Any] = {
        "task": name,
        "split": split,
        "step": step,
        "checkpoint": description,
        "examples": int(totals["examples"] if "examples" in totals else totals["nsp_examples"]),
        **metrics,
    }
    if name == "bert_classification":
        report["labels"] = task.labels
    kind, count = checkpoints.parse_checkpoint_spec(checkpoint)
    stem = f"{split}-step{step}" + (f"-avg{count}" if kind == "avg" else "")
    outdir = outdir or os.path.join(workdir, "eval")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, stem + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    print(f"{split} ({report['examples']} examples, {description}): {shown}\nwrote {path}")
    return report
