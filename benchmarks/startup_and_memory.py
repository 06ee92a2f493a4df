"""First-step time (compilation) with and without the persistent compilation cache, and
peak host memory, of the jaxtrans train step and the eager PyTorch one.

Every row is a fresh process, so the first step really compiles (or really reads the
cache) and its peak resident set size (ru_maxrss) is the training's own. The jaxtrans
rows compile ahead of the first step (``jitted.lower(...)``, then ``.compile()``) to
split its time into tracing and lowering to StableHLO, and XLA's compiling (or reading
the cache). Rows run interleaved in rounds; the table shows medians. "above imports"
subtracts the RSS a process has after importing jax and torch and starting the JAX
backend, the same in every row.

    python benchmarks/startup_and_memory.py                 # small shapes
    python benchmarks/startup_and_memory.py --shapes base --rounds 1
    python benchmarks/startup_and_memory.py --shapes base --scan_layers \
        --rows "no cache,scan layers"

Rows: no cache (the compilation cache off); cache cold (an empty cache directory: compile
and write); cache warm (the directory the cold row filled: read); remat (layers
recomputed in the backward pass); no donation (the old state is not donated to the
step, so old and new states coexist); PyTorch eager. With --scan_layers: scan layers
(each stack one nn.scan, config.scan_layers) with no cache, cache cold and cache warm
(its own cache directory), and scan layers + remat.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small", help="small | base (steps.py)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="steady steps after the first")
    parser.add_argument(
        "--scan_layers", action="store_true", help="add rows with the layer stacks scanned"
    )
    parser.add_argument(
        "--rows", default="", help="comma-separated row names to run (without 'jaxtrans, ')"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(spec: dict) -> dict:
    """Runs in the fresh process: build, first step, steady steps; report times and RSS."""
    import jax

    if spec.get("cache_dir"):
        # The training loop's settings when this was measured (now jaxtrans.compilation_cache,
        # which also keeps programs that compile in under 0.5 s).
        jax.config.update("jax_compilation_cache_dir", spec["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    import steps  # imports torch too, in every row alike

    jax.devices()  # start the backend before taking the baseline
    baseline = peak_rss_mb()
    shapes = steps.SHAPES[spec["shapes"]]
    batch = steps.random_batch(shapes)
    if spec["framework"] == "torch":
        import torch

        torch.set_num_threads(steps.cpu_threads())
        step_fn, sync = steps.torch_step(shapes), lambda: None
    else:
        config = steps.jaxtrans_config(
            shapes, remat=spec.get("remat", False), scan_layers=spec.get("scan_layers", False)
        )
        step_fn, sync = steps.jaxtrans_step(config, shapes, donate=spec.get("donate", True))
    start = time.perf_counter()
    lower_s, compile_s = step_fn.compile_ahead(batch) if spec["framework"] != "torch" else (0, 0)
    step_fn(batch)
    sync()
    first = time.perf_counter() - start
    times = []
    for _ in range(spec["steps"]):
        start = time.perf_counter()
        step_fn(batch)
        sync()
        times.append(time.perf_counter() - start)
    return {
        "first": first,
        "lower": lower_s,
        "compile": compile_s,
        "steady": statistics.median(times),
        "peak_mb": peak_rss_mb(),
        "above_imports_mb": peak_rss_mb() - baseline,
    }


def run_child(spec: dict) -> dict:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    base = {"shapes": args.shapes, "steps": args.steps, "framework": "jaxtrans"}
    rows = {
        "jaxtrans, no cache": {},
        "jaxtrans, cache cold": {"cache": "cold"},
        "jaxtrans, cache warm": {"cache": "warm"},
        "jaxtrans, remat": {"remat": True},
        "jaxtrans, no donation": {"donate": False},
        "PyTorch eager": {"framework": "torch"},
    }
    if args.scan_layers:
        rows["jaxtrans, scan layers"] = {"scan_layers": True}
        rows["jaxtrans, scan layers + cache cold"] = {"scan_layers": True, "cache": "cold"}
        rows["jaxtrans, scan layers + cache warm"] = {"scan_layers": True, "cache": "warm"}
        rows["jaxtrans, scan layers + remat"] = {"scan_layers": True, "remat": True}
    if args.rows:
        wanted = [name.strip() for name in args.rows.split(",")]
        rows = {k: v for k, v in rows.items() if k.removeprefix("jaxtrans, ") in wanted}
        if not rows:
            raise SystemExit(f"--rows {args.rows!r} matches no row")
    results: dict[str, list[dict]] = {name: [] for name in rows}
    for round_ in range(args.rounds):
        # Cold in every round, one directory for each way of computing the layers.
        cache_dirs = {scan: tempfile.mkdtemp(prefix="jaxtrans-xla-cache-") for scan in (0, 1)}
        for name, extra in rows.items():
            spec = {**base, **extra}
            if spec.pop("cache", None):
                spec["cache_dir"] = cache_dirs[spec.get("scan_layers", False)]
            results[name].append(run_child(spec))
            print(f"  round {round_ + 1}: {name} done", file=sys.stderr, flush=True)

    print(
        f"shapes {args.shapes}; {os.cpu_count()} cores; {args.rounds} rounds (fresh processes); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| process | first step (s) | trace + lower (s) | compile (s) | later steps (s) "
        "| peak RSS (MB) | above imports (MB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, runs in results.items():
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        split = "" if name == "PyTorch eager" else f"{median['lower']:.1f}"
        compile_ = "" if name == "PyTorch eager" else f"{median['compile']:.1f}"
        print(
            f"| {name} | {median['first']:.1f} | {split} | {compile_} | {median['steady']:.2f} | "
            f"{median['peak_mb']:,.0f} | {median['above_imports_mb']:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
