"""The best dev evaluation so far, and early stopping (train.keep_best, train.patience).

Decisions only, no files: the loop passes each dev record through ``after_evaluation``
and stops once ``patience_spent``; each checkpoint carries the ``Best`` of its step in its
metadata (``to_meta``, ``meta["best"]``), so that a resumed run goes on from the same best
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

# Dev metrics where lower is better, besides any name ending in "_loss" (mlm_loss, ...).
LOWER_IS_BETTER = ("loss", "nll", "perplexity")


@dataclasses.dataclass(frozen=True)
class Best:
    """The best dev evaluation by ``metric`` so far, and the evaluations since it."""

    metric: str  # train.keep_best: a key of the dev records, e.g. bleu or loss
    step: int | None = None  # the step of the best evaluation; None: none yet
    value: float | None = None  # its metric
    evals_since: int = 0  # evaluations since the best (or since the start), none better


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


def to_meta(best: Best) -> dict[str, Any]:
    """The checkpoint metadata entry ``meta["best"]``: metric, step, value, evals_since."""
    return dataclasses.asdict(best)


def from_meta(meta: dict[str, Any] | None, metric: str) -> tuple[Best, str | None]:
    """The best that a resumed run goes on from: that of its checkpoint's metadata if it
    was chosen by the same ``metric``, else none yet; and, where the checkpoint's was by
    another metric, the console line that says the best is chosen anew."""
    saved = (meta or {}).get("best")
    if not saved:
        return Best(metric), None
    if saved.get("metric") != metric:
        return Best(metric), (
            f"train.keep_best is now {metric} (the checkpoint's best was by "
            f"{saved.get('metric')}): the best checkpoint is chosen anew from the next "
            "evaluation"
        )
    return Best(
        metric,
        step=saved.get("step"),
        value=saved.get("value"),
        evals_since=int(saved.get("evals_since", 0)),
    ), None
