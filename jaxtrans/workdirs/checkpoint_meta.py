"""What a checkpoint says of itself: its ``meta`` item, one JSON object that process 0
writes beside the parameters (DIR/checkpoints/<step>/meta/), read when a run resumes and
by ``--checkpoint best``.

    meta = CheckpointMeta(step=40, model={...}, skipped_steps=1, best=Best("bleu", 30, 23.1))
    meta.to_json()                  # the object saved: every field but ``data``
    CheckpointMeta.from_json(obj)   # any checkpoint's, older ones included

Every field a checkpoint holds is here, once: a change of what a checkpoint holds is a
field of CheckpointMeta (and where the loop fills it in, and where a resumed run reads it).
Fields an older checkpoint did not write take the value that held when it was written: no
skipped steps, the threefry dropout key, no best, no fitted schedule. ``data``, every
process's data position, is not in this JSON object but in the checkpoint's ``data`` item
(jaxtrans.workdirs.process_json); checkpoints written before that item have process 0's
position in the object's ``data`` key, read here as a list of one.
"""

import dataclasses
from typing import Any

# The dropout key's generator of a checkpoint that does not name one (before the choice).
OLDER_DROPOUT_RNG_IMPL = "threefry"


@dataclasses.dataclass(frozen=True)
class Best:
    """The best dev evaluation by ``metric`` so far, and the evaluations since it
    (train.keep_best, train.patience; the decisions: jaxtrans.training.best)."""

    metric: str  # train.keep_best: a key of the dev records, e.g. bleu or loss
    step: int | None = None  # the step of the best evaluation; None: none yet
    value: float | None = None  # its metric
    evals_since: int = 0  # evaluations since the best (or since the start), none better


@dataclasses.dataclass(frozen=True)
class CheckpointMeta:
    """The metadata of checkpoint ``step``."""

    step: int  # the train step the checkpoint holds the state after
    # The model's shape fields (the task's shape_fields of config.model), as the run had them.
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    skipped_steps: int = 0  # steps whose update was skipped (train.on_nonfinite=skip)
    dropout_rng_impl: str = OLDER_DROPOUT_RNG_IMPL  # the generator of the saved dropout key
    # The schedule's length a time-budgeted run fitted on its first start (None: not fitted).
    schedule_steps: int | None = None
    best: Best | None = None  # the best dev evaluation so far (train.keep_best; None: not kept)
    # The data iterator's position, in the checkpoint's data item (not in the JSON object):
    # saved, this process's state; restored, every process's of the saving run, in process
    # order (a list; None: the checkpoint has none).
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the checkpoint's meta item: every field but ``data``, and of
        the optional ones only those that are set."""
        saved = {
            "step": self.step,
            "model": dict(self.model),
            "skipped_steps": self.skipped_steps,
            "dropout_rng_impl": self.dropout_rng_impl,
        }
        if self.schedule_steps is not None:
            saved["schedule_steps"] = self.schedule_steps
        if self.best is not None:
            saved["best"] = dataclasses.asdict(self.best)
        return saved

    @classmethod
    def from_json(
        cls, saved: dict[str, Any], step: int | None = None, data: list[Any] | None = None
    ) -> "CheckpointMeta":
        """The metadata of a checkpoint's meta object ``saved`` (any version's), of
        checkpoint ``step`` where the object names none; ``data``: the states of the
        checkpoint's data item (None: it has none, so the object's own ``data``, process
        0's of an older checkpoint, if any)."""
        if data is None and saved.get("data"):
            data = [saved["data"]]
        best = saved.get("best")
        schedule_steps = saved.get("schedule_steps")
        return cls(
            step=int(saved.get("step", step)),
            model=dict(saved.get("model") or {}),
            skipped_steps=int(saved.get("skipped_steps", 0)),
            dropout_rng_impl=saved.get("dropout_rng_impl", OLDER_DROPOUT_RNG_IMPL),
            schedule_steps=None if schedule_steps is None else int(schedule_steps),
            best=_best(best) if best else None,
            data=None if data is None else list(data),
        )


def _best(saved: dict[str, Any]) -> Best:
    step, value = saved.get("step"), saved.get("value")
    return Best(
        saved.get("metric", ""),
        step=None if step is None else int(step),
        value=None if value is None else float(value),
        evals_since=int(saved.get("evals_since", 0)),
    )
