"""Guards of a training run: one trainer per workdir, stop signals, finite updates.

WorkdirLock                 an exclusive lock on DIR/.lock for the whole run
StopSignal                  SIGTERM / SIGINT set a flag the loop reads once per step
wait_for_step_before_last   at most two steps in flight, so that a stop is prompt
finishing_checkpoint_writes let a checkpoint being written finish when training fails
check_finite                count skipped non-finite steps, or stop with the leaf's name
"""

import contextlib
import fcntl
import os
import signal

import jax

from jaxtrans.checkpoints import Checkpointer
from jaxtrans.errors import TrainingStopped, UserError


class WorkdirLock:
    """An exclusive lock on DIR/.lock, so that two trainings never write one workdir."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.path = os.path.join(workdir, ".lock")
        self.enabled = enabled
        self.file = None

    def __enter__(self):
        if not self.enabled:
            return self
        self.file = open(self.path, "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise UserError(
                f"{os.path.dirname(self.path)} is in use by a training run ({holder}); "
                "wait for it to finish or use another --workdir"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"pid {os.getpid()}")
        self.file.flush()
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            fcntl.flock(self.file, fcntl.LOCK_UN)
            self.file.close()


class NonFiniteError(TrainingStopped):
    """The loss or a gradient became NaN or Inf (the update was skipped, nothing saved)."""


def check_finite(pending: list[tuple[int, dict]], leaf_names: list[str], mode: str) -> int:
    """Number of skipped (non-finite) steps among ``pending``; raises in ``stop`` mode."""
    skipped = [(step, m) for step, m in pending if bool(m["nonfinite"])]
    if skipped and mode == "stop":
        step, metrics = skipped[0]
        leaf, count = int(metrics["first_nonfinite_leaf"]), len(leaf_names)
        if leaf < 0:
            what = f"the loss ({float(metrics['loss']):g})"
        elif leaf < count:
            what = f"the gradient of params{leaf_names[leaf]}"
        else:
            what = f"the updated params{leaf_names[leaf - count]}"
        raise NonFiniteError(
            f"step {step}: {what} is not finite (NaN or Inf); the update was skipped and no "
            "non-finite state was saved; lower the learning rate, or set "
            "--config.train.on_nonfinite=skip to skip such steps and go on"
        )
    return len(skipped)


class StopSignal:
    """SIGTERM / SIGINT ask the loop to save a checkpoint and stop at the next step."""

    def __init__(self):
        self.received: str | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def wait_for_step_before_last(pending: list[tuple[int, dict]]) -> None:
    """Block until the step before the newest dispatched one has run.

    JAX dispatches a step and returns at once, so a loop that only blocks when it logs
    runs up to ``log_every`` steps ahead of the device, and a stop signal then waits for
    all of them before the checkpoint. Waiting here keeps at most two steps in flight:
    the device still always has the next step queued while the host makes a batch.
    ``pending``: (step, metrics) of the steps dispatched since the last log, oldest first.
    """
    if len(pending) >= 2:
        jax.block_until_ready(pending[-2][1])


@contextlib.contextmanager
def finishing_checkpoint_writes(checkpointer: Checkpointer):
    """On an error (e.g. a non-finite loss), let a checkpoint being written finish first: it
    holds an earlier, good state."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            checkpointer.wait()
        raise
