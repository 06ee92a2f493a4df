"""Every checkpoint the Checkpointer calls saved is complete on disk: a commit that orbax
drops (cancelled) or that fails is an error, the older checkpoints stay, a new writer
resumes from the newest complete one, and the rotation happens only after a verified
commit. Each test looks at the directory listing itself.

orbax 0.12.8 waits for a save's commit futures through ``ChainedFuture.result`` (in its
background thread when async, in the caller's thread when not); the faults are injected
there, on the save the test names.
"""

import concurrent.futures
import logging
import os

import jax.numpy as jnp
import pytest
from orbax.checkpoint._src.futures import future

from jaxtrans.workdirs import orbax_reports
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer, CheckpointNotWritten

PARAMS = {"kernel": jnp.arange(64 * 64, dtype=jnp.float32).reshape(64, 64)}


@pytest.fixture
def fault(monkeypatch):
    """``fault.append(error)``: the next commit wait raises ``error`` (once), after the
    writes it waits for have ended (so that none is still at work when the test looks)."""
    pending = []
    result = future.ChainedFuture.result

    def faulty_result(self, timeout=None):
        value = result(self, timeout=timeout)
        if pending:
            raise pending.pop()
        return value

    monkeypatch.setattr(future.ChainedFuture, "result", faulty_result)
    return pending


def save(checkpointer: Checkpointer, step: int, kept: int | None = None) -> None:
    opt_state = {"mu": jnp.full((8,), float(step))}
    rng = jnp.zeros((2,), jnp.uint32)
    checkpointer.save(step, PARAMS, opt_state, rng, CheckpointMeta(step), kept=kept)
    checkpointer.wait()


def listing(workdir) -> list[str]:
    return sorted(os.listdir(os.path.join(workdir, "checkpoints")))


def steps_seen_by_a_new_reader(workdir) -> list[int]:
    reader = Checkpointer(str(workdir), read_only=True)
    try:
        return reader.all_steps()
    finally:
        reader.close()


@pytest.mark.parametrize("async_save", [True, False], ids=["async", "sync"])
def test_a_cancelled_commit_is_an_error_and_the_older_checkpoint_stays(tmp_path, fault, async_save):
    checkpointer = Checkpointer(str(tmp_path), keep=1, async_save=async_save)
    save(checkpointer, 1)
    fault.append(concurrent.futures.CancelledError())

    with pytest.raises(CheckpointNotWritten, match="checkpoint 2 was not completed"):
        save(checkpointer, 2)

    # orbax left its temporary directory; the rotation (keep=1) did not delete step 1.
    assert listing(tmp_path) == ["1", "2.orbax-checkpoint-tmp"]
    assert checkpointer.latest_step() == 1
    assert steps_seen_by_a_new_reader(tmp_path) == [1]
    checkpointer.close()  # as the program's exit does

    rerun = Checkpointer(str(tmp_path), keep=1, async_save=async_save)  # removes the tmp
    assert rerun.latest_step() == 1
    save(rerun, 2)
    assert listing(tmp_path) == ["2"]  # verified, then rotated
    rerun.close()


def test_an_io_error_in_the_commit_is_raised_and_the_older_checkpoint_stays(tmp_path, fault):
    checkpointer = Checkpointer(str(tmp_path), keep=1)
    save(checkpointer, 1)
    fault.append(OSError(28, "No space left on device"))

    with pytest.raises(OSError, match="No space left on device"):
        save(checkpointer, 2)

    assert listing(tmp_path) == ["1", "2.orbax-checkpoint-tmp"]
    assert steps_seen_by_a_new_reader(tmp_path) == [1]


def test_the_rotation_keeps_the_newest_k_and_the_kept_step_once_each_commit_is_verified(
    tmp_path,
):
    checkpointer = Checkpointer(str(tmp_path), keep=2)
    for step in (1, 2, 3, 4):
        save(checkpointer, step, kept=1)
    assert listing(tmp_path) == ["1", "3", "4"]
    save(checkpointer, 5, kept=4)  # a save naming another best lets step 1 go
    assert listing(tmp_path) == ["4", "5"]
    checkpointer.close()


def test_an_async_commit_is_verified_at_close(tmp_path, fault):
    checkpointer = Checkpointer(str(tmp_path), keep=3)
    save(checkpointer, 1)
    fault.append(concurrent.futures.CancelledError())
    checkpointer.save(2, PARAMS, {}, jnp.zeros((2,), jnp.uint32), CheckpointMeta(2))
    with pytest.raises(CheckpointNotWritten):
        checkpointer.close()
    assert listing(tmp_path) == ["1", "2.orbax-checkpoint-tmp"]


# ------------------------------------------------------- reports of failures stay visible


def orbax_error_record() -> logging.LogRecord:
    """An asyncio error record whose exception was raised in orbax's code."""
    code = compile("raise RuntimeError('a write failed')", orbax_reports.ORBAX_DIR + "x.py", "exec")
    try:
        exec(code)
    except RuntimeError as error:
        exc_info = (RuntimeError, error, error.__traceback__)
    return logging.LogRecord("asyncio", logging.ERROR, "", 0, "Task exception", (), exc_info)


def test_the_log_filter_drops_no_failure_report_until_a_failure_is_reported():
    work = orbax_reports.AbandonedWork()
    work.begin()  # an async write in flight, no failure reported
    try:
        assert work.filter(orbax_error_record())
        work.end(failed=True)  # our one-line error has reported the failure
        assert not work.filter(orbax_error_record())  # what it abandoned stays quiet
    finally:
        logging.getLogger("asyncio").removeFilter(work)
