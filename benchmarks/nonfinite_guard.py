"""What the non-finite guard costs: the host's waits of the loop, and the step itself.

The loop (always): the demo-size model's guarded step as the loop compiles and runs it
(step_layout.jit_train_step, guards.NonFiniteGuard.after_dispatch in ``stop`` mode), with
a host that makes each batch in a time drawn uniformly from (host - jitter, host +
jitter) times the device's own step time, as a data pipeline with jitter does. For each
``--in_flight`` (the guard's limit; 2 is the loop before, which waited for the step
before the newest), prints the milliseconds per step, the host's wait in the guard per
step, the steps in flight just after each dispatch (mean and most) and how busy the
device was (its step time x steps / wall time). Rounds interleave the settings so that a
shared machine's load falls on all alike.

The step (``--before REV``): the step of this tree against the step of an earlier revision
(e.g. one whose non-finite guard tested every leaf), both jit-compiled as the loop does
on the same batch, interleaved round after round: the median wall and CPU (all threads)
seconds per step of each, their ratios, and the number of ``is-finite`` operations over
tensors (not scalars) in each compiled step.

    python benchmarks/nonfinite_guard.py                      # in flight 1, 2 (before), 3
    python benchmarks/nonfinite_guard.py --in_flight 2,3 --host 0.9 --jitter 0.9
    python benchmarks/nonfinite_guard.py --before 635ff11 --rounds 15 --steps 5
"""

import argparse
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from configs import demo  # noqa: E402
from jaxtrans.data.reserved_pieces import NUM_RESERVED_IDS, PAD_ID  # noqa: E402
from jaxtrans.tasks.translation.translation_task import TranslationTask, model_config_of  # noqa: E402
from jaxtrans.training import sharding  # noqa: E402
from jaxtrans.training.guards import STEPS_IN_FLIGHT, NonFiniteGuard  # noqa: E402
from jaxtrans.training.optimizer import make_optimizer  # noqa: E402
from jaxtrans.training.state import init_train_state  # noqa: E402
from jaxtrans.training.step import make_train_step  # noqa: E402
from jaxtrans.training.step_layout import StepLayout, jit_train_step  # noqa: E402


def step_module_of(revision: str):
    """jaxtrans/training/step.py as it was at ``revision``, imported under another name."""
    source = subprocess.run(
        ["git", "-C", REPO, "show", f"{revision}:jaxtrans/training/step.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = os.path.join(tempfile.mkdtemp(), "step_before.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("step_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def demo_batch(rows: int, length: int, vocab: int) -> dict[str, np.ndarray]:
    """Rows of random ids, each between half and all of the row, then padding."""
    rng = np.random.default_rng(0)

    def side() -> np.ndarray:
        ids = rng.integers(NUM_RESERVED_IDS, vocab, (rows, length), dtype=np.int32)
        real = rng.integers(length // 2, length + 1, (rows, 1))
        return np.where(np.arange(length) < real, ids, PAD_ID).astype(np.int32)

    target = side()
    return {"source": side(), "target_in": target, "target_out": np.roll(target, -1, axis=1)}


def jitted_step(factory, task, config, mesh):
    """(step(batch) -> metrics, sync, its compiled HLO text) of ``factory``'s train step."""
    optimizer, schedule = make_optimizer(
        config.optimizer, task.model_config.d_model, config.train.num_steps
    )
    state, shardings, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    train_step = factory(task, optimizer, schedule)
    jitted = jax.jit(
        lambda state, batch: train_step(state, batch, state.dropout_key()),
        in_shardings=(shardings, sharding.batch_sharding(mesh)),
        out_shardings=(shardings, sharding.replicated(mesh)),
        donate_argnums=(0,),
    )
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    hlo = jitted.lower(abstract, batch_shapes(config)).compile().as_text()
    holder = {"state": state}

    def step(batch):
        holder["state"], metrics = jitted(holder["state"], batch)
        return metrics

    def sync():
        jax.block_until_ready(holder["state"])

    return step, sync, hlo


def batch_shapes(config) -> dict[str, jax.ShapeDtypeStruct]:
    rows, length = config.data.batch_size, config.data.max_target_length
    shape = jax.ShapeDtypeStruct((rows, length), np.int32)
    return {"source": shape, "target_in": shape, "target_out": shape}


def guarded_loop(task, config, mesh):
    """run(batch, steps, in_flight, host_seconds) -> (wall seconds, seconds the host waited
    in the guard, steps in flight after each dispatch): the loop's guarded step in stop
    mode, the host sleeping host_seconds() before each batch as if it made one."""
    optimizer, schedule = make_optimizer(
        config.optimizer, task.model_config.d_model, config.train.num_steps
    )
    state, shardings, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    layout = StepLayout.of(mesh, sharding.LOGICAL_RULES, shardings)
    step = sharding.with_axis_rules(
        jit_train_step(task, optimizer, schedule, 1, "stop", layout), mesh, layout.rules
    )
    holder = {"state": state}

    def run(batch, steps, in_flight, host_seconds):
        guard = NonFiniteGuard("stop", [], layout.replicated, in_flight=in_flight)
        pending, in_flight_counts = [], []
        jax.block_until_ready(holder["state"])
        start = time.perf_counter()
        for number in range(1, steps + 1):
            time.sleep(host_seconds())
            holder["state"], metrics = step(holder["state"], batch, guard.frozen)
            pending.append((number, metrics))
            recent = pending[-in_flight - 1 :]
            in_flight_counts.append(sum(not m["loss"].is_ready() for _, m in recent))
            guard.after_dispatch(number, {}, pending, lambda batch: {})
        jax.block_until_ready(holder["state"])
        return time.perf_counter() - start, guard.waited, in_flight_counts

    return run


def compare_in_flight(task, config, mesh, batch, args) -> None:
    """The loop's table (the module's docstring)."""
    run = guarded_loop(task, config, mesh)
    run(batch, 3, 1, lambda: 0.0)  # compile and warm up
    wall, _, _ = run(batch, args.steps * 4, 1, lambda: 0.0)
    step_s = wall / (args.steps * 4)  # the device's step, the host never in the way
    rng = random.Random(0)
    low, high = (args.host - args.jitter) * step_s, (args.host + args.jitter) * step_s
    host_seconds = lambda: max(0.0, rng.uniform(low, high))  # noqa: E731
    settings = [int(k) for k in args.in_flight.split(",")]
    results = {k: {"wall": [], "waited": [], "counts": []} for k in settings}
    for _ in range(args.rounds):
        for k in settings:
            wall, waited, counts = run(batch, args.loop_steps, k, host_seconds)
            results[k]["wall"].append(wall / args.loop_steps)
            results[k]["waited"].append(waited / args.loop_steps)
            results[k]["counts"] += counts
    print(
        f"the loop: device step {step_s * 1e3:.2f} ms; host {args.host:g} +- {args.jitter:g} "
        f"step times a batch; {args.rounds} rounds of {args.loop_steps} steps a setting"
    )
    print("| in flight | ms/step | host waiting ms/step | in flight after dispatch | device busy |")
    print("|---|---|---|---|---|")
    for k, r in results.items():
        name = f"{k} (before)" if k == 2 else f"{k} (now)" if k == STEPS_IN_FLIGHT else str(k)
        per_step = statistics.median(r["wall"])
        print(
            f"| {name} | {per_step * 1e3:.2f} | {statistics.median(r['waited']) * 1e3:.2f} | "
            f"mean {statistics.mean(r['counts']):.2f}, most {max(r['counts'])} | "
            f"{min(1.0, step_s / per_step):.0%} |",
            flush=True,
        )


def compare_steps(task, config, mesh, batch, args) -> None:
    """The step's comparison with revision ``args.before`` (the module's docstring)."""
    rows, length = config.data.batch_size, config.data.max_target_length
    variants = {
        "before": jitted_step(step_module_of(args.before).make_train_step, task, config, mesh),
        "now": jitted_step(make_train_step, task, config, mesh),
    }
    is_finite = {}
    for name, (step, sync, hlo) in variants.items():
        is_finite[name] = len(re.findall(r"= pred\[\d[\d,]*\]\S* is-finite\(", hlo))
        step(batch)  # compile and warm up
        sync()
    times = {name: [] for name in variants}
    cpu_times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (step, sync, _) in variants.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                step(batch)
            sync()
            times[name].append((time.perf_counter() - start) / args.steps)
            cpu_times[name].append((time.process_time() - cpu_start) / args.steps)
    params = sum(x.size for x in jax.tree.leaves(task.init_params(jax.random.key(0))))
    print(
        f"demo-size model: {params:,} parameters, batch {rows} x {length}, "
        f"{len(os.sched_getaffinity(0))} cores, {args.rounds} rounds of {args.steps} steps"
    )
    for name, samples in times.items():
        print(
            f"{name:>6}: median {statistics.median(samples) * 1e3:7.2f} ms/step "
            f"(min {min(samples) * 1e3:.2f}, max {max(samples) * 1e3:.2f}), "
            f"CPU {statistics.median(cpu_times[name]) * 1e3:7.2f} ms/step; "
            f"{is_finite[name]} is-finite ops over tensors in the compiled step"
        )
    ratio = lambda t: statistics.median(t["now"]) / statistics.median(t["before"])  # noqa: E731
    print(f"now / before: wall {ratio(times):.3f}, CPU {ratio(cpu_times):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="git revision of an earlier step to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    parser.add_argument(
        "--in_flight", default=f"1,2,{STEPS_IN_FLIGHT}", help="the loop's settings, e.g. 2,3"
    )
    parser.add_argument("--loop_steps", type=int, default=30, help="loop steps per round")
    parser.add_argument("--host", type=float, default=0.8, help="batch time / step time")
    parser.add_argument("--jitter", type=float, default=0.8, help="its spread, +- step times")
    args = parser.parse_args()

    config = demo.get_config()
    config.model.vocab_size = config.data.vocab_size
    task = TranslationTask(config, model_config_of(config))
    mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
    rows, length = config.data.batch_size, config.data.max_target_length
    batch = jax.device_put(demo_batch(rows, length, config.data.vocab_size))
    if args.in_flight:
        compare_in_flight(task, config, mesh, batch, args)
    if args.before:
        compare_steps(task, config, mesh, batch, args)


if __name__ == "__main__":
    main()
