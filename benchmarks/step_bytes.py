"""Where a train step's bytes go: the operations of the compiled program, largest first.

The compile report's "bytes accessed" is one number, the compiler's count over the whole
program; its roofline estimate of the step time rests on it. This script compiles a run's
train step as ``python -m jaxtrans.compile`` does (compile-only devices, nothing
allocated) and splits that count by operation, from the optimized HLO: for each
instruction the program runs (the entry computation, loop bodies and branches; fusions as
one instruction), the bytes of its operands and of its result, which is how XLA's cost
analysis counts a fusion's memory traffic. Loop bodies are counted once per trip (the
compiler's own count takes a body once).

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
from dataclasses import dataclass
from types import SimpleNamespace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_ITEMSIZE = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
    "s4": 1, "u4": 1, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b(" + "|".join(_ITEMSIZE) + r")\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*)$")
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) ")
# Instructions that move no data of their own (containers, views, bookkeeping).
_FREE = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
    "call", "after-all", "partition-id", "replica-id", "opt-barrier", "iota",
}  # fmt: skip


def shape_bytes(text: str) -> int:
    """The bytes of every array shape written in ``text`` (a shape, a tuple of shapes)."""
    total = 0
    for dtype, dims in _ARRAY.findall(text):
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * _ITEMSIZE[dtype]
    return total


@dataclass
class Operation:
    name: str
    kind: str  # the HLO opcode, fusions with their kind (fusion:kLoop)
    result: str  # the result's shape, layouts dropped
    bytes: float  # operands + result, times the trips of the loops around it
    source: str  # the JAX operation it came from (op_name), shortened


def _computations(text: str) -> dict[str, tuple[bool, list[str]]]:
    """name -> (is the entry, its instruction lines)."""
    found, name, lines, entry = {}, None, [], False
    for line in text.splitlines():
        if name is None:
            header = _HEADER.match(line)
            if header and line.rstrip().endswith("{"):
                name, entry, lines = header.group(2), bool(header.group(1)), []
        elif line.startswith("}"):
            found[name] = (entry, lines)
            name = None
        else:
            lines.append(line)
    return found


def _operands(call: str) -> str:
    """The operand list of ``opcode(...)...``: the text up to the matching parenthesis."""
    depth = 1
    for index, char in enumerate(call):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return call[:index]
    return call


def _source(line: str) -> str:
    found = re.search(r'op_name="([^"]*)"', line)
    if not found:
        return ""
    parts = [p for p in found.group(1).split("/") if p and not p.startswith("jit(")]
    return "/".join(parts[-3:])


def operations(text: str) -> list[Operation]:
    """The operations the program runs, with their bytes, from its HLO ``text``."""
    computations = _computations(text)
    trips: dict[str, float] = {}
    order = [name for name, (entry, _) in computations.items() if entry]
    for name in order:
        trips.setdefault(name, 1.0)
    result: list[Operation] = []
    while order:
        name = order.pop(0)
        shapes = {}  # instruction -> its result's shape, for operands printed by name only
        for line in computations[name][1]:
            found = _INSTRUCTION.match(line)
            if found:
                shapes[found.group(1)] = found.group(2)
        for line in computations[name][1]:
            found = _INSTRUCTION.match(line)
            if not found:
                continue
            op, shape, opcode, rest = found.groups()
            if opcode in ("while", "conditional", "call"):
                count = re.search(r'"n":"(\d+)"', line)
                times = trips[name] * (int(count.group(1)) if count and opcode == "while" else 1)
                for key in ("body", "condition", "to_apply", "true_computation",
                            "false_computation"):  # fmt: skip
                    called = re.search(rf"\b{key}=%?([\w.\-]+)", line)
                    if called and called.group(1) in computations:
                        trips[called.group(1)] = times
                        order.append(called.group(1))
                branches = re.search(r"branch_computations=\{([^}]*)\}", line)
                for branch in branches.group(1).split(",") if branches else ():
                    branch = branch.strip().lstrip("%")
                    if branch in computations:
                        trips[branch] = trips[name]
                        order.append(branch)
                continue
            if opcode in _FREE:
                continue
            kind = opcode
            if opcode == "fusion":
                fusion_kind = re.search(r"kind=(k\w+)", line)
                kind = f"fusion:{fusion_kind.group(1)}" if fusion_kind else opcode
            elif opcode == "custom-call":
                target = re.search(r'custom_call_target="([^"]+)"', line)
                kind = f"custom-call:{target.group(1)}" if target else opcode
            if opcode.endswith("-start"):  # its -done holds the result: counted there
                continue
            operands = _operands(rest)
            named = re.findall(r"%([\w.\-]+)", operands)
            if opcode.endswith("-done"):
                # An asynchronous copy, slice or collective: one read and one write of
                # what it delivers (the -start's tuple repeats its operands, which a
                # slice reads only a part of).
                moved = 2 * shape_bytes(shape)
                start = named[0] if named else ""
                line = next((x for x in computations[name][1] if f"%{start} = " in x), line)
            else:
                read = shape_bytes(re.sub(r"%[\w.\-]+", "", operands)) + sum(
                    shape_bytes(shapes.get(operand, "")) for operand in named
                )
                moved = read + shape_bytes(shape)
            plain = re.sub(r"\{[^}]*\}", "", shape)
            result.append(Operation(op, kind, plain, moved * trips[name], _source(line)))
    return result


def compile_step_text(argv: list[str]):
    """Compile the run's train step for the slice; (its ProgramCost, the slice)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from jaxtrans.compile_targets import compile_only_devices, target_named
    from jaxtrans.programs.cli import define_config_flag, parse_flags
    from jaxtrans.tasks import compile_task
    from jaxtrans.training.ahead_of_time import compile_train_step
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
    sys.path.insert(0, REPO)
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
    total = sum(op.bytes for op in ops)
    print(
        f"{slice_.name}: the compiler counts {cost.bytes_accessed / 1e9:.2f} GB accessed a "
        f"device a step (loop bodies once); the operations below, loops unrolled, "
        f"{total / 1e9:.2f} GB; {cost.flops / 1e12:.2f} TFLOP; "
        f"peak {cost.peak_bytes / 2**30:.2f} GiB\n"
    )
    print("| # | operation | kind | result | GB | share | from |")
    print("|---|---|---|---|---:|---:|---|")
    for rank, op in enumerate(sorted(ops, key=lambda o: -o.bytes)[: args.top], 1):
        print(
            f"| {rank} | `{op.name}` | {op.kind} | `{op.result[:60]}` | {op.bytes / 1e9:.3f} | "
            f"{op.bytes / total:.1%} | {op.source[:80]} |"
        )
    sources: dict[str, float] = {}
    for op in ops:
        key = re.sub(r"_\d+", "_N", op.source) or "(no op_name)"
        sources[key] = sources.get(key, 0.0) + op.bytes
    print("\n| from (layers merged) | GB | share |\n|---|---:|---:|")
    for key, moved in sorted(sources.items(), key=lambda item: -item[1])[: args.top]:
        print(f"| {key[:90]} | {moved / 1e9:.3f} | {moved / total:.1%} |")
    kinds: dict[str, float] = {}
    for op in ops:
        kinds[op.kind] = kinds.get(op.kind, 0.0) + op.bytes
    print("\n| kind | GB | share |\n|---|---:|---:|")
    for kind, moved in sorted(kinds.items(), key=lambda item: -item[1])[:12]:
        print(f"| {kind} | {moved / 1e9:.3f} | {moved / total:.1%} |")


if __name__ == "__main__":
    main()
