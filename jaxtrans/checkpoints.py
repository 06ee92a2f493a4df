"""Orbax checkpoints of a workdir: ``DIR/checkpoints/<step>/``.

Each checkpoint holds four items, so that evaluation can restore the parameters alone:
``params``; ``training`` (optimizer state, dropout key); ``meta`` (JSON by process 0: step,
model shape, skipped steps); ``data``, each process's data iterator state in a file of its
own (jaxtrans.process_json; older checkpoints had process 0's in ``meta["data"]``).
Orbax writes into a temporary directory and renames it when complete, so a crash
mid-write never leaves a checkpoint that looks complete. A checkpoint that is damaged or
holds another model restores as ``CheckpointUnreadable``; any other error while restoring
is a bug and is raised as it is. A writer keeps the newest K checkpoints and, outside that
rotation, the one its saves name (the best dev evaluation, train.keep_best). Which
checkpoint ``--checkpoint`` names, and its parameters: jaxtrans.checkpoint_choice.
"""

import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import traceback
import warnings
from types import TracebackType
from typing import Any

import jax
import orbax.checkpoint as ocp

from jaxtrans.errors import describe
from jaxtrans.process_json import ProcessJsonRestore, ProcessJsonSave

CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)


# ------------------------------------------------------------ what a failed operation leaves

# When one TensorStore read or write of a checkpoint fails, orbax raises that error (the
# callers report it in one line) and closes its event loop, abandoning the sibling reads
# and writes it had started. They finish later, and Python reports each one as it goes:
# TensorStore's callbacks into the closed loop ("Event loop is closed"), orbax coroutines
# that raise as they are collected ("Exception ignored in: <coroutine ...>"), tasks that
# nobody awaits any more ("Task exception was never retrieved", "Task was destroyed but it
# is pending!") and coroutines that never started ("coroutine ... was never awaited"):
# dozens of tracebacks that say nothing the one line does not. _AbandonedWork drops exactly
# those, recognised by where they come from (orbax's code, or a TensorStore future), and
# passes every other report on. It is installed while an operation of ours runs (an async
# write runs until the next save, wait or close) and removed when the last one ends well;
# after a failure it stays, because the abandoned work reports whenever it is collected,
# often only at exit.
_ORBAX_DIR = os.path.dirname(os.path.dirname(os.path.abspath(ocp.__file__))) + os.sep


def _is_tensorstore_future(value: Any) -> bool:
    return type(value).__module__.startswith("tensorstore") and type(value).__name__ == "Future"


# TensorStore raises its errors from C++ as "CODE: ..." with no Python frames to trace.
_TENSORSTORE_STATUS = re.compile(
    r"(OUT_OF_RANGE|NOT_FOUND|DATA_LOSS|FAILED_PRECONDITION|INVALID_ARGUMENT|UNKNOWN|"
    r"INTERNAL|CANCELLED|ABORTED|UNAVAILABLE|RESOURCE_EXHAUSTED): .*(OCDBT|TensorStore|"
    r"tensorstore|zarr|local file)",
    re.S,
)


def _is_tensorstore_status(error: BaseException) -> bool:
    """An error TensorStore set on a future of an abandoned read (after a failure only)."""
    return bool(_TENSORSTORE_STATUS.match(str(error)))


def _is_from_orbax(tb: TracebackType | None) -> bool:
    """Whether a traceback runs through orbax's code or waits for a TensorStore future
    (asyncio's frames hold it: ``call_soon_threadsafe``'s arguments, ``_wrap_awaitable``'s
    awaitable)."""
    for frame, _ in traceback.walk_tb(tb):
        if frame.f_code.co_filename.startswith(_ORBAX_DIR):
            return True
        for value in frame.f_locals.values():
            if any(map(_is_tensorstore_future, value if type(value) is tuple else (value,))):
                return True
    return False


class _AbandonedWork(logging.Filter):
    """Drops the reports of what failed orbax operations abandoned (see above): a
    ``sys.unraisablehook``, a filter of the asyncio logger, and the report of coroutines
    never awaited (``warnings._warn_unawaited_coroutine``), each passing on what is not
    orbax's."""

    def __init__(self):
        super().__init__()
        self.running = 0  # our orbax operations running now
        self.failed = False  # one failed: what it abandoned may report at any time
        self.previous_hook = self.previous_unawaited = None

    def begin(self) -> None:
        if self.running == 0 and not self.failed:
            self.previous_hook = sys.unraisablehook
            sys.unraisablehook = self.unraisable
            logging.getLogger("asyncio").addFilter(self)
            self.previous_unawaited = getattr(warnings, "_warn_unawaited_coroutine", None)
            if self.previous_unawaited is not None:
                warnings._warn_unawaited_coroutine = self.unawaited
        self.running += 1

    def end(self, failed: bool) -> None:
        self.running -= 1
        self.failed = self.failed or failed
        if self.running == 0 and not self.failed:
            if sys.unraisablehook == self.unraisable:  # else someone replaced it since
                sys.unraisablehook = self.previous_hook
            logging.getLogger("asyncio").removeFilter(self)
            if self.previous_unawaited is not None:
                warnings._warn_unawaited_coroutine = self.previous_unawaited

    # Each report is dropped only if it is known to be orbax's; a check that fails (late in
    # the interpreter's exit, say) lets it through.

    def unraisable(self, report) -> None:
        try:
            code = getattr(report.object, "cr_code", None)  # a coroutine being collected
            orbax = (code and code.co_filename.startswith(_ORBAX_DIR)) or _is_from_orbax(
                report.exc_traceback
            )
        except Exception:
            orbax = False
        if not orbax:
            self.previous_hook(report)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            error = record.exc_info[1] if record.exc_info else None
            # "Task was destroyed but it is pending!" names the coroutine and its file.
            return not (
                (error and _is_from_orbax(error.__traceback__))
                or _ORBAX_DIR in record.getMessage()
                or (self.failed and error is not None and _is_tensorstore_status(error))
            )
        except Exception:
            return True

    def unawaited(self, coroutine) -> None:
        try:
            orbax = coroutine.cr_code.co_filename.startswith(_ORBAX_DIR)
        except Exception:
            orbax = False
        if not orbax:
            self.previous_unawaited(coroutine)


_abandoned_work = _AbandonedWork()


@contextlib.contextmanager
def _operation():
    """An orbax read or write; what it abandons if it fails is not reported."""
    _abandoned_work.begin()
    try:
        yield
    except BaseException:
        _abandoned_work.end(failed=True)
        raise
    _abandoned_work.end(failed=False)


# ------------------------------------------------------------------------ restore errors

# What orbax and TensorStore raise when a checkpoint's files are missing, cut short or
# garbled, or when it holds another model's parameters
# (tests/unit/training/test_checkpoints.py damages checkpoints to find them). Any other
# error while restoring is a bug, ours or orbax's.
_TENSORSTORE_DAMAGE = re.compile(r"(NOT_FOUND|OUT_OF_RANGE|DATA_LOSS|FAILED_PRECONDITION): ")
_ANOTHER_MODEL = (
    "is not compatible with the stored shape",  # a parameter of another shape
    "Structure mismatch",  # parameters the checkpoint lacks
    "tree structures do not match",  # parameters we lack
)
_MISSING_ITEM = "was not found in the checkpoint"  # KeyError: e.g. the params/ directory
_ORBAX_METADATA = os.path.join(_ORBAX_DIR, "checkpoint", "_src", "metadata", "")  # its JSON


def _is_damaged_or_foreign(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, says that the checkpoint is
    damaged or another model's."""
    while error is not None:
        message = str(error)
        if isinstance(error, OSError | json.JSONDecodeError | UnicodeDecodeError):
            return True  # a file missing or unreadable; JSON metadata cut short or garbled
        if isinstance(error, ValueError) and (
            _TENSORSTORE_DAMAGE.match(message) or any(m in message for m in _ANOTHER_MODEL)
        ):
            return True
        if isinstance(error, KeyError) and _MISSING_ITEM in message:
            return True
        if any(
            f.filename.startswith(_ORBAX_METADATA)
            for f in traceback.extract_tb(error.__traceback__)
        ):
            return True  # orbax's reader of metadata files found one of the wrong form
        error = error.__cause__
    return False


class CheckpointUnreadable(Exception):
    """Checkpoint ``step`` cannot be restored: its files are missing, cut short or garbled,
    or it holds another model's parameters. ``__cause__``: orbax's or TensorStore's error."""

    def __init__(self, step: int, error: Exception):
        super().__init__(f"checkpoint {step}: {describe(error)}")
        self.step = step


@contextlib.contextmanager
def _restoring(step: int):
    """An orbax read of checkpoint ``step``; damage becomes CheckpointUnreadable, any other
    error is raised as it is."""
    with _operation():
        try:
            yield
        except Exception as error:
            if _is_damaged_or_foreign(error):
                raise CheckpointUnreadable(step, error) from error
            raise


# ----------------------------------------------------------------------------- checkpointer


@dataclasses.dataclass
class _KeptStep(ocp.checkpoint_managers.PreservationPolicy):
    """An orbax preservation policy: the checkpoint of ``step`` (None: none) is kept."""

    step: int | None = None

    def should_preserve(self, checkpoints, *, context) -> list[bool]:
        return [info.step == self.step for info in checkpoints]


class Checkpointer:
    """Save and restore training checkpoints of one workdir (async; keeps the last K, and
    the one each save names to keep)."""

    def __init__(self, workdir: str, keep: int = 5, async_save: bool = True, read_only=False):
        # Orbax asks the policy which checkpoints stay while save() runs, in this thread,
        # and deletes the others once the new checkpoint is complete.
        self.kept = _KeptStep()
        newest = ocp.checkpoint_managers.LatestN(None if read_only else keep)
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy([newest, self.kept]),
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
        self.async_save = async_save
        self.writing = False  # an async write may still run in orbax's background thread

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(
        self, step: int, params, opt_state, rng, meta: dict[str, Any], kept: int | None = None
    ) -> bool:
        """Start writing checkpoint ``step`` (returns at once when async); ``meta["data"]``
        (this process's data iterator state) goes to the ``data`` item. ``kept``: a step
        whose checkpoint stays beyond the newest K (the best), until a save names another."""
        self.kept.step = kept
        meta = dict(meta)
        items = {"data": ProcessJsonSave(meta.pop("data"))} if "data" in meta else {}
        args = ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            training=ocp.args.StandardSave({"opt_state": opt_state, "rng": rng}),
            meta=ocp.args.JsonSave(meta),
            **items,
        )
        with _operation():
            self._write_finishes()  # orbax waits for the previous write first
            saved = self.manager.save(step, args=args, force=True)
        if self.async_save:
            _abandoned_work.begin()  # until wait(), close() or the next save()
            self.writing = True
        return saved

    def _write_finishes(self) -> None:
        """Called inside an operation that waits for the async write: its end (or its
        failure, which that operation raises) belongs to that operation."""
        if self.writing:
            self.writing = False
            _abandoned_work.end(failed=False)

    def restore_meta(self, step: int) -> dict[str, Any]:
        with _restoring(step):
            restored = self.manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )
        return restored["meta"]

    def restore(self, step: int, abstract_params, abstract_opt_state, abstract_rng):
        """Restore the training items of ``step`` onto the shardings of the abstract trees:
        (params, opt_state, rng, meta), ``meta["data"]`` the data iterator states of every
        process of the saving run in process order (an older checkpoint: process 0's)."""
        has_data = os.path.isdir(os.path.join(str(self.manager.directory), str(step), "data"))
        training = {"opt_state": abstract_opt_state, "rng": abstract_rng}
        args = ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_params),
            training=ocp.args.StandardRestore(training),
            meta=ocp.args.JsonRestore(),
            **({"data": ProcessJsonRestore()} if has_data else {}),
        )
        with _restoring(step):
            restored = self.manager.restore(step, args=args)
        training, meta = restored["training"], dict(restored["meta"])
        meta["data"] = restored["data"] if has_data else meta.get("data") and [meta["data"]]
        return restored["params"], training["opt_state"], training["rng"], meta

    def restore_params(self, step: int, abstract_params):
        """Leaves without a sharding go where they were saved, or onto this process's first
        device if those devices are not here (a checkpoint of a multi-host run)."""
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        restore = ocp.args.StandardRestore(abstract_params, fallback_sharding=device)
        args = ocp.args.Composite(params=restore)
        with _restoring(step):
            return self.manager.restore(step, args=args)["params"]

    def wait(self) -> None:
        with _operation():  # an async write's failure surfaces here
            self._write_finishes()
            self.manager.wait_until_finished()

    def close(self) -> None:
        with _operation():
            self._write_finishes()
            self.manager.close()
