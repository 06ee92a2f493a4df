"""Guards of a training run: one trainer per workdir, stop signals, finite updates.

WorkdirLock                 an exclusive lock on DIR/.lock for the whole run
StopSignal                  SIGTERM / SIGINT set a flag the loop reads once per step
STEPS_IN_FLIGHT             the steps dispatched and not yet run, at most: a queue, a prompt stop
finishing_checkpoint_writes let a checkpoint being written finish when training fails
NonFiniteGuard              keep STEPS_IN_FLIGHT steps in flight; count skipped non-finite
                            steps, or stop within STEPS_IN_FLIGHT - 1 steps naming step and tensor
guarded_step                the train step as the guard's mode runs it (frozen after a failure)
"""

import contextlib
import fcntl
import math
import os
import signal
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxtrans.errors import TrainingStopped, UserError
from jaxtrans.workdirs.checkpoints import Checkpointer


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


# The most training steps dispatched and not yet run. JAX dispatches a step and returns
# at once; after dispatching step N the loop waits for step N - STEPS_IN_FLIGHT + 1, so
# the device has the steps after it queued while the host makes the next batch (host
# jitter of up to STEPS_IN_FLIGHT - 1 step times leaves no idle chip), a stop signal
# waits for at most this many steps whatever train.log_every, and a non-finite step is
# found at most STEPS_IN_FLIGHT - 1 steps after it. With 2 the loop would wait for the
# step before the newest on every step: one step queued, host jitter idle chip
# (benchmarks/nonfinite_guard.py measures the waits of each setting).
STEPS_IN_FLIGHT = 3


class NonFiniteGuard:
    """Keeps at most ``in_flight`` steps in flight, and says what a step that was not
    finite (loss, gradient or update NaN/Inf) does: ``stop`` names the step and the tensor
    and stops; ``skip`` counts it. The step has already left the state as it was
    (step.py); in ``stop`` mode the guard keeps it so (guarded_step) and explains.

    The loop runs ``guarded(train_step)``, passing ``frozen`` each step, calls
    ``after_dispatch`` after each step (it waits for the step ``in_flight - 1`` before the
    newest and in ``stop`` mode reads that step's flag: a failure stops the run at most
    ``in_flight - 1`` steps after it) and ``check`` when it reads the metrics of the steps
    since the last check. ``diagnose(local_batch)`` computes a step again from the current
    state (step.make_nonfinite_diagnosis), which in ``stop`` mode is the state the failed
    step started from: the steps after it changed nothing.
    """

    def __init__(self, mode: str, leaf_names: list[str], replicated, in_flight=STEPS_IN_FLIGHT):
        if in_flight < 1:
            raise ValueError(f"in_flight={in_flight}: at least the newest step is in flight")
        self.mode = mode
        self.leaf_names = leaf_names
        self.in_flight = in_flight
        # The previous step's "not finite so far" flag, on the devices (stop mode).
        self.frozen = jax.device_put(jnp.zeros((), bool), replicated)
        # Local batches of the steps not yet known to be finite (stop mode), by step.
        self.batches: dict[int, dict] = {}
        # Seconds the host has waited in after_dispatch (benchmarks/nonfinite_guard.py).
        self.waited = 0.0

    def guarded(self, train_step: Callable) -> Callable:
        """guarded_step(train_step, this guard's mode)."""
        return guarded_step(train_step, self.mode)

    def after_dispatch(
        self,
        step: int,
        local_batch: dict,
        pending: list[tuple[int, dict]],
        diagnose: Callable[[dict], dict],
    ) -> None:
        """After ``step`` (the newest of ``pending``, the (step, metrics) dispatched since
        the last check, oldest first) is dispatched: wait until at most ``in_flight - 1``
        steps are unfinished, never for the newest unless ``in_flight`` is 1. In ``stop``
        mode keep ``local_batch`` until its step is known finite, read the flag of the step
        waited for, and raise NonFiniteError if it failed (``check``)."""
        if self.mode == "stop":
            self.frozen = pending[-1][1]["nonfinite"]
            self.batches[step] = local_batch
        if len(pending) < self.in_flight:
            return  # the last check (a log) waited for every earlier step
        waited_step, metrics = pending[-self.in_flight]
        start = time.perf_counter()
        jax.block_until_ready(metrics)
        self.waited += time.perf_counter() - start
        if self.mode != "stop":
            return
        # The flag holds "not finite so far": false means every step up to this one was.
        if not bool(metrics["nonfinite"]):
            for done in [s for s in self.batches if s <= waited_step]:
                del self.batches[done]
            return
        self.check([(s, m) for s, m in pending if s <= waited_step], diagnose)

    def check(self, pending: list[tuple[int, dict]], diagnose: Callable[[dict], dict]) -> int:
        """Number of skipped (non-finite) steps among ``pending`` (whose metrics have
        run); raises in ``stop`` mode, naming the first one's step and tensor."""
        skipped = [(step, m) for step, m in pending if bool(m["nonfinite"])]
        if skipped and self.mode == "stop":
            step, metrics = skipped[0]
            metrics = jax.device_get(metrics)
            what = self.describe(jax.device_get(diagnose(self.batches[step])), metrics)
            raise NonFiniteError(
                f"step {step}: {what} is not finite (NaN or Inf); the update was skipped and no "
                "non-finite state was saved; lower the learning rate, or set "
                "--config.train.on_nonfinite=skip to skip such steps and go on"
            )
        self.batches.clear()
        return len(skipped)

    def describe(self, diagnosis: dict, metrics: dict) -> str:
        """The first tensor the recomputed step found not finite, else the step's own
        scalars (a gradient norm can overflow while every gradient is finite)."""
        leaf, count = int(diagnosis["first_nonfinite_leaf"]), len(self.leaf_names)
        if 0 <= leaf < count:
            return f"the gradient of params{self.leaf_names[leaf]}"
        if leaf >= count:
            return f"the updated params{self.leaf_names[leaf - count]}"
        if not math.isfinite(float(metrics["loss"])):
            return f"the loss ({float(metrics['loss']):g})"
        if not math.isfinite(float(metrics["grad_norm"])):
            return f"the global gradient norm ({float(metrics['grad_norm']):g})"
        return "the global norm of the update"


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


def guarded_step(train_step: Callable, mode: str) -> Callable:
    """``step(state, batch, frozen) -> (state, metrics)``, as the loop runs it. In ``stop``
    mode a failed step freezes the state: the steps dispatched after it (before the loop
    reads its metrics) change nothing either, so the state stays the one the failed step
    started from, and ``metrics["nonfinite"]`` stays true."""

    def step(state, batch, frozen):
        new_state, metrics = train_step(state, batch, state.dropout_key())
        if mode != "stop":
            return new_state, metrics
        failed = frozen | metrics["nonfinite"]
        metrics["nonfinite"] = failed
        return jax.tree.map(lambda n, o: jnp.where(failed, o, n), new_state, state), metrics

    return step


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
