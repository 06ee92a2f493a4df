"""The checkpoint of a workdir that ``--checkpoint`` names, and its parameters.

    latest    the newest complete checkpoint
    best      the best dev evaluation by train.keep_best: the step that the newest
              checkpoint's metadata names (``CheckpointMeta.best``, written by the training loop,
              jaxtrans.training.best); that checkpoint is kept out of the rotation
    N         the checkpoint of step N
    avg:K     the mean of the newest K checkpoints (as the paper averages the last 5)

evaluate.py, ``python -m jaxtrans.export``, ``Translator.load`` and every task's
``restore_params`` read parameters through ``restore_params`` here.
"""

import os
import re
from typing import Any

import jax
import numpy as np

from jaxtrans.errors import UserError, describe
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer, CheckpointUnreadable, checkpoint_dir


def parse_checkpoint_spec(spec: str) -> tuple[str, int]:
    """'latest' -> ('latest', 0); 'best' -> ('best', 0); '1200' -> ('step', 1200);
    'avg:5' -> ('avg', 5)."""
    spec = spec.strip()
    if spec in ("latest", "best"):
        return spec, 0
    if re.fullmatch(r"\d+", spec):
        return "step", int(spec)
    match = re.fullmatch(r"avg:(\d+)", spec)
    if match and int(match.group(1)) >= 1:
        return "avg", int(match.group(1))
    raise UserError(
        f"--checkpoint {spec!r} is not understood; use latest, best, a step number, or avg:K"
    )


def best_step(meta: CheckpointMeta, workdir: str, steps: list[int]) -> tuple[int, str]:
    """The best checkpoint's step that the newest checkpoint's metadata ``meta`` names, and
    its description (``step 40 (best dev bleu 23.1)``); a UserError where there is none."""
    best = meta.best
    if best is None or best.step is None:
        why = (
            "has not been evaluated yet"
            if best
            else "was trained without train.keep_best (or before it kept one)"
        )
        raise UserError(
            f"--checkpoint best: {workdir} has no best checkpoint, its run {why}; use "
            "latest, a step number or avg:K"
        )
    step = best.step
    if step not in steps:
        raise UserError(
            f"--checkpoint best: the best checkpoint of {workdir}, step {step}, is missing; "
            f"choose another with --checkpoint (steps: {', '.join(map(str, steps))})"
        )
    return step, f"step {step} (best dev {best.metric} {best.value:.4g})"


def restore_params(workdir: str, abstract_params, spec: str = "latest") -> tuple[Any, int, str]:
    """Parameters of a workdir's checkpoint ``spec``: latest, best, a step, or avg:K (see
    the module's docstring).

    Returns (params, step, description); the step is the newest one used.
    """
    kind, value = parse_checkpoint_spec(spec)
    if not os.path.isdir(checkpoint_dir(workdir)):
        raise UserError(f"{workdir}: no checkpoints found; train first or check --workdir")
    checkpointer = Checkpointer(workdir, read_only=True)
    steps = checkpointer.all_steps()
    if not steps:
        raise UserError(f"{workdir}: no complete checkpoint found; train first or check --workdir")
    description = None
    if kind == "latest":
        chosen = [steps[-1]]
    elif kind == "step":
        if value not in steps:
            raise UserError(
                f"{workdir}: no checkpoint at step {value}; available steps: "
                f"{', '.join(map(str, steps))}"
            )
        chosen = [value]
    elif kind == "avg":
        if value > len(steps):
            raise UserError(
                f"--checkpoint avg:{value} needs {value} checkpoints but {workdir} has "
                f"{len(steps)}; use a smaller K"
            )
        chosen = steps[-value:]
    total = None
    try:
        if kind == "best":
            step, description = best_step(checkpointer.restore_meta(steps[-1]), workdir, steps)
            chosen = [step]
        for step in chosen:
            params = checkpointer.restore_params(step, abstract_params)
            params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
            total = params if total is None else jax.tree.map(np.add, total, params)
    except CheckpointUnreadable as error:
        others = [s for s in steps if s != error.step]
        raise UserError(
            f"{workdir}: checkpoint {error.step} cannot be restored, it is damaged or from "
            f"another model ({describe(error)}); "
            + (
                f"choose another with --checkpoint (steps: {', '.join(map(str, others))})"
                if others
                else "check --workdir"
            )
        ) from error
    finally:
        checkpointer.close()
    dtypes = jax.tree.map(lambda a: a.dtype, abstract_params)
    averaged = jax.tree.map(lambda x, dt: (x / len(chosen)).astype(dt), total, dtypes)
    if description is None:
        description = f"step {chosen[0]}" if len(chosen) == 1 else f"average of steps {chosen}"
    return averaged, chosen[-1], description
