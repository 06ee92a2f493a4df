"""python -m jaxtrans.compile for GPU machines this machine does not have (jax's CUDA
plugin compiling for a target description: no GPU, no driver).

A tiny bfloat16 model with float32 parameters (head_dim 64, which cuDNN takes). The
bytes are checked against counts made here from the parameter count, and the estimate
against the datasheet's peak, not against the report itself.
"""

import json
import os
import re
import subprocess
import sys

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache
from paths import REPO
from tiny_configs import TINY_TRANSLATION, tiny_translation_config

from jaxtrans.compiling.ahead_of_time import compile_train_step
from jaxtrans.compiling.compile_report import compile_for_slice, describe, train_step_report
from jaxtrans.compiling.compile_targets import compile_only_devices, target_named
from jaxtrans.tasks import compile_task

TINY = {
    **TINY_TRANSLATION,
    "data.batch_size": 16,
    "model.d_model": 128,
    "model.num_heads": 2,
    "model.d_ff": 512,
    "model.dtype": "bfloat16",
    "model.attention_impl": "auto",
    "model.attention_dropout_rate": 0.0,
}
H100_MEMORY = 84942979072  # bytes, as CUDA reports an H100 80GB HBM3's
H100_BF16_PEAK = 989e12  # dense, the H100 SXM datasheet
H100_BANDWIDTH = 3.35e12  # bytes/s, the same datasheet


@pytest.fixture(scope="module", autouse=True)
def no_persistent_cache():
    """As in test_compile_tpu.py: an earlier test of this worker may have turned jax's
    persistent cache on; jaxtrans.compile never does, and compile-only clients cannot
    read CPU entries back."""
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


def tiny(**overrides):
    return tiny_translation_config(10, **{**TINY, **overrides})


@pytest.fixture(scope="module")
def h100():
    """The tiny run on one host of eight H100s, every GPU a replica."""
    return compile_for_slice(tiny(**{"mesh.data": -1}), "h100-8", decode=False)


def test_the_h100_report_holds_the_parameters_and_fits(h100):
    assert (h100["platform"], h100["chips"], h100["hosts"]) == ("gpu", 8, 1)
    assert h100["device_kind"] == "NVIDIA H100 80GB HBM3"
    assert h100["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    params = h100["parameters"]
    per_device = h100["bytes_per_device"]
    assert per_device["params"] == params * 4  # float32 parameters, whole on each GPU
    assert abs(per_device["optimizer"] - 2 * params * 4) <= 64  # Adam's two moments
    # The memory a step may use: JAX's allocator's 75% of the GPU's.
    assert h100["hbm_bytes_per_device"] == int(0.75 * H100_MEMORY)
    assert h100["fits"]
    assert per_device["params"] + per_device["optimizer"] < per_device["total"]


def test_the_estimate_is_a_labelled_roofline_of_the_model_flops(h100):
    # The CUDA compiler counts no FLOPs without a GPU: none is claimed for it.
    assert h100["compiler_flops_per_step"] is None
    assert "the model's count" in h100["estimate_from"]
    assert "HBM bytes" in h100["estimate_from"]
    flops_seconds = h100["model_flops_per_step"] / 8 / H100_BF16_PEAK
    # A step reads and writes at least every parameter and both moments once.
    state = h100["bytes_per_device"]["params"] + h100["bytes_per_device"]["optimizer"]
    assert h100["hbm_traffic_per_device"] >= 2 * state
    bytes_seconds = h100["hbm_traffic_per_device"] / H100_BANDWIDTH
    assert h100["estimated_step_seconds"] == pytest.approx(max(flops_seconds, bytes_seconds))
    assert 0 < h100["estimated_mfu"] <= 1
    table = describe({**h100, "compile_seconds": 1.0})
    assert "not a measurement" in table and "59.33 GiB: fits" in table


@pytest.fixture(scope="module")
def two_hosts():
    """The tiny run on two hosts of eight H100s: parameters split over the 8 GPUs of a
    host (fsdp), the hosts data-parallel."""
    config = tiny(**{"mesh.data": 2, "mesh.fsdp": 8, "data.batch_size": 32})
    return compile_for_slice(config, "h100-8x2", decode=False)


def test_two_hosts_split_the_parameters_by_fsdp(h100, two_hosts):
    assert (two_hosts["chips"], two_hosts["hosts"]) == (16, 2)
    assert two_hosts["grid"] == "h100:2x8"
    assert two_hosts["mesh"] == {"data": 2, "fsdp": 8, "tensor": 1}
    params = h100["parameters"]
    # Within 5% of count x 4 bytes / 8 (a few small vectors stay whole).
    assert two_hosts["bytes_per_device"]["params"] == pytest.approx(params * 4 / 8, rel=0.05)
    assert two_hosts["fits"]
    assert two_hosts["bytes_per_device"]["total"] < h100["bytes_per_device"]["total"]


class _UnpackedBatches:
    """The tiny translation task fed rows without segment arrays (one sentence pair a
    row, padding after it): the attention masks are padding masks, which cuDNN takes."""

    def __init__(self, task):
        self._task = task

    def __getattr__(self, name):
        return getattr(self._task, name)

    def batch_shapes(self, rows):
        shapes = self._task.batch_shapes(rows)
        return {k: v for k, v in shapes.items() if k in ("source", "target_in", "target_out")}


def test_cudnn_attention_is_in_the_compiled_gpu_step():
    config = tiny(**{"mesh.data": -1, "data.pack": False})
    machine = target_named("h100-8")
    devices = compile_only_devices(machine)
    step = compile_train_step(config, lambda c: _UnpackedBatches(compile_task(c)), devices, 1)
    report = train_step_report(step, machine)
    # (The report's attention_kernel predicts for train.py's batches, which carry segment
    # arrays and so take Triton; these rows carry none.)
    calls = report["custom_calls"]
    # Forward and backward cuDNN fused attention, found in the compiled HLO.
    assert "__cudnn$fmhaSoftmax" in calls and "__cudnn$fmhaSoftmaxBackward" in calls, calls


def run_compile(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "jaxtrans.compile", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=env,
    )


def test_the_command_needs_no_environment_variables():
    """A user types the command alone: no JAX_PLATFORMS, no CUDA check variable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_PLATFORMS", "JAX_SKIP_CUDA_CONSTRAINTS_CHECK")
    }
    overrides = [f"--config.{k}={v}" for k, v in TINY.items()]
    printed = run_compile(
        "--config", "configs/demo.py", "--topology", "h100-1", "--json", *overrides, env=env
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stderr == ""  # nothing from the CUDA plugin
    report = json.loads(printed.stdout)
    assert report["device_kind"] == "NVIDIA H100 80GB HBM3" and report["fits"]
    assert report["decode"]["fits"] and report["decode"]["program"].startswith("beam 4")


@pytest.mark.parametrize(
    ("topology", "says"),
    [
        ("h800-8", "--topology h800-8: unknown GPU machine; use a GPU and how many"),
        ("h100-8x2", "--topology h100-8x2 has 16 devices"),
    ],
)
def test_bad_topologies_are_one_line_and_exit_status_2(topology, says):
    extra = ["--config.mesh.data=32"] if "16 devices" in says else []
    result = run_compile("--config", "configs/demo.py", "--topology", topology, *extra)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
    if "unknown" in says:
        assert re.search(r"a100-8, h100-8, h200-8, b200-8", result.stderr)
