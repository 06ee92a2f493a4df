"""Training step of jaxtrans against eager PyTorch at identical shapes, on the CPU.

Both frameworks take the same batch and do the same work: forward, backward, gradient
clipping and an Adam update of the same model (see steps.py). Steps run interleaved
(jaxtrans, torch, jaxtrans, torch, ...) with the same number of threads, so that the
load of a shared machine falls on both alike; the table reports medians and their ratio.

    python benchmarks/train_step.py                     # small and base shapes
    python benchmarks/train_step.py --shapes small --rounds 9
    python benchmarks/train_step.py --quick             # a tiny model, seconds

GFLOP/s are the counted model FLOPs (jaxtrans.training.flops) over the median step time;
the ceiling they are compared with is the faster of a JAX and a PyTorch float32 2048 x
2048 matrix multiply, measured in the same run. CPU s/step is the process's CPU time per
step (all threads): on a machine shared with other work it varies less than wall time.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import steps
import torch

MATMUL_SIZE = 2048  # --quick: 512


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,base", help="comma-separated: small, base")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=2, help="steps per framework per round")
    parser.add_argument("--threads", type=int, default=0, help="cores to use (0: all)")
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="also run jaxtrans with the CPU split into this many JAX devices, the batch "
        "split over them (0: one per thread; 1: no split)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, one round")
    return parser.parse_args()


def use_cores(count: int) -> int:
    """Pin the process to ``count`` cores (XLA sizes its thread pool by the affinity mask
    when the backend starts) and give PyTorch as many threads."""
    cores = sorted(os.sched_getaffinity(0))
    if 0 < count < len(cores):
        os.sched_setaffinity(0, cores[:count])
    threads = steps.cpu_threads()
    torch.set_num_threads(threads)
    return threads


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def matmul_timers(size: int) -> dict[str, Callable[[], object]]:
    """One float32 [size, size] x [size, size] product per call, in each framework."""
    a = jnp.ones((size, size), jnp.float32)
    product = jax.jit(lambda x: x @ x)
    product(a).block_until_ready()
    b = torch.ones(size, size)
    return {
        "jax": lambda: product(a).block_until_ready(),
        "torch": lambda: torch.mm(b, b),
    }


def measure(shape_name: str, args, matmuls, matmul_times) -> dict[str, dict]:
    """Interleaved step timings of both frameworks at one shape set."""
    shapes = steps.SHAPES[shape_name]
    batch = steps.random_batch(shapes)
    config = steps.jaxtrans_config(shapes)
    torch_step = steps.torch_step(shapes)
    runners = {}
    for devices in sorted({1, jax.device_count()}):
        jax_step, jax_sync = steps.jaxtrans_step(config, shapes, devices=devices)
        runners[jaxtrans_name(devices)] = lambda s=jax_step, y=jax_sync: (s(batch), y())
    runners["torch"] = lambda: torch_step(batch)
    results = {}
    for name, run in runners.items():
        first, _ = timed(run)  # jaxtrans: compilation; torch: allocator warm-up
        results[name] = {"first": first, "wall": [], "cpu": []}
    for round_ in range(args.rounds):
        # Alternate who goes first so that neither always follows the other's allocations.
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for name in order:
            for _ in range(args.steps):
                wall, cpu = timed(runners[name])
                results[name]["wall"].append(wall)
                results[name]["cpu"].append(cpu)
        for name, run in matmuls.items():
            matmul_times[name].append(timed(run)[0])
        print(
            f"  {shape_name} round {round_ + 1}/{args.rounds}: "
            + ", ".join(f"{n} {statistics.median(r['wall']):.3f} s" for n, r in results.items()),
            file=sys.stderr,
            flush=True,
        )
    tokens = steps.real_target_tokens(batch)
    step_flops = steps.train_step_flops(config, shapes)
    for r in results.values():
        r["median"] = statistics.median(r["wall"])
        r["cpu_median"] = statistics.median(r["cpu"])
        r["tokens/s"] = tokens / r["median"]
        r["flop/s"] = step_flops / r["median"]
    return results


def jaxtrans_name(devices: int) -> str:
    return "jaxtrans" if devices == 1 else f"jaxtrans, {devices} CPU devices"


def describe(name: str) -> str:
    s = steps.SHAPES[name]
    return (
        f"{name}: d_model {s.d_model}, {s.num_heads} heads, d_ff {s.d_ff}, "
        f"{s.num_layers}+{s.num_layers} layers, vocab {s.vocab_size}, batch {s.batch_size} x "
        f"{s.source_length}/{s.target_length} tokens"
    )


def main() -> int:
    args = parse_args()
    if args.quick:
        args.shapes, args.rounds, args.steps, args.cpu_devices = "tiny", 1, 2, 1
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in steps.SHAPES]
    if unknown:
        print(f"error: unknown --shapes {unknown}; choose from {sorted(steps.SHAPES)}")
        return 2
    threads = use_cores(args.threads)
    jax.config.update("jax_num_cpu_devices", args.cpu_devices or threads)
    size = 512 if args.quick else MATMUL_SIZE
    matmuls = matmul_timers(size)
    matmul_times: dict[str, list[float]] = {name: [] for name in matmuls}
    results = {name: measure(name, args, matmuls, matmul_times) for name in names}

    flops = 2 * size**3
    rates = {name: flops / statistics.median(t) for name, t in matmul_times.items()}
    peak = max(rates.values())
    print(
        f"{threads} threads (XLA and torch.set_num_threads), {args.rounds} interleaved rounds "
        f"of {args.steps} steps each; load average {os.getloadavg()[0]:.1f}; float32 "
        f"{size}^3 matmul: JAX {rates['jax'] / 1e9:.0f}, PyTorch "
        f"{rates['torch'] / 1e9:.0f} GFLOP/s"
    )
    for name in names:
        print(f"  {describe(name)}")
    print()
    print(
        "| shapes | framework | step, median (s) | CPU s/step | target tokens/s "
        "| jaxtrans/torch | GFLOP/s | of matmul peak | first step (s) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, by_framework in results.items():
        torch_rate = by_framework["torch"]["tokens/s"]
        for framework, r in by_framework.items():
            ratio = "" if framework == "torch" else f"{r['tokens/s'] / torch_rate:.2f}x"
            print(
                f"| {name} | {framework} | {r['median']:.3f} | {r['cpu_median']:.2f} | "
                f"{r['tokens/s']:,.0f} | {ratio} | {r['flop/s'] / 1e9:.1f} | "
                f"{100 * r['flop/s'] / peak:.0f}% | {r['first']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
