"""jaxtrans on an accelerator: train step time, target tokens/s and MFU against the
bfloat16 matmul rate measured in the same run, XLA attention against
jax.nn.dot_product_attention, remat, scanned layers (model.scan_layers), peak device
memory, and beam-search sentences/s.

Every row runs in a fresh process (clean peak-memory counters, nothing left allocated
by the row before); the parent process never starts JAX. benchmarks/gpu.sh runs this on
a GPU with the base model in bfloat16:

    python benchmarks/accelerator.py --shapes base_full --dtype bfloat16
    python benchmarks/accelerator.py --quick           # tiny model, float32, any device

Step time: the loop's way (steps dispatched back to back, one wait at the end), the
median over --repeats groups of --steps steps. MFU = counted model FLOPs
(jaxtrans.training.mfu) / step time / (devices x the measured matmul rate); the vendor
peak (jaxtrans.training.mfu.PEAK_FLOPS) is shown beside it when the device is known.
Beam search uses freshly initialised parameters, so every hypothesis runs to its length
limit (source length + 50): a lower bound on sentences/s.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The fused kernels (cuDNN on a GPU, splash on a TPU: attention_impl="auto") cannot drop
# attention weights, so the kernels are also compared without attention dropout.
ROWS = {
    "XLA attention, attention dropout 0.1": {},
    "XLA attention, attention dropout 0": {"attention_dropout_rate": 0.0},
    "auto kernel (cuDNN on GPU, splash on TPU), attention dropout 0": {
        "attention_impl": "auto",
        "attention_dropout_rate": 0.0,
    },
    "cuDNN attention (attention_impl=cudnn), attention dropout 0": {
        "attention_impl": "cudnn",
        "attention_dropout_rate": 0.0,
    },
    "XLA attention, dropout 0.1, remat": {"remat": True},
    "XLA attention, dropout 0.1, scanned layers": {"scan_layers": True},
    "XLA attention, dropout 0.1, scanned layers, remat": {"scan_layers": True, "remat": True},
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="base_full", help="a name in steps.SHAPES")
    parser.add_argument("--dtype", default="bfloat16", help="compute dtype (params: float32)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed group")
    parser.add_argument("--repeats", type=int, default=5, help="timed groups")
    parser.add_argument("--beam-sentences", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="tiny model, float32")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


def peak_memory_gb() -> float | None:
    """Peak bytes in use on the first local device (None where the backend has no stats)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


def matmul_rate(dtype: str, size: int = 8192) -> float:
    """FLOP/s of one [size, size] x [size, size] product in ``dtype``, best of 10."""
    import jax

    a = jax.random.normal(jax.random.key(0), (size, size), dtype)
    product = jax.jit(lambda x: x @ x)
    product(a).block_until_ready()
    best = float("inf")
    for _ in range(10):
        start = time.perf_counter()
        product(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def train_row(spec: dict) -> dict:
    import jax
    import steps

    shapes = steps.SHAPES[spec["shapes"]]
    config = steps.jaxtrans_config(shapes, dtype=spec["dtype"], **spec["overrides"])
    batch = steps.random_batch(shapes)
    step, sync = steps.jaxtrans_step(config, shapes, devices=jax.device_count())
    start = time.perf_counter()
    step(batch)
    sync()
    first = time.perf_counter() - start
    step(batch)  # a second warm-up: allocator and autotuning settled
    sync()
    groups = []
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        for _ in range(spec["steps"]):
            step(batch)
        sync()
        groups.append((time.perf_counter() - start) / spec["steps"])
    seconds = statistics.median(groups)
    return {
        "first": first,
        "step": seconds,
        "tokens/s": steps.real_target_tokens(batch) / seconds,
        "flop/s": steps.train_step_flops(config, shapes) / seconds,
        "devices": jax.device_count(),
        "peak_gb": peak_memory_gb(),
    }


def beam_row(spec: dict) -> dict:
    """Beam search (beam 4, alpha 0.6, +50 tokens) over random sources of 10-40 ids."""
    import jax
    import numpy as np
    import steps

    try:
        from jaxtrans.inference import translate_ids
    except ImportError as error:
        return {"skipped": f"jaxtrans.inference has no translate_ids ({error})"}
    shapes = steps.SHAPES[spec["shapes"]]
    config = steps.jaxtrans_config(shapes, dtype=spec["dtype"])
    params = jax.jit(steps.translation_task(config, shapes).init_params)(jax.random.key(0))
    rng = np.random.default_rng(0)
    sources = [
        list(rng.integers(7, shapes.vocab_size, rng.integers(10, 41))) + [1]  # EOS id 1
        for _ in range(spec["sentences"])
    ]
    settings = dict(batch_size=128, beam_size=4, alpha=0.6, max_extra_length=50)
    translate_ids(config, params, sources, **settings)  # compiles each length bucket
    start = time.perf_counter()
    hypotheses = translate_ids(config, params, sources, **settings)
    seconds = time.perf_counter() - start
    return {
        "sentences/s": len(sources) / seconds,
        "mean_length": float(np.mean([len(h) for h in hypotheses])),
        "peak_gb": peak_memory_gb(),
    }


def child(spec: dict) -> dict:
    import jax

    if spec["kind"] == "matmul":
        from jaxtrans.training.mfu import device_peak_flops

        return {
            "flop/s": matmul_rate(spec["dtype"], spec["size"]),
            "device": jax.devices()[0].device_kind,
            "vendor_peak": device_peak_flops() or 0.0,
        }
    if spec["kind"] == "beam":
        return beam_row(spec)
    return train_row(spec)


def run_child(spec: dict, timeout: float = 240) -> dict:
    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def gigabytes(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"  # no memory statistics on the CPU


def main() -> int:
    args = parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.quick:
        args.shapes, args.dtype, args.steps, args.repeats = "tiny", "float32", 3, 2
        args.beam_sentences = 16
    base = {"shapes": args.shapes, "dtype": args.dtype}
    matmul = run_child({**base, "kind": "matmul", "size": 1024 if args.quick else 8192})
    if "error" in matmul:
        print(f"error: the matmul measurement failed: {matmul['error']}")
        return 1
    rows = {}
    for name, overrides in ROWS.items():
        spec = {**base, "kind": "train", "overrides": overrides}
        rows[name] = run_child({**spec, "steps": args.steps, "repeats": args.repeats})
        print(f"  {name}: done", file=sys.stderr, flush=True)
    beam = run_child({**base, "kind": "beam", "sentences": args.beam_sentences})

    vendor = matmul["vendor_peak"]
    print(
        f"device: {matmul['device']}; shapes {args.shapes}, compute {args.dtype} (parameters "
        f"float32); measured {args.dtype} matmul: {matmul['flop/s'] / 1e12:.1f} "
        f"TFLOP/s" + (f"; vendor peak {vendor / 1e12:.0f} TFLOP/s" if vendor else "")
    )
    print()
    print(
        "| train step | step (ms) | target tokens/s | TFLOP/s | MFU (measured matmul) "
        "| MFU (vendor peak) | peak memory (GB) | first step (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | failed: {r['error']} | | | | | | |")
            continue
        per_device = r["flop/s"] / r["devices"]
        vendor_mfu = f"{100 * per_device / vendor:.0f}%" if vendor else "n/a"
        print(
            f"| {name} | {1000 * r['step']:.1f} | {r['tokens/s']:,.0f} | "
            f"{r['flop/s'] / 1e12:.2f} | {100 * per_device / matmul['flop/s']:.0f}% | "
            f"{vendor_mfu} | {gigabytes(r['peak_gb'])} | {r['first']:.1f} |"
        )
    print()
    if "sentences/s" in beam:
        print(
            f"beam search (beam 4, alpha 0.6, max source length + 50, batches of 128): "
            f"{beam['sentences/s']:,.1f} sentences/s, mean output {beam['mean_length']:.0f} "
            f"tokens, peak memory {gigabytes(beam['peak_gb'])} (GB)"
        )
    else:
        print(f"beam search: {beam.get('skipped') or 'failed: ' + beam.get('error', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
