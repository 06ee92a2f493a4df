"""``python -m jaxtrans.compile`` / ``jaxtrans-compile``: a run's train step (and its
beam-search decoding) compiled for a TPU slice or a GPU machine that is not there, and
what the compiler says of it: memory per device against the device's, FLOPs, an estimate
of the step time. Nothing is allocated and no data is read; libtpu or jax's CUDA plugin
compiles, on any machine (no GPU or driver needed).

The step is train.py's (jaxtrans.compiling.ahead_of_time): the config's mesh and rules,
batch rows, grad accumulation, remat, dtypes, donation. ``--find_batch`` searches the
largest batch that fits, with the config's remat setting and with the other one.
"""

import json
import os
import sys
import time

from absl import flags

from jaxtrans.programs.cli import define_config_flag, fail, parse_flags, run

USAGE = """usage: python -m jaxtrans.compile --config configs/NAME.py --topology SLICE
                   [--json] [--find_batch] [--config.KEY=VALUE ...]

Compiles the train step that train.py would run with the config on SLICE, a TPU slice
(v5e-8, v6e-8, v4-32, v5p-128, ... or a chip grid such as v5e:4x8) or a GPU machine
(h100-8, a100-8, h200-8, b200-8; h100-8x2 for two hosts of 8), without one, and prints
per device the bytes of parameters, optimizer state, batch and temporaries against the
device's memory, the FLOPs of a step, and an estimate of its time (tokens/s, MFU); then
the same for the beam-search decoding at eval.batch_size. Needs libtpu for TPUs,
pip install -c constraints.txt -e ".[tpu-compile]", and jax's CUDA plugin for GPUs,
pip install -c constraints.txt -e ".[gpu-compile]"."""


def _define(values: flags.FlagValues) -> None:
    define_config_flag(values)
    flags.DEFINE_string(
        "topology",
        None,
        "The TPU slice: v5e-N / v6e-N (N chips), v4-N / v5p-N (N TensorCores), or a chip "
        "grid such as v5e:4x8 or v5p:4x4x4; or the GPU machine: h100-8 (one host of 8 H100s; "
        "a100, h200, b200 likewise), h100-8x2 (two hosts of 8).",
        flag_values=values,
    )
    flags.DEFINE_boolean("json", False, "Print the results as one JSON object.", flag_values=values)
    flags.DEFINE_boolean(
        "find_batch",
        False,
        "Search the largest data.batch_size (rows) that fits, with and without remat.",
        flag_values=values,
    )
    flags.DEFINE_boolean(
        "decode", True, "Also compile the beam-search decoding (translation).", flag_values=values
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if values.config is None:
        fail("--config is required, e.g. --config configs/base.py")
    if not values.topology:
        fail("--topology is required, e.g. --topology v5e-8 or h100-8 (see --help)")
    # This host only traces; the programs are compiled for the slice (libtpu) or the GPUs
    # (the CUDA plugin, whose check of the CUDA libraries needs a GPU: skipped).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")

    def compile_() -> None:
        from jaxtrans.compiling.compile_report import compile_for_slice, describe  # imports JAX

        start = time.perf_counter()
        report = compile_for_slice(
            values.config, values.topology, find_batch=values.find_batch, decode=values.decode
        )
        report["compile_seconds"] = round(time.perf_counter() - start, 1)
        if values.json:
            print(json.dumps(report, indent=2))
        else:
            print(describe(report))

    run(compile_)


if __name__ == "__main__":
    main()
