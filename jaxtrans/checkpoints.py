"""Orbax checkpoints of a workdir: ``DIR/checkpoints/<step>/``.

Each checkpoint holds three items, so that evaluation can restore the parameters alone:
``params``; ``training`` (the optimizer state and the base dropout key data); and ``meta``
(JSON: step, the data iterator state, and the model shape it was trained with).
Orbax writes into a temporary directory and renames it when complete, so a crash
mid-write never leaves a checkpoint that looks complete.
"""

import contextlib
import logging
import os
import re
import sys
import traceback
import warnings
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxtrans.errors import UserError, describe

CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)


# When one TensorStore read or write of a checkpoint fails, orbax raises that error (which
# the caller reports in one line) and abandons the sibling reads or writes it had started.
# Those finish later with errors of their own and Python prints each one whenever it
# collects it ("Exception ignored in <coroutine ...>", "Task exception was never
# retrieved", "coroutine ... was never awaited", callbacks into orbax's closed event
# loop): dozens of tracebacks that say nothing more. While an operation of ours runs, and
# for good once one has failed, drop exactly those reports.
_quiet = False


def _abandoned(unraisable) -> bool:
    error, source = unraisable.exc_value, unraisable.object
    closed_loop = isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
    return closed_loop or (_quiet and hasattr(source, "cr_code"))  # a dropped coroutine


class _AbandonedFutures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # asyncio: "Future exception ...", "Task exception ...", "_GatheringFuture ..."
        never_retrieved = "exception was never retrieved" in str(record.msg)
        exc = record.exc_info[1] if record.exc_info else None
        orbax = exc is not None and any(
            "orbax" in frame.filename for frame in traceback.extract_tb(exc.__traceback__)
        )
        return not (never_retrieved and (orbax or _quiet))


def _quiet_abandoned_operations() -> None:
    previous = sys.unraisablehook
    if getattr(previous, "jaxtrans_quiet", False):
        return

    def hook(unraisable) -> None:
        if not _abandoned(unraisable):
            previous(unraisable)

    hook.jaxtrans_quiet = True
    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(_AbandonedFutures())


@contextlib.contextmanager
def _operation():
    """A checkpoint read or write; if it fails, what it abandoned is not reported."""
    global _quiet
    _quiet = True
    try:
        yield
    except BaseException:
        # Stay quiet: what the operation abandoned reports later, at any time, also as
        # warnings about its coroutines (never awaited once their loop is gone).
        warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)
        raise
    _quiet = False


class Checkpointer:
    """Save and restore training checkpoints of one workdir (async, keeps the last K)."""

    def __init__(self, workdir: str, keep: int = 5, async_save: bool = True, read_only=False):
        _quiet_abandoned_operations()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else keep,
            save_interval_steps=0 if read_only else 1,
            enable_async_checkpointing=async_save,
            create=not read_only,
            read_only=read_only,
            # A writer removes what a killed writer left half-written (the training loop
            # holds the workdir lock, so no other writer is at work).
            cleanup_tmp_directories=not read_only,
        )
        # orbax warns that a read-only manager is read-only; keep stderr for real problems.
        absl_logger = logging.getLogger("absl")
        level = absl_logger.level
        if read_only:
            absl_logger.setLevel(logging.ERROR)
        try:
            self.manager = ocp.CheckpointManager(checkpoint_dir(workdir), options=options)
        finally:
            absl_logger.setLevel(level)

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, params, opt_state, rng, meta: dict[str, Any]) -> bool:
        """Start writing checkpoint ``step`` (returns at once when async)."""
        args = ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            training=ocp.args.StandardSave({"opt_state": opt_state, "rng": rng}),
            meta=ocp.args.JsonSave(meta),
        )
        with _operation():
            return self.manager.save(step, args=args, force=True)

    def restore_meta(self, step: int) -> dict[str, Any]:
        with _operation():
            restored = self.manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )
        return restored["meta"]

    def restore(self, step: int, abstract_params, abstract_opt_state, abstract_rng):
        """Restore the training items of ``step`` onto the shardings of the abstract trees."""
        args = ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_params),
            training=ocp.args.StandardRestore(
                {"opt_state": abstract_opt_state, "rng": abstract_rng}
            ),
            meta=ocp.args.JsonRestore(),
        )
        with _operation():
            restored = self.manager.restore(step, args=args)
        training = restored["training"]
        return restored["params"], training["opt_state"], training["rng"], restored["meta"]

    def restore_params(self, step: int, abstract_params):
        args = ocp.args.Composite(params=ocp.args.StandardRestore(abstract_params))
        with _operation():
            return self.manager.restore(step, args=args)["params"]

    def wait(self) -> None:
        with _operation():  # an async write's failure surfaces here
            self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def parse_checkpoint_spec(spec: str) -> tuple[str, int]:
    """'latest' -> ('latest', 0); '1200' -> ('step', 1200); 'avg:5' -> ('avg', 5)."""
    spec = spec.strip()
    if spec == "latest":
        return "latest", 0
    if re.fullmatch(r"\d+", spec):
        return "step", int(spec)
    match = re.fullmatch(r"avg:(\d+)", spec)
    if match and int(match.group(1)) >= 1:
        return "avg", int(match.group(1))
    raise UserError(f"--checkpoint {spec!r} is not understood; use latest, a step number, or avg:K")


def restore_params(workdir: str, abstract_params, spec: str = "latest") -> tuple[Any, int, str]:
    """Parameters of a workdir's checkpoint: ``latest``, a step, or ``avg:K`` (the mean of the
    last K checkpoints, as the paper averages the last 5).

    Returns (params, step, description); the step is the newest one used.
    """
    kind, value = parse_checkpoint_spec(spec)
    if not os.path.isdir(checkpoint_dir(workdir)):
        raise UserError(f"{workdir}: no checkpoints found; train first or check --workdir")
    checkpointer = Checkpointer(workdir, read_only=True)
    steps = checkpointer.all_steps()
    if not steps:
        raise UserError(f"{workdir}: no complete checkpoint found; train first or check --workdir")
    if kind == "latest":
        chosen = [steps[-1]]
    elif kind == "step":
        if value not in steps:
            raise UserError(
                f"{workdir}: no checkpoint at step {value}; available steps: "
                f"{', '.join(map(str, steps))}"
            )
        chosen = [value]
    else:
        if value > len(steps):
            raise UserError(
                f"--checkpoint avg:{value} needs {value} checkpoints but {workdir} has "
                f"{len(steps)}; use a smaller K"
            )
        chosen = steps[-value:]
    try:
        total = None
        for step in chosen:
            params = checkpointer.restore_params(step, abstract_params)
            params = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
            total = params if total is None else jax.tree.map(np.add, total, params)
    except Exception as error:  # orbax and TensorStore report damage with many types
        others = [s for s in steps if s != step]
        raise UserError(
            f"{workdir}: checkpoint {step} cannot be restored, it is damaged or from another "
            f"model ({describe(error)}); "
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
    description = f"step {chosen[0]}" if len(chosen) == 1 else f"average of steps {chosen}"
    return averaged, chosen[-1], description
