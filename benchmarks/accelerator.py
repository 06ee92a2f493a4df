"""jaxtrans on an accelerator: the training loop's own step (loop_step.py: the run's mesh,
logical-axis rules and non-finite guard, the state donated) on packed batches from the
training pipeline, for configs/base.py as shipped and with one change per row (dtype,
attention kernel, dropout, remat, scanned layers, unpacked rows): step time, real target
tokens/s, MFU against the bfloat16 matmul rate measured in the same run and against the
vendor peak, peak device memory, the first step (compilation), the kernel of each
attention; then beam-search sentences/s. Never imports torch.

Every row runs in a fresh process under its own timeout (clean peak-memory counters,
nothing left allocated by the row before; a row that runs out of time is printed as
such and the next one starts), one at a time (``--jobs``: more at once, for --dry on a
CPU); each row is printed as it finishes. The parent never starts JAX. benchmarks/gpu.sh
runs this on a GPU:

    python benchmarks/accelerator.py                  # configs/base.py, nine rows
    python benchmarks/accelerator.py --rows 1,3 --set data.batch_size=192
    python benchmarks/accelerator.py --dry            # a tiny model on the CPU, seconds

Step time: steps dispatched back to back, cycling over --batches packed
batches already on the devices, one wait at the end of each group; the median over
--repeats groups of --steps steps. MFU = counted model FLOPs (the task's step_flops,
padding included) / step time / (devices x the measured matmul rate, or the vendor peak
jaxtrans.training.mfu.PEAK_FLOPS where the device is known). Beam search uses freshly
initialised parameters, so every hypothesis runs to its length limit (source length +
50): a lower bound on sentences/s.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(os.path.dirname(HERE), "configs", "base.py")

BF16 = {"model.dtype": "bfloat16"}
NO_DROPOUT = {"model.attention_dropout_rate": 0.0, "model.activation_dropout_rate": 0.0}
# One change of the shipped config per row (its --set overrides apply to every row).
ROWS = {
    "as shipped": {},
    "bfloat16, xla attention": {**BF16, "model.attention_impl": "xla"},
    "bfloat16, auto kernels": {**BF16, "model.attention_impl": "auto"},
    "bfloat16, auto kernels, no attention/activation dropout": {
        **BF16,
        "model.attention_impl": "auto",
        **NO_DROPOUT,
    },
    "float32, xla attention": {"model.dtype": "float32", "model.attention_impl": "xla"},
    "bfloat16, remat": {**BF16, "model.remat": True},
    "bfloat16, scanned layers": {**BF16, "model.scan_layers": True},
    "bfloat16, scanned layers, remat": {**BF16, "model.scan_layers": True, "model.remat": True},
    "bfloat16, one pair a row (data.pack=False)": {**BF16, "data.pack": False},
}
# --dry: a tiny model and batch on the CPU, the same rows, one short group each.
DRY = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "model.max_len": 64,
    "data.vocab_size": 256,
    "data.max_source_length": 32,
    "data.max_target_length": 32,
    "data.batch_size": 8,
    "data.tokens_per_batch": 0,
    "data.pack_pool_batches": 2,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help="a run config file (configs/base.py)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config field for every row, e.g. data.batch_size=192 (repeatable)",
    )
    parser.add_argument("--rows", default="", help="comma-separated row numbers (1-based)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed group")
    parser.add_argument("--repeats", type=int, default=5, help="timed groups")
    parser.add_argument("--batches", type=int, default=4, help="packed batches cycled over")
    parser.add_argument("--beam-sentences", type=int, default=1024)
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument(
        "--row-timeout", type=float, default=900, help="seconds for one row, compile included"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="rows run at once (1 on an accelerator: each row alone on the chip; --dry: 2)",
    )
    parser.add_argument("--dry", action="store_true", help="a tiny model on the CPU")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- a row's process


def peak_memory_gb() -> float | None:
    """Peak bytes in use on the first local device (None where the backend has no stats)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


def matmul_rate(size: int) -> float:
    """bfloat16 FLOP/s of one [size, size] x [size, size] product, best of 10."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.bfloat16)
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
    import loop_step
    import numpy as np

    from jaxtrans.nn.attention_kernels import describe_attention_kernels

    loop = loop_step.LoopStep(loop_step.run_config(spec["config"], spec["overrides"]))
    config = loop.config
    local = loop_step.packed_batches(config, spec["batches"])
    batches = [loop.put(batch) for batch in local]
    start = time.perf_counter()
    loop.step(batches[0])
    loop.sync()
    first = time.perf_counter() - start
    loop.step(batches[1 % len(batches)])  # a second warm-up: allocator and autotuning settled
    loop.sync()
    groups = []
    for _ in range(spec["repeats"]):
        start = time.perf_counter()
        for i in range(spec["steps"]):
            loop.step(batches[i % len(batches)])
        loop.sync()
        groups.append((time.perf_counter() - start) / spec["steps"])
    seconds = statistics.median(groups)
    tokens = np.mean([loop_step.real_target_tokens(b) for b in local]) * jax.process_count()
    kernels = describe_attention_kernels(loop.task.model_config, packed=config.data.pack)
    return {
        "first": first,
        "step": seconds,
        "tokens/s": tokens / seconds,
        "padding": float(np.mean([np.mean(b["target_out"] == loop_step.PAD_ID) for b in local])),
        "flop/s": loop.task.step_flops() / seconds,
        "devices": jax.device_count(),
        "peak_gb": peak_memory_gb(),
        "rows": int(config.data.batch_size),
        "kernels": kernels.partition(": ")[2],
    }


def beam_row(spec: dict) -> dict:
    """Beam search (beam 4, alpha 0.6, +50 tokens) over random sources of 10-40 ids."""
    import jax
    import loop_step
    import numpy as np
    from flax import linen as nn

    from jaxtrans.inference import SearchOptions, translate_ids
    from jaxtrans.tasks import compile_task

    task = compile_task(loop_step.run_config(spec["config"], spec["overrides"]))
    params = nn.unbox(jax.jit(task.init_params)(jax.random.key(0)))
    vocab = task.model_config.vocab_size
    rng = np.random.default_rng(0)
    sources = [
        [int(i) for i in rng.integers(7, vocab, rng.integers(10, 41))] + [1]  # EOS id 1
        for _ in range(spec["sentences"])
    ]
    options = SearchOptions(batch_size=128)  # beam 4, alpha 0.6, max_extra_length 50
    translate_ids(task.model_config, params, sources, options)  # compiles each bucket
    start = time.perf_counter()
    hypotheses = translate_ids(task.model_config, params, sources, options)
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
            "flop/s": matmul_rate(spec["size"]),
            "device": jax.devices()[0].device_kind,
            "platform": jax.default_backend(),
            "jax": jax.__version__,
            "vendor_peak": device_peak_flops() or 0.0,
        }
    if spec["kind"] == "beam":
        return beam_row(spec)
    return train_row(spec)


# ---------------------------------------------------------------- the parent


def run_child(spec: dict, timeout: float, env: dict[str, str]) -> dict:
    """One row in a fresh process: its answer, or {"error": why} (a timeout included)."""
    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def gigabytes(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"  # no memory statistics on the CPU


def show(line: str = "") -> None:
    print(line, flush=True)  # each line as it is known, not at the end


def table_row(name: str, r: dict, matmul: float, vendor: float) -> str:
    if "error" in r:
        return f"| {name} | {r['error']} |" + " |" * 8
    per_device = r["flop/s"] / r["devices"]
    vendor_mfu = f"{100 * per_device / vendor:.0f}%" if vendor else "n/a"
    return (
        f"| {name} | {1000 * r['step']:.1f} | {r['tokens/s']:,.0f} | {r['rows']} | "
        f"{100 * r['padding']:.0f}% | {100 * per_device / matmul:.0f}% | {vendor_mfu} | "
        f"{gigabytes(r['peak_gb'])} | {r['first']:.1f} | {r['kernels']} |"
    )


def selected_rows(text: str) -> dict[str, dict]:
    names = list(ROWS)
    if not text:
        return dict(ROWS)
    picked = [int(n) for n in text.split(",")]
    if not all(1 <= n <= len(names) for n in picked):
        raise SystemExit(f"error: --rows {text}: numbers 1-{len(names)}")
    return {names[n - 1]: ROWS[names[n - 1]] for n in picked}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        sys.path.insert(0, HERE)
        print(json.dumps(child(json.loads(args.child))))
        return 0
    sys.path.insert(0, HERE)
    from loop_step import parse_override  # no JAX: the parent never starts a backend

    env = dict(os.environ)
    common = [parse_override(text) for text in args.set]
    if args.dry:
        env["JAX_PLATFORMS"] = "cpu"
        common = list(DRY.items()) + common
        args.steps, args.repeats, args.batches, args.beam_sentences = 2, 1, 2, 8
        args.matmul_size, args.jobs = 256, max(args.jobs, 2)
    rows = selected_rows(args.rows)
    base = {"config": os.path.abspath(args.config)}
    timeout = args.row_timeout
    matmul = run_child({**base, "kind": "matmul", "size": args.matmul_size}, timeout, env)
    if "error" in matmul:
        show(f"error: the matmul measurement failed: {matmul['error']}")
        return 1
    vendor = matmul["vendor_peak"]
    show(
        f"device: {matmul['device']} ({matmul['platform']}), jax {matmul['jax']}; config "
        f"{os.path.relpath(args.config)}{''.join(f' {k}={v}' for k, v in common)}; "
        f"bfloat16 matmul: {matmul['flop/s'] / 1e12:.1f} TFLOP/s measured"
        + (f", {vendor / 1e12:.0f} vendor peak" if vendor else "")
    )
    show(
        f"the loop's step (mesh, rules, guard, donated state) on packed batches, median of "
        f"{args.repeats} x {args.steps} steps; each row its own process, at most {timeout:.0f} s"
    )
    show()
    show(
        "| train step | step (ms) | target tokens/s | rows | padding | MFU (measured matmul) "
        "| MFU (vendor peak) | peak memory (GB) | first step (s) | attention kernels |"
    )
    show("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    specs = {
        name: {**base, "kind": "train", "overrides": common + list(overrides.items())}
        | {"steps": args.steps, "repeats": args.repeats, "batches": args.batches}
        for name, overrides in rows.items()
    }
    beam_spec = {**base, "kind": "beam", "overrides": common, "sentences": args.beam_sentences}
    with ThreadPoolExecutor(args.jobs) as pool:  # each row a process of its own
        running = {name: pool.submit(run_child, spec, timeout, env) for name, spec in specs.items()}
        beam_running = pool.submit(run_child, beam_spec, timeout, env)
        for name, result in running.items():  # in row order, each as soon as it is done
            show(table_row(name, result.result(), matmul["flop/s"], vendor))
        show()
        beam = beam_running.result()
    if "sentences/s" in beam:
        show(
            f"beam search (beam 4, alpha 0.6, max source length + 50, batches of 128): "
            f"{beam['sentences/s']:,.1f} sentences/s, mean output {beam['mean_length']:.0f} "
            f"tokens, peak memory {gigabytes(beam['peak_gb'])} (GB)"
        )
    else:
        show(f"beam search: failed: {beam['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
