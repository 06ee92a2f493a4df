"""On a machine without accelerators, with libtpu (and JAX's CUDA plugin) installed, every
program's stderr holds only its own lines, while another JAX process runs on the host.

JAX_PLATFORMS is removed from the programs' environment (the suite sets it to cpu), so JAX
would try every backend, as for a user: libtpu then prints "Failed to find host bounds for
accelerator type" / "unexpected worker hostname" lines, or fails on the lockfile that the
other process holds, and the CUDA plugin logs a traceback where no GPU is.
jaxtrans/programs/platforms.py chooses the CPU platform first. Each program runs as the
user runs it, in a fresh interpreter (not the program server, which has JAX loaded).
"""

import os
import subprocess
import sys
import time

import pytest
from paths import REPO
from tiny_configs import TINY_TRANSLATION

from jaxtrans.programs.platforms import has_gpu, has_tpu

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(has_tpu() or has_gpu(), reason="a machine without accelerators"),
]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def another_jax_process():
    """A JAX process with every backend tried (it may hold libtpu's lockfile)."""
    code = "import jax, sys, time; jax.devices(); print('up', flush=True); time.sleep(900)"
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout.readline().strip() == "up"
    yield process
    process.kill()
    process.wait()


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )


TINY = [f"--config.{k}={v}" for k, v in TINY_TRANSLATION.items()]


@pytest.fixture(scope="module")
def trained(another_jax_process, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("platforms") / "run"
    flags = ["--config.train.num_steps=2", "--config.train.checkpoint_every=2"]
    result = run("train.py", "--config", "configs/demo.py", *TINY, *flags, "--workdir", workdir)
    assert result.returncode == 0, result.stderr
    assert "step       2/2" in result.stdout
    return workdir, result


def test_train_py_writes_nothing_to_stderr(trained):
    _, result = trained
    assert result.stderr == ""


def test_evaluate_py_writes_nothing_to_stderr(trained):
    workdir, _ = trained
    result = run("evaluate.py", "--workdir", str(workdir))
    assert result.returncode == 0, result.stderr
    assert "report:" in result.stdout
    assert result.stderr == ""


def test_evaluate_py_bad_input_after_jax_started_is_one_line(trained, tmp_path):
    workdir, _ = trained
    result = run("evaluate.py", "--workdir", str(workdir), "--checkpoint", "7")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr


def test_export_writes_nothing_to_stderr(trained, tmp_path):
    workdir, _ = trained
    output = tmp_path / "ct2"
    result = run(
        "-m", "jaxtrans.export", "--workdir", str(workdir), "--output", str(output),
        "--format", "ctranslate2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (output / "model.bin").exists()
    assert result.stderr == ""


def test_plot_writes_nothing_to_stderr(another_jax_process, tmp_path):
    output = tmp_path / "positions.png"
    result = run("-m", "jaxtrans.plot", "positions", "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert output.exists() and result.stderr == ""


def test_compile_for_a_tpu_slice_writes_nothing_to_stderr(another_jax_process):
    start = time.perf_counter()
    result = run(
        "-m", "jaxtrans.compile", "--config", "configs/demo.py", *TINY,
        "--topology", "v5e-4", "--nodecode",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "v5e-4" in result.stdout, time.perf_counter() - start
    assert result.stderr == ""
