"""The loop's dev evaluation split over the devices equals one device's: the dev loss
over batches whose rows are split as a training batch's (padded with rows that count for
nothing), and the dev translations decoded over every device with the parameters as the
run lays them out (over two processes too, where neither holds them whole)."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from paths import HELPERS, xla_flags

SCRIPT = os.path.join(HELPERS, "sharded_evaluation.py")
# data; data x fsdp x tensor; fsdp alone (the parameters split over every device).
MESHES = ["8x1x1", "2x2x2", "1x8x1"]


def command(outdir, meshes, devices, env_extra=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices)}
    env.update(env_extra or {})
    return [sys.executable, SCRIPT, str(outdir), *meshes], env


def run(outdir, meshes, devices, env_extra=None):
    args, env = command(outdir, meshes, devices, env_extra)
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def load(outdir, mesh) -> dict:
    with open(os.path.join(outdir, f"{mesh}.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("evaluations")
    run(outdir, ["1x1x1", *MESHES], devices=8)
    return outdir


def assert_same_dev_loss(got: dict, want: dict) -> None:
    for key in ("loss", "nll", "accuracy"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=0, err_msg=key)


def test_the_one_device_dev_loss_is_the_plain_sum_over_the_batches(eight_devices):
    result = load(eight_devices, "1x1x1")
    assert_same_dev_loss(result["record"], result["plain"])


@pytest.mark.parametrize("mesh", MESHES)
def test_the_dev_loss_split_over_8_devices_equals_one_device(eight_devices, mesh):
    """Batches of 13 and 5 rows split over 8 (or 4) parts: padded with rows of zeros."""
    assert_same_dev_loss(load(eight_devices, mesh)["record"], load(eight_devices, "1x1x1")["plain"])


@pytest.mark.parametrize("mesh", ["1x1x1", *MESHES])
def test_dev_translations_decoded_over_8_devices_equal_one_device(eight_devices, mesh):
    result = load(eight_devices, mesh)
    for search in ("beam1", "beam2"):
        hypotheses = result["record"][search]
        assert hypotheses == result["one_device"][search], search
        assert len(hypotheses) == 11 and len({tuple(h) for h in hypotheses}) > 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_evaluate_parameters_neither_holds_whole_as_one_device(
    eight_devices, tmp_path
):
    """Mesh fsdp 8 over 2 processes x 4 devices: every parameter split over both
    processes (jax.device_get of them fails); the same dev loss and translations."""
    env = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}", "JAX_NUM_PROCESSES": "2"}
    args, worker_env = command(tmp_path, ["1x8x1"], 4, {**env, "JAX_PROCESS_ID": "1"})
    worker = subprocess.Popen(
        args, env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        run(tmp_path, ["1x8x1"], 4, {**env, "JAX_PROCESS_ID": "0"})
    finally:
        output, _ = worker.communicate(timeout=900)
    assert worker.returncode == 0, output[-3000:]
    got, want = load(tmp_path, "1x8x1"), load(eight_devices, "1x1x1")
    assert_same_dev_loss(got["record"], want["plain"])
    for search in ("beam1", "beam2"):
        assert got["record"][search] == want["one_device"][search], search
