"""train.py with its batches made in worker processes, under faults: killed with kill -9 at
a random moment and rerun with another number of workers, the run ends as an uninterrupted
one; its workers do not outlive it."""

import os
import random
import signal
import time

import numpy as np
from reliability_runs import (
    STEPS,
    checkpoint_leaves,
    checkpoint_steps,
    scratch,
    server,
    tiny_flags,
    train,
    train_records,
    without_timing,
)


def start_train(workdir, flags, tmp_path, name: str):
    return server().start(
        "train.py",
        [*flags, "--workdir", str(workdir)],
        stdout=str(tmp_path / f"{name}.stdout"),
        stderr=str(tmp_path / f"{name}.stderr"),
    )


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_with_two_workers_and_rerun_with_one_the_run_ends_as_an_uninterrupted_one(
    tmp_path,
):
    seed = int(os.environ.get("JAXTRANS_KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    two = tiny_flags(data__workers=2)
    reference = os.path.join(scratch(), "reference-two-workers")
    assert train(reference, *two).returncode == 0
    workdir = tmp_path / "run"
    run = start_train(workdir, two, tmp_path, "killed")
    kill_after_step = rng.randint(2, STEPS - 4)  # mostly after the checkpoint of step 2
    run.wait_for_output(f"step {kill_after_step:>7}/")
    workers = children_of(run.pid)
    time.sleep(rng.uniform(0.0, 0.03))
    os.kill(run.pid, signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL, f"seed {seed}: the run ended before the kill"
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [pid for pid in workers if alive(pid)], "workers outlived the killed run"
    complete = checkpoint_steps(workdir)

    # From a checkpoint, with one worker; killed before the first one, the rerun is a new
    # run, whose packing streams are its own worker count's: then with two again.
    rerun = train(workdir, *tiny_flags(data__workers=1 if complete else 2))

    assert rerun.returncode == 0, rerun.stderr
    resumed = f"resuming from checkpoint {complete[-1]}" if complete else "training from scratch"
    assert resumed in rerun.stdout, f"seed {seed}"
    records = [without_timing(r) for r in train_records(workdir)]
    expected = [without_timing(r) for r in train_records(reference)]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records == expected, f"seed {seed}"
    final = zip(checkpoint_leaves(workdir, STEPS), checkpoint_leaves(reference, STEPS), strict=True)
    for got, want in final:
        np.testing.assert_array_equal(got, want)
