"""A multi-host run of the real train.py: 2 processes x 4 forced CPU devices (mesh data 2 x
fsdp 2 x tensor 2, joined by jax.distributed on 127.0.0.1), killed with SIGKILL and
restarted, then continued on 1 process x 1 device and 1 process x 8 devices, and its
checkpoint scored by evaluate.py on one process as the run itself scored it.

The processes are forked by the reliability tests' program server (tests/helpers/program_server.py),
so each pays no imports; every run is ``train.py`` with the tiny demo flags of
tests/helpers/reliability_runs.py. Set ``JAXTRANS_KILL_SEED`` to replay a kill step.
"""

import json
import os
import random
import shutil
import signal
import socket
import time

import numpy as np
import pytest
from paths import xla_flags
from reliability_runs import (
    checkpoint_steps,
    run_program,
    scratch,
    server,
    tiny_flags,
    train_records,
    without_timing,
)

STEPS = 8
MESH_2x2x2 = {"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}
MESH_1x1x1 = {"mesh.data": 1, "mesh.fsdp": 1, "mesh.tensor": 1}
# The reference run decodes the dev sentences greedily after steps 6 and 8 (BLEU and chrF
# in metrics.jsonl): what its checkpoints must translate to when evaluate.py restores them.
DEV_EVALUATION = ("--config.train.eval_every=6", "--config.eval.beam_size=1")


def flags(mesh: dict) -> list[str]:
    return tiny_flags(STEPS, **{key.replace(".", "__"): value for key, value in mesh.items()})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def device_env(devices: int) -> dict[str, str]:
    """Each process gets its own forced CPU devices (set only in the child), compiled with
    the suite's fast-compile flags (tests/helpers/paths.py); every run here uses the same."""
    return {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices)}


def start_processes(
    workdir: str, count: int, devices: int, mesh: dict, extra: tuple[str, ...] = ()
) -> list:
    """``count`` train.py processes on ``workdir`` (joined by jax.distributed if more than
    one), each with ``devices`` CPU devices; returns their runs."""
    port, outdir = free_port(), os.path.join(scratch(), "multihost")
    os.makedirs(outdir, exist_ok=True)
    runs = []
    for index in range(count):
        env = device_env(devices)
        if count > 1:
            env |= {
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                "JAX_NUM_PROCESSES": str(count),
                "JAX_PROCESS_ID": str(index),
            }
        base = os.path.join(outdir, f"{len(os.listdir(outdir))}-p{index}")
        runs.append(
            server().start(
                "train.py",
                [*flags(mesh), *extra, "--workdir", workdir],
                stdout=base + ".stdout",
                stderr=base + ".stderr",
                env=env,
            )
        )
    return runs


def finish(runs: list, timeout: float = 240.0) -> None:
    for index, run in enumerate(runs):
        status = run.wait(timeout)
        assert status == 0, f"process {index}: status {status}\n{run.stdout}\n{run.stderr}"


def train_2x4(workdir: str, extra: tuple[str, ...] = ()) -> list:
    runs = start_processes(workdir, 2, 4, MESH_2x2x2, extra)
    finish(runs)
    return runs


@pytest.fixture(scope="module")
def reference() -> str:
    """An uninterrupted 2 x 4 run of STEPS steps, a checkpoint every 2, dev BLEU after 6
    and 8 (the other runs compare only its training records: they do not evaluate)."""
    workdir = os.path.join(scratch(), "multihost-reference")
    runs = train_2x4(workdir, DEV_EVALUATION)
    # Process 0 trained the tokenizer; process 1 waited for it and loaded it.
    assert "training from scratch" in runs[0].stdout
    assert checkpoint_steps(workdir) == [2, 4, 6, 8]
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints", "8", "data"))) == [
        "commit_success.txt",
        "process_0-of-2.json",
        "process_1-of-2.json",
    ]
    return workdir


def losses(workdir: str) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in train_records(workdir)}


def newest_complete_checkpoint(workdir: str) -> int | None:
    """Orbax renames a checkpoint to its step number only once every process wrote it."""
    path = os.path.join(workdir, "checkpoints")
    steps = [int(n) for n in os.listdir(path) if n.isdigit()] if os.path.isdir(path) else []
    return max(steps, default=None)


def last_logged_step(workdir: str) -> int:
    try:
        with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    steps = [json.loads(line).get("step", 0) for line in lines if line.endswith("}")]
    return max(steps, default=0)


def checkpoint_leaves(workdir: str, step: int) -> list[np.ndarray]:
    """Every array of checkpoint ``step`` (parameters, optimizer state, dropout key) as
    numpy, restored onto this process's one device whatever mesh wrote them."""
    import jax
    import orbax.checkpoint as ocp

    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    leaves = []
    with ocp.StandardCheckpointer() as checkpointer:
        for item in ("params", "training"):
            path = os.path.join(workdir, "checkpoints", str(step), item)
            tree = checkpointer.metadata(path).item_metadata
            target = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=single), tree
            )
            leaves += [np.asarray(x) for x in jax.tree.leaves(checkpointer.restore(path, target))]
    return leaves


def test_killed_at_a_random_step_the_2_process_rerun_ends_bitwise_equal(reference, tmp_path):
    seed = int(os.environ.get("JAXTRANS_KILL_SEED", random.randrange(10**6)))
    kill_after = random.Random(seed).randint(3, STEPS - 1)
    workdir = str(tmp_path / "killed")
    runs = start_processes(workdir, 2, 4, MESH_2x2x2)
    deadline = time.monotonic() + 240
    while not (newest_complete_checkpoint(workdir) and last_logged_step(workdir) >= kill_after):
        assert all(server().poll(run.pid) is None for run in runs), runs[0].stderr[-3000:]
        assert time.monotonic() < deadline, "no checkpoint and step {kill_after} in time"
        time.sleep(0.02)
    for run in runs:
        os.kill(run.pid, signal.SIGKILL)
    assert [run.wait(60) for run in runs] == [-signal.SIGKILL] * 2
    killed_at = last_logged_step(workdir)
    assert killed_at < STEPS, f"seed {seed}: the run ended before the kill"

    rerun = train_2x4(workdir)
    resumed_from = newest_complete_checkpoint(workdir)
    assert "resuming from checkpoint" in rerun[0].stdout, f"seed {seed}"
    assert [without_timing(r) for r in train_records(workdir)] == [
        without_timing(r) for r in train_records(reference)
    ], f"seed {seed}: killed after step {killed_at}, resumed from {resumed_from}"
    for got, want in zip(
        checkpoint_leaves(workdir, STEPS), checkpoint_leaves(reference, STEPS), strict=True
    ):
        np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")


@pytest.mark.parametrize(
    "devices, mesh", [(1, MESH_1x1x1), (8, MESH_2x2x2)], ids=["1x1-device", "1x8-devices"]
)
def test_a_2_process_checkpoint_continues_on_one_process_with_the_same_losses(
    reference, tmp_path, devices, mesh
):
    """Checkpoint 4 of the 2 x 4 run, restored on one process (orbax lays it out on the new
    mesh; the two data shards are re-split onto it), trains steps 5..8 on the same global
    batches (tests/unit/data/test_data_pipeline.py checks those bitwise for 1, 2, 4 and 8
    processes): the losses equal the 2 x 4 run's to 1e-6 relative. Sums over other device
    splits round differently: about 1e-6 absolute at a loss of 5.7, 2 to 3 float32 steps."""
    workdir = str(tmp_path / "continued")
    shutil.copytree(reference, workdir)
    for step in (6, 8):
        shutil.rmtree(os.path.join(workdir, "checkpoints", str(step)))
    (run,) = start_processes(workdir, 1, devices, mesh)
    finish([run])
    assert "resuming from checkpoint 4" in run.stdout
    assert (
        "data: the checkpoint was saved by 2 processes, this run has 1; its 2 data shards are "
        "split anew (process 0 runs 0, 1), so the global batches continue unchanged"
    ) in run.stdout
    want, got = losses(reference), losses(workdir)
    assert sorted(got) == list(range(1, STEPS + 1))
    np.testing.assert_allclose(
        [got[s] for s in range(5, STEPS + 1)],
        [want[s] for s in range(5, STEPS + 1)],
        rtol=1e-6,
        atol=0,
    )


def test_evaluate_on_one_process_translates_a_2_process_checkpoint_as_the_run_did(
    reference, tmp_path
):
    """Checkpoint 6, restored by evaluate.py on one device, decodes the dev sentences to the
    hypotheses the 2 processes decoded from their parameters in memory after step 6: the
    same BLEU and chrF, to the last bit."""
    outdir = str(tmp_path / "eval")
    run = run_program(
        "evaluate.py",
        ["--workdir", reference, "--checkpoint", "6", "--split", "dev", "--beam_size", "1",
         "--outdir", outdir],
        env=device_env(1),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    with open(os.path.join(outdir, "dev-step6-greedy.json"), encoding="utf-8") as f:
        report = json.load(f)
    with open(os.path.join(reference, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    (during,) = [r for r in records if r.get("split") == "dev" and r["step"] == 6]
    assert report["num_sentences"] == 40
    assert (report["bleu"], report["chrf"]) == (during["bleu"], during["chrf"])
    # Hypotheses that differ from sentence to sentence: scores that tell them apart.
    with open(os.path.join(outdir, "dev-step6-greedy.hyp.txt"), encoding="utf-8") as f:
        hypotheses = f.read().splitlines()
    assert len(hypotheses) == 40 and len(set(hypotheses)) > 5 and report["chrf"] > 0


def test_when_process_0_cannot_set_up_the_run_the_others_stop_too(tmp_path):
    """Process 0 trains the tokenizer while the others wait; if it fails, they are told."""
    missing = str(tmp_path / "no_such.tsv")
    runs = start_processes(
        str(tmp_path / "run"), 2, 4, MESH_2x2x2, (f"--config.data.train={missing}",)
    )
    assert [run.wait(120) for run in runs] == [2, 2]
    assert f"error: {missing}: no such data file" in runs[0].stderr
    assert "error: process 0 could not set up the run (see its error)" in runs[1].stderr
