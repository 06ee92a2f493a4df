"""The TPU slices people rent, by their public names, and compile-only devices for them.

A slice is named as Cloud TPU names it (``v5e-8``, ``v6e-256``: chips; ``v4-32``,
``v5p-128``: TensorCores, two per chip) or by its chip grid (``v5e:4x8``, ``v5p:4x4x4``).
``compile_only_devices`` gives the slice's devices as libtpu describes them, on any
machine: programs can be lowered and compiled for them, not run (``python -m
jaxtrans.compile``). libtpu is the ``tpu-compile`` extra, ``pip install "jax[tpu]"``.

GENERATIONS   per chip: HBM, bf16 peak FLOP/s, HBM bandwidth, grid, cores in a name
Slice         a named slice: chips, hosts, grid, HBM and peak per chip
slice_named   a public name or chip grid -> Slice (UserError for an unknown one)
"""

import math
import os
import re
from dataclasses import dataclass

from jaxtrans.errors import UserError, describe

GIB = 2**30
INSTALL = 'pip install -c constraints.txt -e ".[tpu-compile]"'


@dataclass(frozen=True)
class Generation:
    """One TPU generation, per chip (Cloud TPU documentation, system architecture)."""

    hbm_bytes: int
    peak_bf16_flops: float
    hbm_bytes_per_second: float
    grid_rank: int  # 2: a 2D torus of chips (v5e, v6e); 3: 3D (v4, v5p)
    cores_in_name: int  # TensorCores a chip adds to a public name (v4-8: 4 chips)
    libtpu_name: str  # the generation in libtpu's topology names
    megacore: bool  # one JAX device per chip made of its two TensorCores


GENERATIONS = {
    "v4": Generation(32 * GIB, 275e12, 1228e9, 3, 2, "v4", True),
    "v5e": Generation(16 * GIB, 197e12, 819e9, 2, 1, "v5e", False),
    "v5p": Generation(95 * GIB, 459e12, 2765e9, 3, 2, "v5", True),
    "v6e": Generation(32 * GIB, 918e12, 1640e9, 2, 1, "v6e", False),
}
# The chip grid of each slice size, as Cloud TPU lays them out.
GRIDS = {
    2: {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8),
        128: (8, 16), 256: (16, 16)},
    3: {4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
        128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16),
        2048: (8, 16, 16), 4096: (16, 16, 16)},
}  # fmt: skip


@dataclass(frozen=True)
class Slice:
    """A TPU slice: its generation, chip grid and what follows from them."""

    name: str  # the public name, e.g. v5e-8
    generation: str
    grid: tuple[int, ...]
    platform = "tpu"

    @property
    def spec(self) -> Generation:
        return GENERATIONS[self.generation]

    @property
    def layout(self) -> str:
        return f"{self.generation}:{self.grid_text}"

    @property
    def hbm_bytes(self) -> int:
        return self.spec.hbm_bytes

    @property
    def peak_bf16_flops(self) -> float:
        return self.spec.peak_bf16_flops

    @property
    def hbm_bytes_per_second(self) -> float:
        return self.spec.hbm_bytes_per_second

    @property
    def memory_note(self) -> str:
        return "HBM"

    @property
    def chips(self) -> int:
        return math.prod(self.grid)

    @property
    def chips_per_host(self) -> tuple[int, int, int]:
        """The chips of one host: 8 on the single-host v5e/v6e slices of 8, else 2x2
        (a slice of one chip is its own host)."""
        if self.chips == 1:
            return (1, 1, 1)
        if self.spec.grid_rank == 2 and self.chips == 8:
            return (2, 4, 1)
        return (2, 2, 1)

    @property
    def hosts(self) -> int:
        return max(self.chips // math.prod(self.chips_per_host), 1)

    @property
    def grid_text(self) -> str:
        return "x".join(map(str, self.grid))

    @property
    def wraps(self) -> tuple[bool, bool, bool]:
        """Which grid dimensions close into a ring (the larger slices' torus links)."""
        if self.spec.grid_rank == 3:
            full = self.chips >= 64
            return (full, full, full)
        return tuple(size >= 16 for size in self.grid) + (False,)  # type: ignore[return-value]


def public_name(generation: str, chips: int) -> str:
    return f"{generation}-{chips * GENERATIONS[generation].cores_in_name}"


def known_names() -> list[str]:
    """Every public slice name of the table, smallest first per generation."""
    return [
        public_name(gen, chips)
        for gen, spec in GENERATIONS.items()
        for chips in GRIDS[spec.grid_rank]
    ]


def slice_named(name: str) -> Slice:
    """``v5e-8`` / ``v4-32`` / ``v5p-128`` or ``v5e:2x4`` / ``v4:2x2x4`` -> Slice."""
    text = name.strip().lower()
    grid_form = re.fullmatch(r"(v\d+[a-z]?):(\d+(?:x\d+)+)", text)
    named = re.fullmatch(r"(v\d+[a-z]?)-(\d+)", text)
    generation = (grid_form or named).group(1) if (grid_form or named) else ""
    generation = {"v5": "v5p", "v5litepod": "v5e", "v6": "v6e"}.get(generation, generation)
    if generation not in GENERATIONS:
        raise UserError(
            f"--topology {name}: unknown TPU; use a slice name such as v5e-8, v6e-8, "
            f"v4-32 or v5p-128, or a chip grid such as v5e:4x8 ({', '.join(GENERATIONS)})"
        )
    spec = GENERATIONS[generation]
    if grid_form:
        grid = tuple(int(n) for n in grid_form.group(2).split("x"))
        if len(grid) != spec.grid_rank or min(grid) < 1:
            raise UserError(
                f"--topology {name}: a {generation} grid has {spec.grid_rank} dimensions "
                f"of at least 1, e.g. {generation}:{'x'.join(['2'] * spec.grid_rank)}"
            )
        return Slice(public_name(generation, math.prod(grid)), generation, grid)
    count = int(named.group(2))
    chips, rest = divmod(count, spec.cores_in_name)
    if rest or chips not in GRIDS[spec.grid_rank]:
        sizes = ", ".join(public_name(generation, c) for c in GRIDS[spec.grid_rank])
        raise UserError(f"--topology {name}: no such {generation} slice; use one of {sizes}")
    return Slice(public_name(generation, chips), generation, GRIDS[spec.grid_rank][chips])


def quiet_libtpu() -> None:
    """Tell libtpu it is not on a TPU host, so that loading it for compilation neither
    prints warnings about the host it cannot find nor waits for the chips' lock (set
    before libtpu is loaded)."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # Any jax process on this host that saw libtpu may hold its lock on the (absent) chips.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")


def compile_only_devices(slice_: Slice) -> list:
    """The slice's devices, to compile for (not run on); UserError without libtpu."""
    quiet_libtpu()
    try:
        import libtpu  # noqa: F401  (only to say what is missing)
    except ImportError:
        raise UserError(f"compiling for a TPU needs libtpu: {INSTALL}") from None
    from jax.experimental import topologies

    spec = slice_.spec
    try:
        topology = topologies.get_topology_desc(
            topology_name=f"{spec.libtpu_name}:{slice_.grid_text}",
            platform="tpu",
            chip_config_name="megacore" if spec.megacore else "default",
            chips_per_host_bounds=slice_.chips_per_host,
            wrap=slice_.wraps,
        )
    except Exception as error:  # libtpu's own words for a grid it does not build
        raise UserError(
            f"--topology {slice_.name} ({slice_.generation}:{slice_.grid_text}): libtpu "
            f"cannot lay it out ({describe(error)}); use a slice name such as {slice_.generation}-8"
        ) from error
    return list(topology.devices)
