"""Orbax checkpoints of a workdir: ``DIR/checkpoints/<step>/``.

Each checkpoint holds four items, so that evaluation can restore the parameters alone:
``params``; ``training`` (optimizer state, dropout key); ``meta`` (JSON by process 0: step,
model shape, skipped steps, ...: jaxtrans.workdirs.checkpoint_meta); ``data``, each
process's data iterator state in a file of its own (jaxtrans.workdirs.process_json; older
checkpoints had process 0's in their meta).
Orbax writes into a temporary directory and renames it when complete, so a crash
mid-write never leaves a checkpoint that looks complete. A checkpoint that is damaged or
holds another model restores as ``CheckpointUnreadable``; any other error while restoring
is a bug and is raised as it is. A writer keeps the newest K checkpoints and, outside that
rotation, the one its saves name (the best dev evaluation, train.keep_best); it deletes
older checkpoints only after checking that the newest is complete on disk, and a commit
that did not happen raises ``CheckpointNotWritten``. Which checkpoint ``--checkpoint``
names, and its parameters: jaxtrans.workdirs.checkpoint_choice. What failed orbax operations leave
behind: jaxtrans.workdirs.orbax_reports.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import re
import traceback

import jax
import orbax.checkpoint as ocp

from jaxtrans.errors import describe
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.orbax_reports import ORBAX_DIR, abandoned_work, operation
from jaxtrans.workdirs.process_json import ProcessJsonRestore, ProcessJsonSave

CHECKPOINT_DIR = "checkpoints"


def checkpoint_dir(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), CHECKPOINT_DIR)


# ------------------------------------------------------------------------ restore errors

# What orbax and TensorStore raise when a checkpoint's files are missing, cut short or
# garbled, or when it holds another model's parameters
# (tests/unit/workdirs/test_checkpoints.py damages checkpoints to find them). Any other
# error while restoring is a bug, ours or orbax's.
_TENSORSTORE_DAMAGE = re.compile(r"(NOT_FOUND|OUT_OF_RANGE|DATA_LOSS|FAILED_PRECONDITION): ")
_ANOTHER_MODEL = (
    "is not compatible with the stored shape",  # a parameter of another shape
    "Structure mismatch",  # parameters the checkpoint lacks
    "tree structures do not match",  # parameters we lack
)
_MISSING_ITEM = "was not found in the checkpoint"  # KeyError: e.g. the params/ directory
_ORBAX_METADATA = os.path.join(ORBAX_DIR, "checkpoint", "_src", "metadata", "")  # its JSON


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
    with operation(reading=True):
        try:
            yield
        except Exception as error:
            if _is_damaged_or_foreign(error):
                raise CheckpointUnreadable(step, error) from error
            raise


# ----------------------------------------------------------------------------- checkpointer


class CheckpointNotWritten(Exception):
    """Orbax reported checkpoint ``step`` saved, but its directory is not a complete
    checkpoint (orbax 0.12.8 takes a commit that was cancelled for a clean cancellation: it
    records no error and never renames the temporary directory). ``found``: what the
    checkpoint directory holds of that step."""

    def __init__(self, step: int, found: list[str]):
        held = ", ".join(found) or "nothing"
        super().__init__(f"checkpoint {step} was not completed (the directory holds {held})")
        self.step = step


# What orbax raises, or takes for a clean stop, when a commit is cancelled.
_CANCELLED = (concurrent.futures.CancelledError, asyncio.CancelledError)


@dataclasses.dataclass(frozen=True)
class _Written:
    """A save whose commit is not yet verified: its step, items, and the step it keeps
    beyond the newest K (None: none)."""

    step: int
    items: tuple[str, ...]
    kept: int | None


class Checkpointer:
    """Save and restore training checkpoints of one workdir (async; keeps the last K, and
    the one each save names to keep).

    Each commit is verified once orbax says it is done (at the next save, wait or close):
    the step's directory is finalized (renamed from orbax's temporary directory) and holds
    every item, else CheckpointNotWritten. Orbax's own rotation is off (it deletes old
    steps even when the new commit did not happen); older checkpoints are deleted here,
    only after the newest one is verified."""

    def __init__(self, workdir: str, keep: int = 5, async_save: bool = True, read_only=False):
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.LatestN(None),  # keep all: see above
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
        self.keep = keep
        self.async_save = async_save
        self.writing = False  # an async write may still run in orbax's background thread
        self.unverified: _Written | None = None  # the last save, until its commit is checked

    def _is_complete(self, step: int, items: tuple[str, ...] = ()) -> bool:
        """Whether checkpoint ``step`` is finalized on disk (orbax's own test: renamed from
        its temporary directory, or a commit_success file where renames are not atomic) and
        holds ``items``."""
        path = os.path.join(str(self.manager.directory), str(step))
        return ocp.path.step.is_checkpoint_finalized(path) and all(
            os.path.isdir(os.path.join(path, item)) for item in items
        )

    def all_steps(self) -> list[int]:
        """The steps of the complete checkpoints, oldest first."""
        return [s for s in sorted(self.manager.all_steps()) if self._is_complete(s)]

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step (None: none)."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(
        self, step: int, params, opt_state, rng, meta: CheckpointMeta, kept: int | None = None
    ) -> bool:
        """Start writing checkpoint ``step`` (returns at once when async); ``meta.data``
        (this process's data iterator state) goes to the ``data`` item. ``kept``: a step
        whose checkpoint stays beyond the newest K (the best), until a save names another.
        Raises CheckpointNotWritten if the previous save's commit did not happen."""
        items = {"data": ProcessJsonSave(meta.data)} if meta.data is not None else {}
        args = ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            training=ocp.args.StandardSave({"opt_state": opt_state, "rng": rng}),
            meta=ocp.args.JsonSave(meta.to_json()),
            **items,
        )
        with operation():
            self._write_finishes()
            self.manager.wait_until_finished()  # the previous write's failure surfaces here
            self._verify_and_rotate()
            self.unverified = _Written(step, tuple(dict(args.items())), kept)
            try:
                saved = self.manager.save(step, args=args, force=True)
            except _CANCELLED:  # a synchronous commit cancelled: not written, checked below
                saved = True
            if not saved:
                self.unverified = None
            if not self.async_save:
                self._verify_and_rotate()
        if self.async_save:
            abandoned_work.begin()  # until wait(), close() or the next save()
            self.writing = True
        return saved

    def _verify_and_rotate(self) -> None:
        """Once orbax has finished the last save: check that its checkpoint is complete,
        then delete the checkpoints beyond the newest K and the one that save keeps."""
        written, self.unverified = self.unverified, None
        if written is None:
            return
        if not self._is_complete(written.step, written.items):
            directory = str(self.manager.directory)
            found = sorted(
                name
                for name in os.listdir(directory)
                if name == str(written.step) or name.startswith(f"{written.step}.")
            )
            raise CheckpointNotWritten(written.step, found)
        steps = self.all_steps()
        for step in steps[: max(len(steps) - self.keep, 0)]:
            if step != written.kept:
                self.manager.delete(step)

    def _write_finishes(self) -> None:
        """Called inside an operation that waits for the async write: its end (or its
        failure, which that operation raises) belongs to that operation."""
        if self.writing:
            self.writing = False
            abandoned_work.end(failed=False)

    def restore_meta(self, step: int) -> CheckpointMeta:
        """The metadata of checkpoint ``step``, without its data positions."""
        with _restoring(step):
            restored = self.manager.restore(
                step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
            )
        return CheckpointMeta.from_json(restored["meta"], step)

    def restore(self, step: int, abstract_params, abstract_opt_state, abstract_rng):
        """Restore the training items of ``step`` onto the shardings of the abstract trees:
        (params, opt_state, rng, meta), ``meta.data`` the data iterator states of every
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
        training = restored["training"]
        data = restored["data"] if has_data else None
        meta = CheckpointMeta.from_json(restored["meta"], step, data)
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
        """Wait for the async write and verify it (CheckpointNotWritten, or orbax's error)."""
        with operation():  # an async write's failure surfaces here
            self._write_finishes()
            self.manager.wait_until_finished()
            self._verify_and_rotate()

    def close(self) -> None:
        with operation():
            self._write_finishes()
            self.manager.wait_until_finished()
            self._verify_and_rotate()
            self.manager.close()
