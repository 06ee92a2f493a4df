"""A sharded step equals the single-device step: forced CPU devices and two processes."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from paths import HELPERS, xla_flags

SCRIPT = os.path.join(HELPERS, "parallel_step.py")
MESHES = ["8x1x1", "2x2x2"]  # data; data x fsdp x tensor


def command(outdir, meshes, devices=1, env_extra=None):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags(devices if devices > 1 else None)
    env.update(env_extra or {})
    return [sys.executable, SCRIPT, str(outdir), *meshes], env


def run(outdir, meshes, devices=1, env_extra=None):
    args, env = command(outdir, meshes, devices, env_extra)
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory):
    """One process with 8 forced CPU devices runs the single-device step and every mesh."""
    outdir = tmp_path_factory.mktemp("steps")
    run(outdir, ["1x1x1", *MESHES], devices=8)
    return outdir


def assert_same_step(reference, other):
    assert set(reference.files) == set(other.files)
    for key in reference.files:
        np.testing.assert_allclose(other[key], reference[key], atol=1e-5, err_msg=key)


@pytest.mark.parametrize("mesh", MESHES)
def test_sharded_steps_on_8_cpu_devices_equal_one_device(eight_devices, mesh):
    reference = np.load(eight_devices / "1x1x1.npz")
    assert_same_step(reference, np.load(eight_devices / f"{mesh}.npz"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_with_jax_distributed_equal_one_process(eight_devices, tmp_path):
    env = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}", "JAX_NUM_PROCESSES": "2"}
    args, worker_env = command(tmp_path, ["2x1x1"], env_extra={**env, "JAX_PROCESS_ID": "1"})
    worker = subprocess.Popen(
        args, env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        run(tmp_path, ["2x1x1"], env_extra={**env, "JAX_PROCESS_ID": "0"})
    finally:
        output, _ = worker.communicate(timeout=600)
    assert worker.returncode == 0, output[-3000:]
    assert_same_step(np.load(eight_devices / "1x1x1.npz"), np.load(tmp_path / "2x1x1.npz"))
