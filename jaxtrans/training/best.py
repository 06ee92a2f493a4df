"""The best dev evaluation so far, and early stopping (train.keep_best, train.patience).

Decisions only, no files: the loop passes each dev record through ``after_evaluation``
and stops once ``patience_spent``; each checkpoint carries the ``Best`` of its step in its
metadata (``CheckpointMeta.best``), so that a resumed run goes on from the same best
and the same count (``from_meta``), and the checkpoint of ``Best.step`` is kept out of the
rotation of train.keep_checkpoints (jaxtrans.workdirs.checkpoints) and restored by ``--checkpoint
best`` (jaxtrans.workdirs.checkpoint_choice).

Which value is better follows from the metric's name (``lower_is_better``); a value is an
improvement only if strictly better, so of equal evaluations the first stays the best (as
fairseq and Marian count them), and a NaN never improves.
"""

import dataclasses
import math
from typing import Any

from jaxtrans.errors import UserError
from jaxtrans.workdirs.checkpoint_meta import Best, CheckpointMeta

# Dev metrics where lower is better, besides any name ending in "_loss" (mlm_loss, ...).
LOWER_IS_BETTER = ("loss", "nll", "perplexity")


__all__ = ["Best", "after_evaluation", "describe_patience", "from_meta", "patience_spent"]


def lower_is_better(metric: str) -> bool:
    """Whether a smaller ``metric`` is better: losses, NLL, perplexity; higher otherwise
    (BLEU, chrF, accuracy, F1, exact match)."""
    return metric in LOWER_IS_BETTER or metric.endswith("_loss")


def improves(metric: str, value: float, best: float | None) -> bool:
    """Whether ``value`` of ``metric`` is strictly better than ``best`` (None: no best yet,
    so any finite value is); a NaN never improves."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value < best if lower_is_better(metric) else value > best


def metric_value(metric: str, record: dict[str, Any] | None) -> float:
    """``record[metric]`` of a dev record (None: the run has no dev evaluation) as a float;
    a UserError naming the metrics the record has where it lacks this one."""
    value = None if record is None else record.get(metric)
    if isinstance(value, bool) or not isinstance(value, int | float):
        if not record:
            raise UserError(
                f"--config.train.keep_best={metric!r}: this run has no dev evaluation (no dev "
                "split); set --config.train.keep_best='' or give the run a dev split"
            )
        names = ", ".join(k for k, v in record.items() if isinstance(v, float))
        raise UserError(
            f"--config.train.keep_best={metric!r}: the dev evaluation reports no {metric}; "
            f"use one of {names}"
        )
    return float(value)


def after_evaluation(best: Best, step: int, record: dict[str, Any] | None) -> Best:
    """The best so far once the dev evaluation of ``step`` gave ``record``: that step if it
    improves on the best, else the same best one evaluation older."""
    value = metric_value(best.metric, record)
    if improves(best.metric, value, best.value):
        return Best(best.metric, step=step, value=value, evals_since=0)
    return dataclasses.replace(best, evals_since=best.evals_since + 1)


def patience_spent(best: Best | None, patience: int) -> bool:
    """Whether ``patience`` evaluations in a row (0: never) have not improved on the best."""
    return best is not None and patience > 0 and best.evals_since >= patience


def describe_patience(best: Best, patience: int) -> str:
    """Why ``patience`` stops the run, e.g. ``3 dev evaluations in a row did not improve on
    step 40's bleu 23.1 (train.patience=3)``."""
    if best.step is None:
        why = f"gave no finite {best.metric}"
    else:
        why = f"did not improve on step {best.step}'s {best.metric} {best.value:.4g}"
    return f"{best.evals_since} dev evaluations in a row {why} (train.patience={patience})"


def from_meta(meta: CheckpointMeta | None, metric: str) -> tuple[Best, str | None]:
    """The best that a resumed run goes on from: that of its checkpoint's metadata if it
    was chosen by the same ``metric``, else none yet; and, where the checkpoint's was by
    another metric, the console line that says the best is chosen anew."""
    saved = None if meta is None else meta.best
    if saved is None:
        return Best(metric), None
    if saved.metric != metric:
        return Best(metric), (
            f"train.keep_best is now {metric} (the checkpoint's best was by "
            f"{saved.metric}): the best checkpoint is chosen anew from the next evaluation"
        )
    return saved, None
