"""Where the jaxtrans train step's time goes on the CPU: matrix products against the rest.

Runs the benchmark step (steps.py) at a named shape, traces three steps with
``jax.profiler`` and sums the XLA thunks' own durations (a thunk's time less that of the
thunks inside it) over both threads, per step: matrix products (XNNPACK/YNNPACK
fusions and dots) against everything else, the rest by kind of fusion, and the largest
single thunks. Tracing slows the step by about a third; read the proportions.

With ``--torch`` (or ``--torch_compile``) the PyTorch step of steps.py instead, under
``torch.profiler``: its operators' own time per step (``key_averages``' self CPU time:
the time on the calling thread less that of the operators inside; an operator's parallel
loop over the other threads lies within it, not added to it, so compare proportions with
the jaxtrans thunks' sum over threads), matrix products (``addmm``, ``mm``, ``bmm``, the
fused attention) against the rest, the rest by operator.

    python benchmarks/profile_step.py small
    python benchmarks/profile_step.py base --scan_layers --trace_dir /tmp/trace
    python benchmarks/profile_step.py small --torch
"""

import argparse
import collections
import glob
import gzip
import json
import re
import sys
import tempfile
import time

import jax
import steps

STEPS = 3
MATMUL = ("ynn_fusion", "xnn_fusion", "dot", "convolution", "onednn")
TORCH_MATMUL = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot",
                "aten::_flash_attention", "mkldnn", "aten::matmul")  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", help="a name in steps.SHAPES")
    parser.add_argument("--scan_layers", action="store_true", help="model.scan_layers=True")
    parser.add_argument("--trace_dir", default="", help="keep the trace here (default: temp)")
    parser.add_argument("--torch", action="store_true", help="profile the eager PyTorch step")
    parser.add_argument(
        "--torch_compile", action="store_true", help="profile the torch.compile step"
    )
    return parser.parse_args()


def thunk_self_ms(trace_dir: str) -> collections.Counter:
    """Thunk name -> its own milliseconds per step, from the trace in ``trace_dir``."""
    path = sorted(glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True))[-1]
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e["pid"], e["tid"])].append(e)
    own = collections.Counter()
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_events: list[dict] = []
        for e in thread:
            e["self"] = e["dur"]
            while open_events and open_events[-1]["ts"] + open_events[-1]["dur"] <= e["ts"]:
                open_events.pop()
            if open_events:
                open_events[-1]["self"] -= e["dur"]
            open_events.append(e)
        for e in thread:
            # Python frames ("$file:line"), runtime calls ("A::B") and named runtime
            # phases (capitalised) are not thunks.
            if not (e["name"].startswith("$") or "::" in e["name"] or e["name"][0].isupper()):
                own[e["name"]] += e["self"] / 1e3 / STEPS
    return own


def torch_profile(shapes_name: str, compiled: bool) -> int:
    """Print the PyTorch step's own CPU time per step by operator."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    shapes = steps.SHAPES[shapes_name]
    batch = steps.random_batch(shapes)
    torch.set_num_threads(steps.cpu_threads())
    step = steps.torch_step(shapes, compiled=compiled)
    for _ in range(2):  # compile (torch.compile), then one more so that buffers are warm
        step(batch)
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            step(batch)
    wall = (time.perf_counter() - start) / STEPS
    own = collections.Counter()
    for event in prof.key_averages():
        if event.self_cpu_time_total > 0:
            own[event.key] += event.self_cpu_time_total / 1e3 / STEPS
    matmul = sum(ms for name, ms in own.items() if name.startswith(TORCH_MATMUL))
    total = sum(own.values())
    way = "torch.compile" if compiled else "eager"
    print(f"{shapes_name}, torch {way}: {wall:.3f} s a step under the profiler")
    print(f"operators, own CPU time of the calling threads: {total:.0f} ms a step")
    print(f"  matrix products: {matmul:.0f} ms ({100 * matmul / total:.0f}%)")
    print(f"  everything else: {total - matmul:.0f} ms ({100 * (total - matmul) / total:.0f}%)")
    print("everything else, by operator:")
    rest = [(name, ms) for name, ms in own.most_common() if not name.startswith(TORCH_MATMUL)]
    for name, ms in rest[:12]:
        print(f"  {ms:7.1f} ms  {name}")
    print("largest operators:")
    for name, ms in own.most_common(8):
        print(f"  {ms:7.1f} ms  {name}")
    return 0


def main() -> int:
    args = parse_args()
    if args.shapes not in steps.SHAPES:
        print(f"error: unknown shapes {args.shapes!r}; choose from {sorted(steps.SHAPES)}")
        return 2
    if args.torch or args.torch_compile:
        return torch_profile(args.shapes, compiled=args.torch_compile)
    shapes = steps.SHAPES[args.shapes]
    batch = steps.random_batch(shapes)
    config = steps.jaxtrans_config(shapes, scan_layers=args.scan_layers)
    step, sync = steps.jaxtrans_step(config, shapes)
    for _ in range(2):  # compile, then one more so that buffers are warm
        step(batch)
        sync()
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="jaxtrans-trace-")
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir):
        for _ in range(STEPS):
            step(batch)
        sync()
    wall = (time.perf_counter() - start) / STEPS

    own = thunk_self_ms(trace_dir)
    stem = {name: re.sub(r"\.\d+$", "", name) for name in own}
    matmul = sum(ms for name, ms in own.items() if stem[name].startswith(MATMUL))
    total = sum(own.values())
    rest = collections.Counter()
    for name, ms in own.items():
        if not stem[name].startswith(MATMUL):
            rest[stem[name]] += ms
    layers = "scanned" if args.scan_layers else "looped"
    print(f"{args.shapes}, layers {layers}: {wall:.3f} s a step under the trace ({trace_dir})")
    print(f"thunks, own time summed over threads: {total:.0f} ms a step")
    print(f"  matrix products: {matmul:.0f} ms ({100 * matmul / total:.0f}%)")
    print(f"  everything else: {total - matmul:.0f} ms ({100 * (total - matmul) / total:.0f}%)")
    print("everything else, by kind:")
    for name, ms in rest.most_common(12):
        print(f"  {ms:7.1f} ms  {name}")
    print("largest thunks:")
    for name, ms in own.most_common(8):
        print(f"  {ms:7.1f} ms  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
