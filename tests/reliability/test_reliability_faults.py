"""train.py under faults: killed, preempted, bad numbers, two at once (a failing disk, a
damaged checkpoint and a bug while restoring: test_reliability_checkpoint_faults.py).

Every test runs the real program (tests/helpers/program_server.py) on the tiny demo run of
tests/helpers/reliability_runs.py and compares with an uninterrupted reference run where it can.
"""

import os
import random
import re
import signal
import time

import numpy as np
import pytest
from reliability_runs import (
    STEPS,
    checkpoint_leaves,
    checkpoint_steps,
    one_error_line,
    reference_workdir,
    server,
    tiny_flags,
    train,
    train_records,
    without_timing,
)

from jaxtrans.training.guards import STEPS_IN_FLIGHT

# Preemption: seconds from SIGTERM to a clean exit that we promise for the tiny run (one
# step, one checkpoint write and the exit; generous because the test machine is shared).
SIGTERM_EXIT_BOUND_S = 30


def start_train(workdir, flags, tmp_path, name: str, **kwargs):
    return server().start(
        "train.py",
        [*flags, "--workdir", str(workdir)],
        stdout=str(tmp_path / f"{name}.stdout"),
        stderr=str(tmp_path / f"{name}.stderr"),
        **kwargs,
    )


def assert_same_run_as_reference(workdir) -> None:
    """Each step logged once, with the reference's numbers; the final checkpoint (params,
    optimizer state, dropout key) bitwise equal to the reference's."""
    records = [without_timing(r) for r in train_records(workdir)]
    expected = [without_timing(r) for r in train_records(reference_workdir())]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records == expected
    final = zip(
        checkpoint_leaves(workdir, STEPS),
        checkpoint_leaves(reference_workdir(), STEPS),
        strict=True,
    )
    for got, want in final:
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------ crash


def test_killed_at_a_random_moment_the_rerun_ends_bitwise_equal_to_an_uninterrupted_run(
    tmp_path,
):
    seed = int(os.environ.get("JAXTRANS_KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    # Steps 1-4: the checkpoints of steps 6 and 8 are still to come, so the kill lands
    # before the end, possibly while the (async) checkpoint of step 2 or 4 is written.
    kill_after_step = rng.randint(1, STEPS - 4)
    workdir = tmp_path / "run"
    run = start_train(workdir, tiny_flags(), tmp_path, "killed")
    run.wait_for_output(f"step {kill_after_step:>7}/")
    time.sleep(rng.uniform(0.0, 0.03))
    os.kill(run.pid, signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL, f"seed {seed}: the run ended before the kill"
    complete = checkpoint_steps(workdir)

    rerun = train(workdir)

    assert rerun.returncode == 0, rerun.stderr
    resumed = f"resuming from checkpoint {complete[-1]}" if complete else "training from scratch"
    assert resumed in rerun.stdout, f"seed {seed}"
    assert_same_run_as_reference(workdir)


# Kills the process the moment orbax renames the finished temporary directory of checkpoint
# 4 into place: everything is written (even commit_success.txt), nothing is committed.
KILL_BEFORE_COMMITTING_4 = """
import os, signal
from orbax.checkpoint._src.path import async_path
rename = async_path.rename
async def rename_or_die(source, destination, *args, **kwargs):
    if os.path.basename(str(destination)) == "4":
        os.kill(os.getpid(), signal.SIGKILL)
    return await rename(source, destination, *args, **kwargs)
async_path.rename = rename_or_die
"""


def test_killed_while_writing_a_checkpoint_the_rerun_restores_the_last_complete_one(tmp_path):
    workdir = tmp_path / "run"
    run = train(workdir, prelude=KILL_BEFORE_COMMITTING_4)
    assert run.returncode == -signal.SIGKILL, run.stderr
    leftovers = [n for n in os.listdir(workdir / "checkpoints") if n.startswith("4.")]
    assert leftovers, "the kill should leave checkpoint 4 half-committed"
    assert checkpoint_steps(workdir) == [2]  # the partial one is not a checkpoint
    for got, want in zip(
        checkpoint_leaves(workdir, 2), checkpoint_leaves(reference_workdir(), 2), strict=True
    ):
        np.testing.assert_array_equal(got, want)  # the older one is intact

    rerun = train(workdir)

    assert rerun.returncode == 0, rerun.stderr
    assert "resuming from checkpoint 2" in rerun.stdout
    assert not [n for n in os.listdir(workdir / "checkpoints") if not n.isdigit()]
    assert checkpoint_steps(workdir) == [2, 4, 6, 8]
    assert_same_run_as_reference(workdir)


# ------------------------------------------------------------- preemption and a busy workdir

LONG = tiny_flags(num_steps=100_000, train__checkpoint_every=100_000)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """A long training, already stepping, on its own workdir."""
    tmp_path = tmp_path_factory.mktemp("long")
    run = start_train(tmp_path / "run", LONG, tmp_path, "long")
    run.wait_for_output("step       3/")
    yield run, tmp_path / "run"
    if run.server.poll(run.pid) is None:
        os.kill(run.pid, signal.SIGKILL)
        run.wait()


def test_a_second_training_on_a_busy_workdir_refuses_with_status_2(long_run):
    run, workdir = long_run
    assert run.server.poll(run.pid) is None, "the first training should still be running"

    second = train(workdir, *LONG)

    assert second.returncode == 2
    assert "Traceback" not in second.stderr
    message = one_error_line(second.stderr)
    assert f"in use by a training run (pid {run.pid})" in message
    assert "another --workdir" in message
    assert run.server.poll(run.pid) is None  # the first one goes on


def test_sigterm_saves_the_current_step_exits_0_in_bounded_time_and_the_rerun_continues(
    long_run,
):
    run, workdir = long_run
    sent = time.monotonic()
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait(timeout=120) == 0, run.stderr
    assert time.monotonic() - sent < SIGTERM_EXIT_BOUND_S
    saved = int(re.search(r"SIGTERM: saved checkpoint (\d+)", run.stdout).group(1))
    assert checkpoint_steps(workdir) == [saved]
    assert train_records(workdir)[-1]["step"] == saved

    rerun = train(workdir, *tiny_flags(num_steps=saved + 2, train__checkpoint_every=100_000))

    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming from checkpoint {saved}" in rerun.stdout
    records = train_records(workdir)
    assert [r["step"] for r in records] == list(range(1, saved + 3))
    # Same seed, data and schedule as the reference: the steps both have must agree.
    reference = {r["step"]: without_timing(r) for r in train_records(reference_workdir())}
    for record in records:
        if record["step"] in reference:
            assert without_timing(record) == reference[record["step"]]


# Makes the loop's batches slow (the host sleeps before each one) without changing any
# number, so that a signal reliably lands in the middle of the tiny run.
SLOW_BATCHES = """
import time
from jaxtrans.training import loop
global_batch = loop.global_batch
def slow_global_batch(*args):
    time.sleep(0.3)
    return global_batch(*args)
loop.global_batch = slow_global_batch
"""


def test_stopped_by_sigterm_and_resumed_the_run_ends_bitwise_equal_to_an_uninterrupted_one(
    tmp_path,
):
    workdir = tmp_path / "run"
    run = start_train(workdir, tiny_flags(), tmp_path, "stopped", prelude=SLOW_BATCHES)
    run.wait_for_output("step       3/")
    os.kill(run.pid, signal.SIGTERM)
    assert run.wait() == 0, run.stderr
    saved = int(re.search(r"SIGTERM: saved checkpoint (\d+)", run.stdout).group(1))
    assert saved < STEPS

    rerun = train(workdir)

    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming from checkpoint {saved}" in rerun.stdout
    assert_same_run_as_reference(workdir)


# Makes every training step slow on the device: the step also runs a chain of matrix
# products (no host callback: on CPU those make JAX dispatch synchronously, which would
# hide the queue). Prints what the chain costs, and "batch N" as the loop takes batch N.
SLOW_STEPS = """
import time
import jax, jax.numpy as jnp
from jaxtrans.training import loop, step_layout

def matrix_products(seed):
    x = jnp.full((600, 600), seed * 1e-6, jnp.float32)
    return jax.lax.fori_loop(0, 250, lambda i, y: jnp.tanh(y @ y + 1e-3), x).mean()

products = jax.jit(matrix_products)
products(1.0).block_until_ready()
start = time.perf_counter()
products(2.0).block_until_ready()
print(f"a slow step takes {time.perf_counter() - start:.3f} s longer", flush=True)

make_train_step = step_layout.make_train_step
def slow_train_step(*args, **kwargs):
    train_step = make_train_step(*args, **kwargs)
    def step(state, batch, rng):
        state, metrics = train_step(state, batch, rng)
        metrics["slow"] = matrix_products(metrics["loss"])
        return state, metrics
    return step
step_layout.make_train_step = slow_train_step

global_batch, taken = loop.global_batch, [0]
def counted_global_batch(*args):
    taken[0] += 1
    print(f"batch {taken[0]} taken", flush=True)
    return global_batch(*args)
loop.global_batch = counted_global_batch
"""
# What the tiny run needs from the end of its last step to its exit: a checkpoint written
# synchronously, the interpreter's exit (a few seconds on a loaded machine).
CHECKPOINT_AND_EXIT_S = 10


def test_sigterm_with_a_long_log_interval_stops_within_steps_in_flight_slow_steps(tmp_path):
    # Unbounded, the loop would dispatch steps as fast as it makes batches (dozens in the
    # three slow steps waited here, up to log_every) and a stop would wait for all of them;
    # it keeps guards.STEPS_IN_FLIGHT in flight.
    flags = tiny_flags(num_steps=100_000, train__log_every=10_000, train__checkpoint_every=100_000)
    run = start_train(tmp_path / "run", flags, tmp_path, "slow", prelude=SLOW_STEPS)
    run.wait_for_output("batch 3 taken")  # past the compilation, stepping
    slow_step_s = float(re.search(r"a slow step takes ([\d.]+) s", run.stdout).group(1))
    time.sleep(3 * slow_step_s)  # time enough to queue dozens of steps, were it allowed
    sent = time.monotonic()
    os.kill(run.pid, signal.SIGTERM)

    assert run.wait(timeout=120) == 0, run.stderr
    seconds = time.monotonic() - sent
    assert seconds < STEPS_IN_FLIGHT * slow_step_s + CHECKPOINT_AND_EXIT_S, (seconds, slow_step_s)
    assert "SIGTERM: saved checkpoint" in run.stdout


# ---------------------------------------------------------------------------- bad numbers

INFINITE_LR = ["--config.optimizer.schedule=constant", "--config.optimizer.learning_rate=inf"]


def test_a_nonfinite_update_stops_with_status_1_naming_step_and_tensor_saving_nothing(
    tmp_path,
):
    run = train(tmp_path / "run", *tiny_flags(), *INFINITE_LR)

    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    message = one_error_line(run.stderr)
    assert re.match(r"error: step 1: the updated params\[.+\] is not finite", message), message
    assert "on_nonfinite=skip" in message
    assert checkpoint_steps(tmp_path / "run") == []


def test_skipped_nonfinite_updates_are_counted_across_a_restart_and_saved_state_is_finite(
    tmp_path,
):
    workdir = tmp_path / "run"
    skip = [*INFINITE_LR, "--config.train.on_nonfinite=skip"]
    first = train(workdir, *tiny_flags(num_steps=2), *skip)
    assert first.returncode == 0, first.stderr

    second = train(workdir, *tiny_flags(num_steps=4), *skip)

    assert second.returncode == 0, second.stderr
    assert [r["skipped_steps"] for r in train_records(workdir)] == [1, 2, 3, 4]
    for leaf in checkpoint_leaves(workdir, 4):
        assert np.isfinite(leaf).all()
