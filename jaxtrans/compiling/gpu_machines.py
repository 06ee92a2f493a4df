"""The NVIDIA GPU machines people rent, by name, and compile-only devices for them.

A machine is named by its GPU and how many of them: ``h100-8`` (one host of eight H100s),
``h100-1``, ``h100-4``, or several hosts of eight, ``h100-8x2`` (two hosts, 16 GPUs),
``h100-8x4``. ``compile_only_devices`` gives its devices as the CUDA compiler describes
them from a target description (XLA's ``GpuTargetConfigProto`` as text, written from
GPUS), on any machine, without a GPU or a driver: programs can be lowered and compiled for
them (PTX assembled by ptxas, cuDNN and Triton kernels as custom calls), not run. The
install is the ``gpu-compile`` extra: jax's CUDA plugin and NVIDIA's ptxas and libdevice.

GPUS         per GPU: the compiler's target description, memory, bf16 peak, HBM bandwidth
GpuMachine   a named machine: GPUs per host, hosts, and the GPU's figures
machine_named  ``h100-8`` / ``h100-8x2`` -> GpuMachine (UserError for an unknown one)
compile_only_devices  GpuMachine -> its devices, to compile for
"""

import os
import re
from dataclasses import dataclass

from jaxtrans.errors import UserError, describe

GIB = 2**30
INSTALL = 'pip install -c constraints.txt -e ".[gpu-compile]"'
# The share of a GPU's memory that JAX's allocator takes at start (its default; the
# XLA_PYTHON_CLIENT_MEM_FRACTION variable sets another): a step fits when its peak does.
DEFAULT_MEMORY_FRACTION = 0.75


@dataclass(frozen=True)
class Gpu:
    """One GPU model. The first fields are the compiler's target description, as XLA's
    own (xla/backends/gpu/target_config/specs/<name>.txtpb); the last two are the vendor's
    datasheet figures the time estimate divides by."""

    name: str  # the device's name, as CUDA reports it
    compute_capability: tuple[int, int]
    sm_count: int  # streaming multiprocessors ("cores" in XLA's description)
    fpus_per_sm: int
    shared_memory_per_sm: int  # bytes
    shared_memory_per_block_optin: int  # bytes
    l2_cache_bytes: int
    clock_ghz: float
    memory_bytes: int  # the device's memory as CUDA reports it (a little under the label)
    peak_bf16_flops: float  # dense (without the 2:4 sparsity the datasheets also quote)
    hbm_bytes_per_second: float


# Sources: XLA's target descriptions (github.com/openxla/xla, xla/backends/gpu/
# target_config/specs/a100_sxm_80.txtpb, h100_sxm.txtpb, h200.txtpb, b200.txtpb) for
# the first fields; NVIDIA's datasheets for peak and bandwidth: A100 80GB SXM (BF16 312
# TFLOP/s, 2,039 GB/s), H100 SXM (BF16 1,979 TFLOP/s with sparsity: 989 dense, 3.35 TB/s),
# H200 SXM (989 dense, 4.8 TB/s), HGX B200 (BF16 4.5 PFLOP/s with sparsity: 2.25 dense,
# 8 TB/s).
GPUS = {
    "a100": Gpu(
        "NVIDIA A100-SXM4-80GB", (8, 0), 108, 64, 167936, 166912, 41943040, 1.41,
        85100068864, 312e12, 2039e9,
    ),
    "h100": Gpu(
        "NVIDIA H100 80GB HBM3", (9, 0), 132, 128, 233472, 232448, 52428800, 1.98,
        84942979072, 989e12, 3350e9,
    ),
    "h200": Gpu(
        "NVIDIA H200 141GB HBM3e", (9, 0), 132, 128, 233472, 232448, 52428800, 1.98,
        151397597184, 989e12, 4800e9,
    ),
    "b200": Gpu(
        "NVIDIA B200", (10, 0), 148, 128, 233472, 232448, 132644864, 1.965,
        191514411008, 2250e12, 8000e9,
    ),
}  # fmt: skip
# GPUs a host holds in the names without hosts (h100-4); several hosts are of eight.
GPUS_PER_HOST = (1, 2, 4, 8)
# The cuDNN version the description names: deviceless cuDNN compilation needs 9.8 or later.
_CUDNN = (9, 10)


def target_description(gpu: Gpu) -> str:
    """``gpu`` as the text of XLA's stream_executor.GpuTargetConfigProto (what the CUDA
    compiler reads instead of asking a device)."""
    major, minor = gpu.compute_capability
    # "a" targets (sm_90a, sm_100a): the architecture-specific instructions cuDNN and
    # the Hopper/Blackwell kernels use, as XLA's own descriptions ask for.
    extension = "ACCELERATED_FEATURES" if major >= 9 else "NONE"
    return f"""
gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: {gpu.shared_memory_per_sm}
  threads_per_core_limit: 2048
  core_count: {gpu.sm_count}
  fpus_per_core: {gpu.fpus_per_sm}
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(gpu.hbm_bytes_per_second)}
  l2_cache_size: {gpu.l2_cache_bytes}
  clock_rate_ghz: {gpu.clock_ghz}
  device_memory_size: {gpu.memory_bytes}
  shared_memory_per_block_optin: {gpu.shared_memory_per_block_optin}
  cuda_compute_capability {{ major: {major} minor: {minor} feature_extension: {extension} }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: {_CUDNN[0]} minor: {_CUDNN[1]} }}
device_description_str: "{gpu.name}"
"""


def memory_fraction() -> float:
    """The share of each GPU's memory a JAX process allocates (XLA_PYTHON_CLIENT_MEM_FRACTION
    where this process has it, else JAX's default)."""
    text = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "")
    try:
        value = float(text) if text else DEFAULT_MEMORY_FRACTION
    except ValueError:
        raise UserError(
            f"XLA_PYTHON_CLIENT_MEM_FRACTION={text!r}: not a number; use e.g. 0.9"
        ) from None
    if not 0 < value <= 1:
        raise UserError(f"XLA_PYTHON_CLIENT_MEM_FRACTION={text}: use a share in (0, 1]")
    return value


@dataclass(frozen=True)
class GpuMachine:
    """Hosts of GPUs of one model, each host with ``gpus_per_host`` of them."""

    name: str  # e.g. h100-8x2
    gpu_model: str  # a key of GPUS
    gpus_per_host: int
    hosts: int
    platform = "gpu"

    @property
    def gpu(self) -> Gpu:
        return GPUS[self.gpu_model]

    @property
    def chips(self) -> int:
        return self.gpus_per_host * self.hosts

    @property
    def layout(self) -> str:
        return f"{self.gpu_model}:{self.hosts}x{self.gpus_per_host}"

    @property
    def hbm_bytes(self) -> int:
        """The memory a step may use on each GPU: JAX's allocator's share of it."""
        return int(self.gpu.memory_bytes * memory_fraction())

    @property
    def peak_bf16_flops(self) -> float:
        return self.gpu.peak_bf16_flops

    @property
    def hbm_bytes_per_second(self) -> float:
        return self.gpu.hbm_bytes_per_second

    @property
    def memory_note(self) -> str:
        """How hbm_bytes follows from the GPU's memory, for the report."""
        return (
            f"{memory_fraction():.0%} of {self.gpu.memory_bytes / GIB:.1f} GiB: JAX's "
            "allocator's share, XLA_PYTHON_CLIENT_MEM_FRACTION"
        )


def known_names() -> list[str]:
    return [f"{gpu}-{n}" for gpu in GPUS for n in GPUS_PER_HOST] + [f"{gpu}-8xN" for gpu in GPUS]


def machine_named(name: str) -> GpuMachine:
    """``h100-8`` (one host of 8), ``a100-4``, ``h100-8x4`` (four hosts of 8) -> GpuMachine."""
    text = name.strip().lower()
    found = re.fullmatch(r"([a-z]+\d+)-(\d+)(?:x(\d+))?", text)
    if not found or found.group(1) not in GPUS:
        raise UserError(
            f"--topology {name}: unknown GPU machine; use a GPU and how many on one host: "
            f"{', '.join(f'{gpu}-8' for gpu in GPUS)} (or -1, -2, -4), or hosts of 8: h100-8x2"
        )
    gpu, per_host, hosts = found.group(1), int(found.group(2)), int(found.group(3) or 1)
    if per_host not in GPUS_PER_HOST or (found.group(3) and (per_host != 8 or hosts < 1)):
        raise UserError(
            f"--topology {name}: a host holds 1, 2, 4 or 8 GPUs, and several hosts 8 each; "
            f"use e.g. {gpu}-8 or {gpu}-8x2"
        )
    canonical = f"{gpu}-{per_host}" + (f"x{hosts}" if found.group(3) else "")
    return GpuMachine(canonical, gpu, per_host, hosts)


def compile_only_devices(machine: GpuMachine) -> list:
    """The machine's devices, to compile for (not run on); UserError without the CUDA
    plugin. This process's own backend stays as it is (the CPU, JAX_PLATFORMS=cpu)."""
    # The plugin checks the CUDA libraries against a GPU when it starts on a backend list
    # that includes CUDA; compiling needs no GPU, so that check has nothing to check.
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    try:
        import jax_plugins.xla_cuda12  # noqa: F401  (only to say what is missing)
    except ImportError:
        raise UserError(f"compiling for a GPU needs jax's CUDA plugin: {INSTALL}") from None
    from jax.experimental import topologies

    try:
        topology = topologies.get_topology_desc(
            platform="cuda",
            target_config=target_description(machine.gpu),
            topology=f"1x{machine.hosts}x{machine.gpus_per_host}",
        )
    except Exception as error:  # the plugin's own words for what it cannot build
        raise UserError(
            f"--topology {machine.name}: the CUDA plugin cannot describe it "
            f"({describe(error)}); reinstall with {INSTALL}"
        ) from error
    return list(topology.devices)
