"""What the compiler says of a compiled program: memory per device, FLOPs, its own
estimate of the time, the custom calls (kernels) in it. Read from ``jax.stages.Compiled``
(``jax.jit(f).lower(...).compile()``), for any backend that answers; TPU compilers answer
all of it. The CUDA compiler, compiling for devices it does not have, gives the memory
but no cost analysis: there the bytes accessed are XLA's HLO cost analysis of the
compiled module, run by this host's CPU client.

ProgramCost      peak and argument bytes per device, FLOPs per device, estimated seconds
program_cost     a Compiled -> ProgramCost
compile_or_cost  a Lowered -> its ProgramCost, also when it does not fit the device
bytes_per_device the bytes of one device's shards of a tree of arrays and its shardings
"""

import math
import re
from dataclasses import dataclass, field

import jax

from jaxtrans.compiling.program_bytes import hbm_bytes


@dataclass(frozen=True)
class ProgramCost:
    """One device's view of a compiled SPMD program (every device runs the same one)."""

    peak_bytes: int  # the most memory live at once: arguments, outputs, temporaries, code
    argument_bytes: int  # its inputs (donated ones are reused for outputs)
    flops: float  # the compiler's count; a loop's body counted once
    bytes_accessed: float  # the compiler's count of bytes read and written
    # The compiler's cost-model estimate of one execution; None where it gives none (the
    # TPU compiler answers a negative number for some large programs).
    seconds: float | None
    custom_calls: tuple[str, ...]  # custom-call targets, e.g. tpu_custom_call (a Pallas kernel)
    # The compiler's own words where it refused the program for want of memory (then only
    # the bytes are known: the arguments and the temporaries it asked for).
    out_of_memory: str | None = None
    # True where the compiler gave no cost analysis and bytes_accessed is the HLO cost
    # analysis of the compiled module (flops then 0: that count misses the kernels that
    # are custom calls, cuDNN attention, cuBLAS matmuls).
    bytes_from_hlo: bool = False
    # The bytes its operations read and write in HBM, from its HLO (program_bytes): what a
    # roofline should divide by the HBM bandwidth (the compiler's bytes_accessed counts the
    # on-chip memories' traffic too on a TPU).
    hbm_bytes: float = 0.0
    # The compiled program's HLO text (benchmarks/step_bytes.py reads its operations).
    text: str = field(default="", repr=False, compare=False)


def program_cost(compiled: jax.stages.Compiled) -> ProgramCost:
    memory = compiled.memory_analysis()
    peak = int(getattr(memory, "peak_memory_in_bytes", 0) or 0)
    arguments = int(memory.argument_size_in_bytes)
    if not peak:  # a backend without the peak: everything at once
        peak = (
            arguments
            + memory.output_size_in_bytes
            - memory.alias_size_in_bytes
            + memory.temp_size_in_bytes
            + memory.generated_code_size_in_bytes
        )
    cost = compiled.cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per program
        cost = cost[0] if cost else {}
    cost = cost or {}
    seconds = cost.get("optimal_seconds")
    text = compiled.as_text() or ""
    calls = sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))
    from_hlo = not cost
    return ProgramCost(
        peak_bytes=peak,
        argument_bytes=arguments,
        flops=float(cost.get("flops", 0.0)),
        bytes_accessed=float(
            cost.get("bytes accessed", 0.0) if cost else hlo_bytes_accessed(compiled)
        ),
        seconds=float(seconds) if seconds is not None and seconds > 0 else None,
        custom_calls=tuple(calls),
        bytes_from_hlo=from_hlo,
        hbm_bytes=hbm_bytes(text),
        text=text,
    )


def hlo_bytes_accessed(compiled: jax.stages.Compiled) -> float:
    """The bytes read and written by the compiled module's operations (fusions, kernels
    as custom calls: their operands and results), by XLA's HLO cost analysis run on this
    host's CPU client; 0 where that cannot run. For backends that give no cost analysis
    of their own (the CUDA compiler without a GPU)."""
    try:  # jax has no public call for it; its own cost_analysis() uses the same function
        from jax._src import xla_bridge
        from jax._src.lib import xla_client

        module = compiled.runtime_executable().hlo_modules()[0]
        counts = xla_client._xla.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), module)
        return float(counts.get("bytes accessed", 0.0))
    except Exception:  # noqa: BLE001 - no CPU client or another jax: no count, said so
        return 0.0


# "... the total memory required for HLO temporaries (27.28G) exceeds available HBM ..."
_TEMPORARIES = re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT]?)\)")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def compile_or_cost(lowered: jax.stages.Lowered, argument_bytes: int) -> ProgramCost:
    """Compile ``lowered`` and read its cost; a program the compiler refuses because it
    does not fit the device's memory is a ProgramCost too (``out_of_memory``), its peak
    the arguments plus the temporaries the compiler said it needs."""
    try:
        return program_cost(lowered.compile())
    except jax.errors.JaxRuntimeError as error:
        message = str(error)
        if "RESOURCE_EXHAUSTED" not in message:
            raise
        found = _TEMPORARIES.search(message)
        temporaries = int(float(found.group(1)) * _UNITS[found.group(2)]) if found else 0
        return ProgramCost(
            peak_bytes=argument_bytes + temporaries,
            argument_bytes=argument_bytes,
            flops=0.0,
            bytes_accessed=0.0,
            seconds=None,
            custom_calls=(),
            out_of_memory=message.strip().splitlines()[0],
        )


def bytes_per_device(abstract_tree, shardings) -> int:
    """The bytes of the largest device's shards of every leaf: shapes from
    ``abstract_tree`` (arrays or ShapeDtypeStructs), layouts from ``shardings`` (a tree of
    the same structure, or one sharding for every leaf)."""
    leaves = jax.tree.leaves(abstract_tree)
    if isinstance(shardings, jax.sharding.Sharding):
        layouts = [shardings] * len(leaves)
    else:
        layouts = jax.tree.leaves(shardings)
    total = 0
    for leaf, layout in zip(leaves, layouts, strict=True):
        shape = layout.shard_shape(leaf.shape) if leaf.shape else ()
        total += math.prod(shape) * jax.numpy.dtype(leaf.dtype).itemsize
    return total
