"""Where the jaxtrans train step's time goes on the CPU: matrix products against the rest.

Runs the benchmark step (steps.py) at a named shape, traces three steps with
``jax.profiler`` and sums the XLA thunks' own durations (a thunk's time less that of the
thunks inside it) over both threads, per step: matrix products (XNNPACK/YNNPACK
fusions and dots) against everything else, the rest by kind of fusion, and the largest
single thunks. Tracing slows the step by about a third; read the proportions.

    python benchmarks/profile_step.py small
    python benchmarks/profile_step.py base --scan_layers --trace_dir /tmp/trace
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", help="a name in steps.SHAPES")
    parser.add_argument("--scan_layers", action="store_true", help="model.scan_layers=True")
    parser.add_argument("--trace_dir", default="", help="keep the trace here (default: temp)")
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


def main() -> int:
    args = parse_args()
    if args.shapes not in steps.SHAPES:
        print(f"error: unknown shapes {args.shapes!r}; choose from {sorted(steps.SHAPES)}")
        return 2
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
