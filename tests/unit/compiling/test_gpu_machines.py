"""The GPU machine table: names -> GPUs per host and hosts; every GPU of the table is one
the CUDA plugin describes and compiles cuDNN attention for, without a GPU; bad names are
one-line errors that list the known ones."""

import re

import jax
import jax.numpy as jnp
import pytest

from jaxtrans.compiling import gpu_machines
from jaxtrans.compiling.compile_targets import target_named
from jaxtrans.compiling.gpu_machines import GPUS, machine_named
from jaxtrans.compiling.tpu_topologies import Slice
from jaxtrans.errors import UserError


@pytest.mark.parametrize(
    ("name", "gpu", "per_host", "hosts"),
    [
        ("h100-8", "h100", 8, 1),
        ("h100-1", "h100", 1, 1),
        ("A100-4", "a100", 4, 1),
        ("h100-8x2", "h100", 8, 2),
        ("b200-8x4", "b200", 8, 4),
        ("h200-8x1", "h200", 8, 1),
    ],
)
def test_machines_by_name(name, gpu, per_host, hosts):
    machine = machine_named(name)
    assert (machine.gpu_model, machine.gpus_per_host, machine.hosts) == (gpu, per_host, hosts)
    assert machine.chips == per_host * hosts
    assert target_named(name) == machine
    assert machine.platform == "gpu"


def test_tpu_names_stay_tpu_slices():
    assert isinstance(target_named("v5e-8"), Slice)
    assert target_named("v5e-8").platform == "tpu"


def test_usable_memory_is_the_allocators_share(monkeypatch):
    # JAX preallocates 75% of a GPU's memory unless XLA_PYTHON_CLIENT_MEM_FRACTION says
    # otherwise (jax.readthedocs.io, GPU memory allocation).
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    h100 = machine_named("h100-8")
    assert h100.hbm_bytes == int(0.75 * 84942979072)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    assert h100.hbm_bytes == int(0.9 * 84942979072)


def test_the_datasheet_figures():
    # Dense bf16 peak (half the datasheets' 2:4 sparsity figure) and HBM bandwidth.
    assert GPUS["h100"].peak_bf16_flops == 989e12
    assert GPUS["a100"].peak_bf16_flops == 312e12
    assert GPUS["h200"].hbm_bytes_per_second > GPUS["h100"].hbm_bytes_per_second
    assert GPUS["b200"].peak_bf16_flops > 2 * GPUS["h100"].peak_bf16_flops


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("h800-8", "unknown GPU machine; use a GPU and how many on one host: a100-8, h100-8"),
        ("h100-3", "a host holds 1, 2, 4 or 8 GPUs"),
        ("h100-4x2", "several hosts 8 each"),
        ("gpu-8", "unknown accelerator; use a TPU slice (v5e-8"),
    ],
)
def test_bad_names_say_what_to_use(name, says):
    with pytest.raises(UserError, match=re.escape(says)) as error:
        target_named(name)
    assert "\n" not in str(error.value)
    if "unknown GPU" in says:
        assert all(f"{gpu}-8" in str(error.value) for gpu in GPUS)


@pytest.mark.slow
@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_every_gpu_of_the_table_compiles_cudnn_attention(gpu):
    """Each architecture (sm_80, sm_90a, sm_100a) is one the pinned plugin and ptxas
    build for: the devices say their name, and cuDNN's fused attention compiles."""
    devices = gpu_machines.compile_only_devices(machine_named(f"{gpu}-8x2"))
    assert len(devices) == 16
    assert sorted({d.process_index for d in devices}) == [0, 1]
    assert devices[0].device_kind == GPUS[gpu].name
    placed = jax.sharding.SingleDeviceSharding(devices[0])
    shape = jax.ShapeDtypeStruct((2, 64, 4, 64), jnp.bfloat16, sharding=placed)

    def loss(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, implementation="cudnn").sum()

    compiled = jax.jit(jax.grad(loss)).lower(shape, shape, shape).compile()
    calls = set(re.findall(r'custom_call_target="([^"]+)"', compiled.as_text()))
    assert {"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"} <= calls


def test_without_the_cuda_plugin_the_error_names_the_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jax_plugins.xla_cuda12", None)  # its import fails
    with pytest.raises(UserError, match=r"needs jax's CUDA plugin: pip install .*\[gpu-compile\]"):
        gpu_machines.compile_only_devices(machine_named("h100-8"))
