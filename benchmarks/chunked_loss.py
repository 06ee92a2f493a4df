"""The translation loss and its gradient, plain (whole float32 logits) against chunked
(jaxtrans/training/chunked_loss.py), compiled on the local device at a run's shapes.

    python benchmarks/chunked_loss.py                          # base and big, both dtypes
    python benchmarks/chunked_loss.py --shapes base --dtypes bfloat16 --chunk_tokens 1024,4096
    python benchmarks/chunked_loss.py --quick                  # a small shape, seconds

Each row compiles ``jax.value_and_grad`` of the loss over the decoder's last states
[rows, length, d_model] and a tied output projection (the target embedding [vocab,
d_model], transposed as the model does), the plain path as the model and loss.py compute it
(the projection in the compute dtype, then float32), the chunked one as the translation
task calls it, and prints: the loss and the largest gradient differences from the plain
path (relative to the plain value and to the plain gradient's largest element), the
compiler's peak bytes (memory_analysis: temp + arguments + outputs), bytes accessed and
FLOPs (cost_analysis; "-" where the backend gives none), and the median time of a call.
Each (shape, dtype) has its own plain row to compare with.

The compiler counts a loop's body once (jaxtrans/compiling/compiled_programs.py), so its bytes
accessed and FLOPs of the chunked loss are those of one chunk plus what is outside the
loop; the "x chunks" columns are those of the same loss compiled for one chunk's positions
(no loop) times the number of chunks: the loss's traffic and work over the whole batch,
an estimate built from the compiler's counts (low by the recomputed forward products:
in one chunk's program XLA may reuse the forward's logits in the backward pass). The plain
path has no loop: both columns are the compiler's. Peak bytes need no correction.
"""

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxtrans.training.chunked_loss import (  # noqa: E402
    chunk_positions,
    chunked_label_smoothed_cross_entropy,
)
from jaxtrans.training.loss import label_smoothed_cross_entropy  # noqa: E402

# name: (rows, target length, d_model, vocabulary): configs/base.py's and big's batch
# (96 rows of 256 target positions, a 32k shared vocabulary), a small one to check, demo's.
SHAPES = {
    "base": (96, 256, 512, 32000),
    "big": (96, 256, 1024, 32000),
    "small": (16, 64, 128, 4000),
    # configs/demo.py's batch (64 rows of 32, d_model 128, a 1000-piece vocabulary): CPU.
    "demo": (64, 32, 128, 1000),
}
SMOOTHING = 0.1
MIB = 2**20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="base,big", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="compute dtypes")
    parser.add_argument(
        "--chunk_tokens", default="2048", help="comma-separated train.loss_chunk_tokens values"
    )
    parser.add_argument("--repeats", type=int, default=10, help="timed calls a row")
    parser.add_argument("--quick", action="store_true", help="the small shape, float32, 3 calls")
    return parser.parse_args()


def inputs(rows: int, length: int, d_model: int, vocab: int, dtype) -> tuple:
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.normal(size=(rows, length, d_model)), dtype)
    table = jnp.asarray(rng.normal(size=(vocab, d_model)) / np.sqrt(d_model), jnp.float32)
    targets = jnp.asarray(rng.integers(4, vocab, (rows, length)), jnp.int32)
    real = np.arange(length)[None] < rng.integers(length // 2, length + 1, (rows, 1))
    return hidden, table, jnp.where(real, targets, 0), jnp.asarray(real)


def plain_loss(dtype):
    def loss(hidden, table, targets, weights):
        logits = jnp.dot(hidden.astype(dtype), table.astype(dtype).T).astype(jnp.float32)
        return label_smoothed_cross_entropy(logits, targets, weights, SMOOTHING)["loss"]

    return loss


def chunked_loss(dtype, chunk_tokens: int):
    def loss(hidden, table, targets, weights):
        sums = chunked_label_smoothed_cross_entropy(
            hidden, table.T, None, targets, weights, SMOOTHING, chunk_tokens, dtype
        )
        return sums["loss"]

    return loss


def measure(loss_fn, args, repeats: int) -> dict:
    compiled = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1))).lower(*args).compile()
    memory = compiled.memory_analysis()
    peak = None
    if memory is not None:
        peak = sum(getattr(memory, f"{k}_size_in_bytes", 0) for k in ("temp", "argument", "output"))
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    value, grads = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return {
        "value": value,
        "grads": grads,
        "peak": peak,
        "bytes": cost.get("bytes accessed"),
        "flops": cost.get("flops"),
        "ms": 1e3 * statistics.median(times) if times else None,
    }


def whole_batch_counts(dtype, chunk_tokens: int, args) -> dict:
    """bytes accessed and FLOPs of one chunk's loss (no loop) times the chunks."""
    hidden, table, targets, weights = args
    rows, length = targets.shape
    positions, chunks = chunk_positions(rows, length, chunk_tokens)
    if chunks == 1:
        return {}
    one = (hidden[:, :positions], table, targets[:, :positions], weights[:, :positions])
    single = measure(chunked_loss(dtype, rows * positions), one, 0)
    return {
        key: None if single[key] is None else single[key] * chunks for key in ("bytes", "flops")
    }


def figure(value, scale: float, unit: str) -> str:
    return "-" if value is None else f"{value / scale:,.1f} {unit}"


def row(name: str, result: dict, reference: dict | None, whole: dict) -> str:
    if reference is None:
        loss_diff = grad_diff = "(reference)"
    else:
        want, got = float(reference["value"]), float(result["value"])
        loss_diff = f"{abs(got - want) / abs(want):.1e}"
        diffs = []
        for g, w in zip(result["grads"], reference["grads"], strict=True):
            w = jnp.asarray(w, jnp.float32)
            error = jnp.max(jnp.abs(jnp.asarray(g, jnp.float32) - w))
            diffs.append(f"{float(error / jnp.max(jnp.abs(w))):.1e}")
        grad_diff = " / ".join(diffs)
    cells = [
        name,
        f"{float(result['value']):.6g}",
        loss_diff,
        grad_diff,
        figure(result["peak"], MIB, "MiB"),
        figure(result["bytes"], MIB, "MiB"),
        figure(result["flops"], 1e9, "GFLOP"),
        figure(whole.get("bytes", result["bytes"]), MIB, "MiB"),
        figure(whole.get("flops", result["flops"]), 1e9, "GFLOP"),
        f"{result['ms']:.2f}",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    args = parse_args()
    shapes = ["small"] if args.quick else args.shapes.split(",")
    dtypes = ["float32"] if args.quick else args.dtypes.split(",")
    repeats = 3 if args.quick else args.repeats
    chunks = [int(c) for c in args.chunk_tokens.split(",")]
    print(
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}"
    )
    print(
        "| shape, dtype, loss | loss | rel. loss diff | rel. max grad diff (hidden / table) "
        "| peak bytes | bytes accessed | FLOPs | bytes accessed x chunks | FLOPs x chunks "
        "| ms / call |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        rows, length, d_model, vocab = SHAPES[shape]
        for dtype_name in dtypes:
            dtype = jnp.dtype(dtype_name)
            data = inputs(rows, length, d_model, vocab, dtype)
            label = f"{shape} {rows}x{length}, d {d_model}, vocab {vocab}, {dtype_name}"
            reference = measure(plain_loss(dtype), data, repeats)
            print(row(f"{label}, plain", reference, None, {}), flush=True)
            for chunk in chunks:
                result = measure(chunked_loss(dtype, chunk), data, repeats)
                whole = whole_batch_counts(dtype, chunk, data)
                print(row(f"{label}, chunked {chunk}", result, reference, whole), flush=True)


if __name__ == "__main__":
    main()
