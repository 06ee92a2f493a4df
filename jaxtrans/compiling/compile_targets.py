"""What ``python -m jaxtrans.compile --topology NAME`` compiles for: a TPU slice
(tpu_topologies: ``v5e-8``, ``v5p-128``, ``v5e:4x8``) or a GPU machine (gpu_machines:
``h100-8``, ``h100-8x2``), and its compile-only devices.

Both kinds answer the same questions: ``name``, ``platform`` ("tpu" / "gpu"), ``chips``
(devices), ``hosts``, ``layout`` (the grid or hosts x GPUs), ``hbm_bytes`` (what a step may
use on each device), ``memory_note`` (what that is), ``peak_bf16_flops`` and
``hbm_bytes_per_second`` per device.

target_named          a --topology name -> Slice | GpuMachine
compile_only_devices  the target's devices, to compile for (not run on)
"""

import re

from jaxtrans.compiling import gpu_machines, tpu_topologies
from jaxtrans.errors import UserError

Target = tpu_topologies.Slice | gpu_machines.GpuMachine


def target_named(name: str) -> Target:
    """A TPU slice for names of TPU generations (v4, v5e, ...), a GPU machine for names
    of GPUs (h100-8); an unknown name is a one-line error that lists both kinds."""
    text = name.strip().lower()
    if re.match(r"v\d", text):
        return tpu_topologies.slice_named(name)
    if re.match(r"[a-z]+\d+-", text):  # a GPU's name: h100-8, or an unknown one, h800-8
        return gpu_machines.machine_named(name)
    raise UserError(
        f"--topology {name}: unknown accelerator; use a TPU slice (v5e-8, v6e-8, v4-32, "
        f"v5p-128) or a GPU machine ({', '.join(f'{gpu}-8' for gpu in gpu_machines.GPUS)}, "
        "h100-8x2 for two hosts)"
    )


def compile_only_devices(target: Target) -> list:
    if isinstance(target, gpu_machines.GpuMachine):
        return gpu_machines.compile_only_devices(target)
    return tpu_topologies.compile_only_devices(target)
