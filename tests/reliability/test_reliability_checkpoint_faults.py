"""Checkpoints that fail: train.py on a disk that fills up while it writes one, and both
programs on a damaged checkpoint or a bug while restoring.

Every test runs the real program (tests/helpers/program_server.py) on a copy of the tiny
reference run of tests/helpers/reliability_runs.py (checkpoints 2, 4, 6, 8).
"""

import glob
import os

import pytest
from reliability_runs import (
    STEPS,
    checkpoint_steps,
    copy_of_reference,
    one_error_line,
    run_program,
    snapshot,
    tiny_flags,
    train,
)

# ----------------------------------------------------------------------------- disk trouble

# Files over 10 KiB cannot grow (EFBIG, "File too large", as on a full disk). Every
# checkpoint writes bigger files whatever the timing: orbax's `_sharding` and `_METADATA`
# JSON of params and training (14-44 KB for this model). The workdir's own files stay
# smaller in this run (config 2.7 KB, metrics 4.4 KB, events 6.7 KB). TensorStore's data
# files are no measure: it splits the ~230 KB optimizer state into as many files as its
# flushes, whose sizes depend on timing (the largest 98-176 KB over five checkpoints; under
# load, all could be under 96 KiB, and the write succeeded). The program's own stdout and
# stderr pass through `cat`, a process without the limit.
FULL_DISK = """
import atexit, os, resource, signal, subprocess, sys
cats = []
for fd in (1, 2):
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=os.dup(fd))
    os.dup2(cat.stdin.fileno(), fd)
    cat.stdin.close()
    cats.append(cat)
def drain():
    sys.stdout.flush(); sys.stderr.flush(); os.close(1); os.close(2)
    for cat in cats:
        cat.wait()
atexit.register(drain)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (10 * 1024, 10 * 1024))
"""


# The commit of the next checkpoint (step 10) reported cancelled: orbax 0.12.8 takes that for
# a clean cancellation (no error, no rename of its temporary directory). The wait returns
# once the writes it waits for have ended, so nothing is still at work when the test looks.
CANCELLED_COMMIT = """
import concurrent.futures
from orbax.checkpoint._src.futures import future
result = future.ChainedFuture.result
def cancelled(self, timeout=None):
    result(self, timeout=timeout)
    raise concurrent.futures.CancelledError()
future.ChainedFuture.result = cancelled
"""


def listing(workdir: str) -> list[str]:
    return sorted(os.listdir(os.path.join(workdir, "checkpoints")))


@pytest.mark.parametrize("fault", ["full_disk", "cancelled_commit"])
def test_a_checkpoint_not_written_is_a_one_line_error_and_older_checkpoints_stay(tmp_path, fault):
    workdir = copy_of_reference(tmp_path / "run")
    before = snapshot(os.path.join(workdir, "checkpoints"))
    # Keep 1: a rotation after the failed save would delete 2, 4, 6 and 8.
    flags = tiny_flags(num_steps=STEPS + 2, train__keep_checkpoints=1)
    prelude = FULL_DISK if fault == "full_disk" else CANCELLED_COMMIT

    run = train(workdir, *flags, prelude=prelude)

    assert run.returncode == 2, run.stderr
    # Around the program's one-line report of a full disk, orbax logs the failure of its
    # background writer and TensorStore prints tracebacks of callbacks to its closed loop.
    message = one_error_line(run.stderr)
    assert "writing a checkpoint in" in message and "rerun the same command" in message
    if fault == "full_disk":
        assert "File too large" in message
    else:
        assert "checkpoint 10 was not completed" in message
        assert "resume from checkpoint 8" in message
        assert run.stderr.strip() == message  # nothing else
    assert "saved checkpoint 10" not in run.stdout
    assert snapshot(os.path.join(workdir, "checkpoints")).items() >= before.items()
    assert [n for n in listing(workdir) if n.isdigit()] == ["2", "4", "6", "8"]
    assert checkpoint_steps(workdir) == [2, 4, 6, 8]

    rerun = train(workdir, *flags)  # space again: the same command resumes

    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming from checkpoint {STEPS}" in rerun.stdout
    assert listing(workdir) == ["10"]  # verified, then rotated (keep 1)


# ------------------------------------------------------- a damaged checkpoint, or a bug


def damage_checkpoint_8(workdir: str) -> None:
    for path in glob.glob(f"{workdir}/checkpoints/8/params/ocdbt.process_0/d/*"):
        os.truncate(path, 10)


# At exit, after the program's one-line error: an unrelated failing finalizer, an unrelated
# asyncio task whose exception nobody retrieved, an unrelated coroutine never awaited.
UNRELATED_REPORTS_AT_EXIT = """
import asyncio, atexit, gc

class RaisesWhenCollected:
    def __del__(self):
        raise RuntimeError("unrelated finalizer failed")

async def unrelated_coroutine():
    pass

async def unrelated_task():
    raise ValueError("unrelated task failed")

def report_unrelated_problems():
    RaisesWhenCollected()
    loop = asyncio.new_event_loop()
    task = loop.create_task(unrelated_task())
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    del task
    unrelated_coroutine()
    gc.collect()

atexit.register(report_unrelated_problems)
"""


def test_after_a_damaged_checkpoint_error_unrelated_problems_are_still_reported(tmp_path):
    workdir = copy_of_reference(tmp_path / "run")
    damage_checkpoint_8(workdir)

    run = run_program("evaluate.py", ["--workdir", workdir], prelude=UNRELATED_REPORTS_AT_EXIT)

    assert run.returncode == 2, run.stderr
    assert "checkpoint 8 cannot be restored" in one_error_line(run.stderr)
    assert "RuntimeError: unrelated finalizer failed" in run.stderr
    assert "Task exception was never retrieved" in run.stderr
    assert "ValueError: unrelated task failed" in run.stderr
    assert "coroutine 'unrelated_coroutine' was never awaited" in run.stderr
    assert "/orbax/" not in run.stderr  # what orbax abandoned stays quiet


# A bug in restoring (here: orbax called with an argument it does not take).
BUG_IN_RESTORE = """
import orbax.checkpoint as ocp
def restore(self, step, args=None):
    raise TypeError("restore() got an unexpected keyword argument 'sharding'")
ocp.CheckpointManager.restore = restore
"""


@pytest.mark.parametrize("program", ["train.py", "evaluate.py"])
def test_a_bug_while_restoring_keeps_its_traceback_and_exits_1(tmp_path, program):
    workdir = copy_of_reference(tmp_path / "run")
    flags = tiny_flags(num_steps=STEPS + 2) if program == "train.py" else []

    run = run_program(program, [*flags, "--workdir", workdir], prelude=BUG_IN_RESTORE)

    assert run.returncode == 1, run.stderr
    assert "Traceback" in run.stderr
    assert "TypeError: restore() got an unexpected keyword argument" in run.stderr
    assert "damaged" not in run.stderr and not run.stderr.startswith("error:")
