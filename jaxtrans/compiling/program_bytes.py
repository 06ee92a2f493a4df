"""The bytes a compiled program moves, operation by operation, from its optimized HLO text.

A compiler's "bytes accessed" is one number, and on a TPU it counts the traffic of the
on-chip memories too: memory-space assignment prefetches operands from HBM into a core's
VMEM (copies and slices, then a ConcatBitcast) and the operations then read the VMEM
copies, each counted again. A roofline of the step time from that number (the compile
report's estimate where the compiler gives no time) takes every such byte for an HBM
byte. Here each operation the program runs (the entry computation, loop bodies once per
trip, branches; a fusion as one operation) counts the bytes of its operands and of its
result, as XLA's cost analysis counts a fusion, split by where they live: HBM, or the
on-chip memory space a layout names (``S(1)``). An asynchronous copy, slice or collective
moves what its ``-done`` delivers, read once and written once.

Operation        one operation: its kind, result shape, bytes, HBM bytes, JAX source
operations       HLO text -> [Operation]
hbm_bytes        HLO text -> the bytes its operations move in HBM (loops unrolled)
"""

import re
from dataclasses import dataclass

ITEMSIZE = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1,
    "s4": 1, "u4": 1, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b(" + "|".join(ITEMSIZE) + r")\[([\d,]*)\](\{[^}]*\})?")
# A layout's memory space other than the default (HBM): S(1) is a TPU core's VMEM.
_ON_CHIP = re.compile(r"S\([1-9]\d*\)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*)$")
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) ")
# Instructions that move no data of their own (containers, views, bookkeeping).
_FREE = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional",
    "call", "after-all", "partition-id", "replica-id", "opt-barrier", "iota",
}  # fmt: skip


def shape_bytes(text: str, hbm_only: bool = False) -> int:
    """The bytes of every array shape written in ``text`` (a shape, a tuple of shapes);
    ``hbm_only``: of those whose layout keeps them in HBM (no on-chip memory space)."""
    total = 0
    for dtype, dims, layout in _ARRAY.findall(text):
        if hbm_only and _ON_CHIP.search(layout):
            continue
        count = 1
        for dim in filter(None, dims.split(",")):
            count *= int(dim)
        total += count * ITEMSIZE[dtype]
    return total


@dataclass
class Operation:
    name: str
    kind: str  # the HLO opcode, fusions with their kind (fusion:kLoop)
    result: str  # the result's shape, layouts dropped
    bytes: float  # operands + result, times the trips of the loops around it
    hbm: float  # the part of ``bytes`` in HBM (not the on-chip memory a layout names)
    source: str  # the JAX operation it came from (op_name), shortened


def _computations(text: str) -> dict[str, tuple[bool, list[str]]]:
    """name -> (is the entry, its instruction lines). An instruction's text may span lines
    (a Pallas kernel's backend config holds newlines): a line that does not open an
    instruction continues the one before; only a bare "}" closes a computation."""
    found, name, lines, entry = {}, None, [], False
    for line in text.splitlines():
        if name is None:
            header = _HEADER.match(line)
            if header and line.rstrip().endswith("{"):
                name, entry, lines = header.group(2), bool(header.group(1)), []
        elif line.rstrip() == "}":
            found[name] = (entry, lines)
            name = None
        elif line.startswith("  ") or not lines:
            lines.append(line)
        else:
            lines[-1] += line
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
                # slice reads only a part of); in HBM where its source or result is.
                moved = 2 * shape_bytes(shape)
                start = named[0] if named else ""
                line = next((x for x in computations[name][1] if f"%{start} = " in x), line)
                begun = _INSTRUCTION.match(line)
                sources = re.findall(r"%([\w.\-]+)", _operands(begun.group(4))) if begun else []
                source_in_hbm = bool(sources) and shape_bytes(
                    shapes.get(sources[0], ""), hbm_only=True
                )
                hbm = shape_bytes(shape, hbm_only=True) + (
                    shape_bytes(shape) if source_in_hbm else 0
                )
            else:
                unnamed = re.sub(r"%[\w.\-]+", "", operands)
                read = shape_bytes(unnamed) + sum(
                    shape_bytes(shapes.get(operand, "")) for operand in named
                )
                moved = read + shape_bytes(shape)
                hbm = (
                    shape_bytes(unnamed, hbm_only=True)
                    + sum(shape_bytes(shapes.get(operand, ""), hbm_only=True) for operand in named)
                    + shape_bytes(shape, hbm_only=True)
                )
            plain = re.sub(r"\{[^}]*\}", "", shape)
            times = trips[name]
            result.append(Operation(op, kind, plain, moved * times, hbm * times, _source(line)))
    return result


def hbm_bytes(text: str) -> float:
    """The bytes the program of HLO ``text`` reads and writes in HBM (all its bytes on a
    device whose layouts name no other memory space: a GPU)."""
    return sum(op.hbm for op in operations(text))
