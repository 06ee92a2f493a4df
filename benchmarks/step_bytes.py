"""Where a train step's bytes go: the operations of the compiled program, largest first.

The compile report's "bytes accessed" is one number, the compiler's count over the whole
program; its roofline estimate of the step time rests on it. This script compiles a run's
train step as ``python -m jaxtrans.compile`` does (compile-only devices, nothing
allocated) and splits its bytes by operation, and by HBM against on-chip memory, with
jaxtrans.compiling.program_bytes (the count the compile report's estimate rests on; loop bodies once
per trip, where the compiler's own count takes a body once).

    python benchmarks/step_bytes.py --config configs/base.py --topology v5e-8 --top 10
    python benchmarks/step_bytes.py --config configs/demo.py --topology v5e-8 --top 5
    python benchmarks/step_bytes.py ... --save_hlo /tmp/base.hlo   # then --from_hlo it

Prints a Markdown table: operation, its HLO kind, result shape, bytes (GB per device),
share of the whole, and the JAX operation it came from (the op_name metadata).
"""

import argparse
import json
import os
import re
import sys
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from jaxtrans.compiling.program_bytes import Operation, operations  # noqa: E402


def compile_step_text(argv: list[str]):
    """Compile the run's train step for the slice; (its ProgramCost, the slice)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from jaxtrans.compiling.ahead_of_time import compile_train_step
    from jaxtrans.compiling.compile_targets import compile_only_devices, target_named
    from jaxtrans.programs.cli import define_config_flag, parse_flags
    from jaxtrans.tasks import compile_task
    from jaxtrans.training.dropout_rng import partition_rng_on_tpu

    def define(values):
        from absl import flags

        define_config_flag(values)
        flags.DEFINE_string("topology", "v5e-8", "A TPU slice or GPU machine.", flag_values=values)

    values = parse_flags(["step_bytes", *argv], define, "step_bytes --config CONFIG --topology T")
    slice_ = target_named(values.topology)
    partition_rng_on_tpu(values.config.train.get("dropout_rng_impl", "threefry"))
    devices = compile_only_devices(slice_)
    step = compile_train_step(values.config, compile_task, devices, slice_.hosts)
    return step.cost, slice_


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--save_hlo", help="write the compiled program's HLO text here")
    parser.add_argument("--from_hlo", help="read a --save_hlo file instead of compiling")
    args, rest = parser.parse_known_args()
    if args.from_hlo:
        with open(args.from_hlo, encoding="utf-8") as file:
            text = file.read()
        header = json.loads(text.split("\n", 1)[0])
        cost = SimpleNamespace(text=text.split("\n", 1)[1], **header)
        slice_ = SimpleNamespace(name=header["topology"])
    else:
        cost, slice_ = compile_step_text(rest)
        if args.save_hlo:
            header = {
                "topology": slice_.name,
                "bytes_accessed": cost.bytes_accessed,
                "flops": cost.flops,
                "peak_bytes": cost.peak_bytes,
            }
            with open(args.save_hlo, "w", encoding="utf-8") as file:
                file.write(json.dumps(header) + "\n" + cost.text)
    ops = operations(cost.text)
    report(ops, cost, slice_.name, args.top)


def report(ops: list[Operation], cost, topology: str, top: int) -> None:
    """Print the tables: the largest operations, the bytes by JAX operation and by kind,
    and the roofline of the step from all bytes and from the HBM bytes alone."""
    from jaxtrans.compiling.compile_targets import target_named

    target = target_named(topology)
    total = sum(op.bytes for op in ops)
    hbm = sum(op.hbm for op in ops)
    flop_seconds = cost.flops / target.peak_bf16_flops
    print(
        f"{topology}, per device a step: the compiler counts {cost.bytes_accessed / 1e9:.2f} GB "
        f"accessed (loop bodies once) and {cost.flops / 1e12:.2f} TFLOP; peak memory "
        f"{cost.peak_bytes / 2**30:.2f} GiB. The operations below (loops unrolled) move "
        f"{total / 1e9:.2f} GB, {hbm / 1e9:.2f} GB of it in HBM, the rest in on-chip memory.\n"
        f"Roofline at {target.peak_bf16_flops / 1e12:.0f} TFLOP/s and "
        f"{target.hbm_bytes_per_second / 1e9:.0f} GB/s: FLOPs {flop_seconds * 1e3:.1f} ms, "
        f"all bytes {total / target.hbm_bytes_per_second * 1e3:.1f} ms, HBM bytes "
        f"{hbm / target.hbm_bytes_per_second * 1e3:.1f} ms.\n"
    )
    print("| # | operation | kind | result | GB | in HBM | share | from |")
    print("|---|---|---|---|---:|---:|---:|---|")
    for rank, op in enumerate(sorted(ops, key=lambda o: -o.bytes)[:top], 1):
        print(
            f"| {rank} | `{op.name}` | {op.kind} | `{op.result[:60]}` | {op.bytes / 1e9:.3f} | "
            f"{op.hbm / 1e9:.3f} | {op.bytes / total:.1%} | {op.source[:80]} |"
        )
    for title, key in (
        ("from (layers merged)", lambda op: re.sub(r"_\d+", "_N", op.source) or "(no op_name)"),
        ("kind", lambda op: op.kind),
    ):
        groups: dict[str, list[float]] = {}
        for op in ops:
            group = groups.setdefault(key(op)[:90], [0.0, 0.0])
            group[0] += op.bytes
            group[1] += op.hbm
        print(f"\n| {title} | GB | in HBM | share |\n|---|---:|---:|---:|")
        for name, (moved, in_hbm) in sorted(groups.items(), key=lambda item: -item[1][0])[:top]:
            print(f"| {name} | {moved / 1e9:.3f} | {in_hbm / 1e9:.3f} | {moved / total:.1%} |")


if __name__ == "__main__":
    main()
