"""Training step of jaxtrans against PyTorch, eager and torch.compile, at identical shapes, on
the CPU.

Both frameworks take the same batch and do the same work: forward, backward, gradient
clipping and an Adam update of the same model (see steps.py). Each framework runs in a
process of its own (one XLA or one PyTorch thread pool per process, as in training), on
the same cores with the same number of threads. The processes take turns: in every
round each runs ``--steps`` timed steps while the others wait idle (jaxtrans, torch,
jaxtrans, torch, ... with the order reversed every other round), so that the load of a
shared machine falls on both alike; the table reports medians and their ratio.

    python benchmarks/train_step.py                     # small and base shapes
    python benchmarks/train_step.py --shapes small_32x128,small_64x64 --scan_layers
    python benchmarks/train_step.py --shapes small --rounds 9
    python benchmarks/train_step.py --shapes base --rounds 3 --steps 1
    python benchmarks/train_step.py --shapes small --whole_logits --no_torch_compile
    python benchmarks/train_step.py --quick             # a tiny model, seconds, no compile

Rows: jaxtrans (the layers looped, one block per layer); jaxtrans, N CPU devices (the
CPU split into N JAX devices and the batch over them, the loop's data-parallel mesh);
with --scan_layers, jaxtrans, scan layers (each stack one nn.scan, model.scan_layers);
with --whole_logits, jaxtrans, whole logits (the loss from the whole batch's logits,
train.loss_chunk_tokens=0, against the chunked loss of the jaxtrans row);
torch (eager); torch.compile (the same model and step through inductor, steps.py; its
first step, which compiles, is reported apart and not timed; --no_torch_compile drops
it). The ratios are jaxtrans's target tokens/s over each PyTorch row's. GFLOP/s are the
counted model FLOPs (jaxtrans.training.mfu) over the median step time; the ceiling they
are compared with is the faster of a JAX and a PyTorch float32 2048 x 2048 matrix
multiply, timed once a round in the jaxtrans and the torch process. CPU s/step is the
process's CPU time per step (all threads): on a machine shared with other work it varies
less than wall time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import steps

MATMUL_SIZE = 2048  # --quick: 512


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", default="small,base", help=f"comma-separated, of {', '.join(steps.SHAPES)}"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of turns")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per process per turn")
    parser.add_argument("--threads", type=int, default=0, help="cores to use (0: all)")
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=0,
        help="also run jaxtrans with the CPU split into this many JAX devices, the batch "
        "split over them (0: one per thread; 1: no split)",
    )
    parser.add_argument(
        "--scan_layers", action="store_true", help="add a jaxtrans row with the layers scanned"
    )
    parser.add_argument(
        "--whole_logits",
        action="store_true",
        help="add a jaxtrans row whose loss takes the whole logits (train.loss_chunk_tokens=0)",
    )
    parser.add_argument(
        "--no_torch_compile", action="store_true", help="drop the torch.compile row"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny model, one round, no torch.compile"
    )
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


# ---------------------------------------------------------------- one framework's process


def use_cores(count: int) -> int:
    """Pin the process to ``count`` cores (XLA sizes its thread pool by the affinity mask
    when the backend starts; 0: all) and return how many it may use."""
    cores = sorted(os.sched_getaffinity(0))
    if 0 < count < len(cores):
        os.sched_setaffinity(0, cores[:count])
    return steps.cpu_threads()


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def build(spec: dict) -> tuple[Callable[[], object], Callable[[], object]]:
    """(one training step, one float32 [size, size] matrix product), both blocking."""
    import jax
    import jax.numpy as jnp
    import torch

    threads = use_cores(spec["threads"])
    shapes = steps.SHAPES[spec["shapes"]]
    batch = steps.random_batch(shapes)
    size = spec["matmul_size"]
    if spec["framework"] == "torch":
        torch.set_num_threads(threads)
        torch_step = steps.torch_step(shapes, compiled=spec.get("compiled", False))
        b = torch.ones(size, size)
        return lambda: torch_step(batch), lambda: torch.mm(b, b)
    jax.config.update("jax_num_cpu_devices", spec["devices"])
    config = steps.jaxtrans_config(shapes, scan_layers=spec["scan_layers"])
    jax_step, sync = steps.jaxtrans_step(
        config, shapes, devices=spec["devices"], loss_chunk_tokens=spec.get("loss_chunk_tokens")
    )
    a = jnp.ones((size, size), jnp.float32)
    product = jax.jit(lambda x: x @ x)
    product(a).block_until_ready()
    return lambda: (jax_step(batch), sync()), lambda: product(a).block_until_ready()


def worker(spec: dict) -> int:
    """Serve the parent over stdin/stdout: build and take the first step, then for every
    ``run N`` line time N steps and one matrix product; one JSON line per answer."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library prints go to stderr
    run, matmul = build(spec)
    first, _ = timed(run)  # jaxtrans, torch.compile: compilation; torch: allocator warm-up
    shapes = steps.SHAPES[spec["shapes"]]
    config = steps.jaxtrans_config(shapes)
    ready = {
        "first": first,
        "tokens": steps.real_target_tokens(steps.random_batch(shapes)),
        "step_flops": steps.train_step_flops(config, shapes),
    }
    print(json.dumps(ready), file=channel, flush=True)
    for line in sys.stdin:
        command, *count = line.split()
        if command != "run":
            break
        times = [timed(run) for _ in range(int(count[0]))]
        answer = {
            "wall": [wall for wall, _ in times],
            "cpu": [cpu for _, cpu in times],
            "matmul": timed(matmul)[0] if spec.get("matmul") else None,
        }
        print(json.dumps(answer), file=channel, flush=True)
    return 0


# ---------------------------------------------------------------- the parent


class Worker:
    """One framework's process, started and driven by the parent."""

    def __init__(self, spec: dict):
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a benchmark process exited with {self.process.wait()}")
        return json.loads(line)

    def run(self, count: int) -> dict:
        self.process.stdin.write(f"run {count}\n")
        self.process.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait()


def runner_specs(shape_name: str, args, devices: int) -> dict[str, dict]:
    """The rows of one shape set: name -> what its process runs."""
    base = {"shapes": shape_name, "threads": args.threads, "matmul_size": args.matmul_size}
    jaxtrans = {**base, "framework": "jaxtrans", "devices": 1, "scan_layers": False}
    specs = {"jaxtrans": {**jaxtrans, "matmul": "jax"}}
    if devices > 1:
        specs[f"jaxtrans, {devices} CPU devices"] = {**jaxtrans, "devices": devices}
    if args.scan_layers:
        specs["jaxtrans, scan layers"] = {**jaxtrans, "scan_layers": True}
    if args.whole_logits:
        specs["jaxtrans, whole logits"] = {**jaxtrans, "loss_chunk_tokens": 0}
    specs["torch"] = {**base, "framework": "torch", "matmul": "torch"}
    if not args.no_torch_compile:
        specs["torch.compile"] = {**base, "framework": "torch", "compiled": True}
    return specs


def measure(shape_name: str, args, devices: int, matmul_times: dict) -> dict[str, dict]:
    """Alternating timings of every row's process at one shape set."""
    specs = runner_specs(shape_name, args, devices)
    workers: dict[str, Worker] = {}
    results: dict[str, dict] = {}
    try:
        for name, spec in specs.items():  # one at a time: compiling uses every core
            workers[name] = Worker(spec)
            results[name] = {**workers[name].answer(), "wall": [], "cpu": []}
        for round_ in range(args.rounds):
            # Alternate who goes first so that neither always follows the other.
            order = list(workers) if round_ % 2 == 0 else list(reversed(workers))
            for name in order:
                answer = workers[name].run(args.steps)
                results[name]["wall"] += answer["wall"]
                results[name]["cpu"] += answer["cpu"]
                if specs[name].get("matmul"):
                    matmul_times[specs[name]["matmul"]].append(answer["matmul"])
            print(
                f"  {shape_name} round {round_ + 1}/{args.rounds}: "
                + ", ".join(
                    f"{n} {statistics.median(r['wall']):.3f} s" for n, r in results.items()
                ),
                file=sys.stderr,
                flush=True,
            )
    finally:
        for w in workers.values():
            w.close()
    for r in results.values():
        r["median"] = statistics.median(r["wall"])
        r["cpu_median"] = statistics.median(r["cpu"])
        r["tokens/s"] = r["tokens"] / r["median"]
        r["flop/s"] = r["step_flops"] / r["median"]
    return results


def describe(name: str) -> str:
    s = steps.SHAPES[name]
    return (
        f"{name}: d_model {s.d_model}, {s.num_heads} heads, d_ff {s.d_ff}, "
        f"{s.num_layers}+{s.num_layers} layers, vocab {s.vocab_size}, batch {s.batch_size} x "
        f"{s.source_length}/{s.target_length} tokens"
    )


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    if args.quick:
        args.shapes, args.rounds, args.steps, args.cpu_devices = "tiny", 1, 2, 1
        args.scan_layers, args.no_torch_compile = False, True
    args.matmul_size = 512 if args.quick else MATMUL_SIZE
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in steps.SHAPES]
    if unknown:
        print(f"error: unknown --shapes {unknown}; choose from {sorted(steps.SHAPES)}")
        return 2
    threads = use_cores(args.threads)
    devices = args.cpu_devices or threads
    matmul_times: dict[str, list[float]] = {"jax": [], "torch": []}
    results = {name: measure(name, args, devices, matmul_times) for name in names}

    flops = 2 * args.matmul_size**3
    rates = {name: flops / statistics.median(t) for name, t in matmul_times.items()}
    peak = max(rates.values())
    print(
        f"{threads} threads (XLA and torch.set_num_threads), one process per row, "
        f"{args.rounds} rounds of {args.steps} steps each; load average "
        f"{os.getloadavg()[0]:.1f}; float32 {args.matmul_size}^3 matmul: JAX "
        f"{rates['jax'] / 1e9:.0f}, PyTorch {rates['torch'] / 1e9:.0f} GFLOP/s"
    )
    for name in names:
        print(f"  {describe(name)}")
    peers = ["torch"] if args.no_torch_compile else ["torch", "torch.compile"]
    print()
    print(
        "| shapes | framework | step, median (s) | CPU s/step | target tokens/s "
        f"| {' | '.join(f'jaxtrans/{peer}' for peer in peers)} | GFLOP/s | of matmul peak "
        "| first step, compiling (s) |"
    )
    print("|---|---|---:|---:|---:|" + "---:|" * len(peers) + "---:|---:|---:|")
    for name, by_framework in results.items():
        for framework, r in by_framework.items():
            ratios = [
                "" if framework.startswith("torch") else f"{r['tokens/s'] / peer_rate:.2f}x"
                for peer_rate in (by_framework[peer]["tokens/s"] for peer in peers)
            ]
            print(
                f"| {name} | {framework} | {r['median']:.3f} | {r['cpu_median']:.2f} | "
                f"{r['tokens/s']:,.0f} | {' | '.join(ratios)} | {r['flop/s'] / 1e9:.1f} | "
                f"{100 * r['flop/s'] / peak:.0f}% | {r['first']:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
