"""Which JAX platforms a program may use, chosen before JAX starts a backend.

With ``JAX_PLATFORMS`` unset, JAX tries every backend it knows, TPU included, whenever
libtpu is installed (the ``tpu-compile`` extra installs it to compile for TPU slices from
any machine). On a machine without TPU chips, libtpu then writes its own lines to stderr
("Failed to find host bounds for accelerator type", "unexpected worker hostname"), or
fails on ``/tmp/libtpu_lockfile`` when another JAX process on the host holds it, and every
program's output carries them. So where the machine has no accelerator at all (no TPU on
its PCI bus or under /dev, no GPU device), the programs use the CPU platform only, which is
what JAX would have chosen anyway. A ``JAX_PLATFORMS`` the user set is left as it is, and
so is every machine with a TPU or a GPU. Compiling for a TPU slice
(``python -m jaxtrans.compile``) loads libtpu for its topology on its own
(jaxtrans.compiling.tpu_topologies), whatever the platforms.
"""

import glob
import os
import sys

GOOGLE_PCI_VENDOR = "0x1ae0"  # the PCI vendor of every TPU chip


def has_tpu() -> bool:
    """Whether a TPU may be attached: a Google PCI device, a TPU device file, or the
    environment of a TPU VM (JAX's own test reads the same PCI vendor files)."""
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return True
    if any(os.environ.get(name) for name in ("TPU_ACCELERATOR_TYPE", "JAX_FORCE_TPU_INIT")):
        return True
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor, encoding="ascii") as f:
                if f.read().strip() == GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def has_gpu() -> bool:
    """Whether an NVIDIA or AMD GPU's device file is present."""
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


def cpu_only_without_accelerators() -> None:
    """Use the CPU platform alone where no platforms were chosen and the machine has
    neither a TPU nor a GPU: ``JAX_PLATFORMS=cpu`` (for JAX imported later, and child
    processes) and, where JAX is imported already (it reads the variable then), its
    ``jax_platforms`` option. Call before JAX starts a backend."""
    if "JAX_PLATFORMS" in os.environ or has_tpu() or has_gpu():
        return
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_platforms:
        return  # chosen in code
    os.environ["JAX_PLATFORMS"] = "cpu"
    if jax is not None:
        jax.config.update("jax_platforms", "cpu")
