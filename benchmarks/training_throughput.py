"""Whole training on real parallel text: input pipeline plus step, in non-pad target
tokens per second, for the same model fed three ways.

(a)  jaxtrans: train_iterator (packed rows, tokenised in a prefetch thread that overlaps
     the step) -> the jitted jaxtrans step
(a') the same without the prefetch thread (the pipeline runs between steps)
(b)  the seeds' batches under jit: shuffled pairs padded to the longest sentence, lengths
     rounded up to a multiple of --length-multiple so that few shapes compile (each new
     shape is compiled outside the timing and counted) -> the jaxtrans step
(c)  the seeds' way: the same padded batches (not rounded) -> eager PyTorch,
     torch.nn.Transformer (steps.py), the batch built between steps

Methods run interleaved in rounds on the same cores. The model is steps.py's "small"
shape with the vocabulary of a SentencePiece model trained on the data.

    python benchmarks/training_throughput.py       # ../shared/data/zh-en_gettext.all.tsv

Skips (exit 0) when the data file is absent. The data is read in place, never copied.
"""

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import steps
import torch
from input_pipeline import DEFAULT_DATA, padded_random_batches

from jaxtrans.data.reserved_pieces import PAD_ID
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.pipeline import train_iterator
from jaxtrans.data.translation.sources import training_pairs as read_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer

Batch = dict[str, np.ndarray]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="TSV of SOURCE<TAB>TARGET pairs")
    parser.add_argument("--workdir", default="", help="reuse the tokenizer trained here")
    parser.add_argument("--batch-size", type=int, default=32, help="rows (pairs when padded)")
    parser.add_argument("--max-length", type=int, default=64, help="source and target")
    parser.add_argument("--length-multiple", type=int, default=16, help="(b)'s length rounding")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="steps per method per round")
    return parser.parse_args()


def round_up(batch: Batch, rows: int, multiple: int) -> Batch:
    """Pad with PAD to ``rows`` rows and lengths that are multiples of ``multiple``."""

    def pad(x: np.ndarray) -> np.ndarray:
        extra = ((0, rows - x.shape[0]), (0, -x.shape[1] % multiple))
        return np.pad(x, extra, constant_values=PAD_ID)

    return {key: pad(value) for key, value in batch.items()}


class Method:
    """One way of feeding the model: ``step()`` fetches a batch and trains on it, timed.

    With ``compile_per_shape`` (method (b)), a batch of a shape not seen before is first
    trained on outside the timing, which compiles the step for it; the compilations are
    counted instead.
    """

    def __init__(
        self, batches: Iterator[Batch], train: Callable, sync=None, compile_per_shape=False
    ):
        self.batches, self.train, self.sync = batches, train, sync or (lambda: None)
        self.compile_per_shape = compile_per_shape
        self.shapes: set[tuple] = set()
        self.compile_seconds = 0.0
        self.seconds: list[float] = []
        self.tokens = self.slots = 0  # real target tokens; target positions with padding

    def step(self, timed: bool = True) -> None:
        start = time.perf_counter()
        batch = next(self.batches)
        shape = tuple(value.shape for value in batch.values())
        if self.compile_per_shape and shape not in self.shapes:
            self.shapes.add(shape)
            compile_start = time.perf_counter()
            self.train(batch)
            self.sync()
            self.compile_seconds += time.perf_counter() - compile_start
            start += time.perf_counter() - compile_start
        self.train(batch)
        self.sync()
        if timed:
            self.seconds.append(time.perf_counter() - start)
            self.tokens += steps.real_target_tokens(batch)
            self.slots += batch["target_out"].size


def main() -> int:
    args = parse_args()
    if not os.path.isfile(args.data):
        print(f"skipped: {args.data} not found (the shared development data is not here)")
        return 0
    torch.set_num_threads(steps.cpu_threads())
    data = get_data_config()
    data.update(
        train=args.data,
        vocab_size=8000,
        character_coverage=1.0,
        batch_size=args.batch_size,
        max_source_length=args.max_length,
        max_target_length=args.max_length,
    )
    workdir = args.workdir or tempfile.mkdtemp(prefix="jaxtrans-bench-")
    tokenizer = load_or_train_tokenizer(data, workdir)
    shapes = dataclasses.replace(
        steps.SHAPES["small"],
        vocab_size=tokenizer.source_vocab_size,
        batch_size=args.batch_size,
        source_length=args.max_length,
        target_length=args.max_length,
    )
    config = steps.jaxtrans_config(shapes)
    pairs = read_pairs(data)

    def padded() -> Iterator[Batch]:
        return padded_random_batches(pairs, tokenizer, args.batch_size, *[args.max_length] * 2)

    def rounded() -> Iterator[Batch]:
        return (round_up(b, args.batch_size, args.length_multiple) for b in padded())

    methods: dict[str, Method] = {}
    step, sync = steps.jaxtrans_step(config, shapes)
    methods["(a) jaxtrans pipeline, packed, prefetched"] = Method(
        train_iterator(data, tokenizer, seed=0), step, sync
    )
    data.prefetch_batches = 0
    step, sync = steps.jaxtrans_step(config, shapes)
    methods["(a') jaxtrans pipeline, packed, no prefetch"] = Method(
        train_iterator(data, tokenizer, seed=0), step, sync
    )
    step, sync = steps.jaxtrans_step(config, shapes)
    methods[f"(b) padded to longest (rounded to {args.length_multiple}), jaxtrans step"] = Method(
        rounded(), step, sync, compile_per_shape=True
    )
    methods["(c) padded to longest, eager PyTorch"] = Method(padded(), steps.torch_step(shapes))

    for method in methods.values():
        method.step(timed=False)  # compile, allocate, start the prefetch thread
    for round_ in range(args.rounds):
        for method in methods.values():
            for _ in range(args.steps):
                method.step()
        print(f"  round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    print(
        f"data: {args.data} ({len(pairs)} pairs); vocab {tokenizer.source_vocab_size}; "
        f"{args.batch_size} rows, max length {args.max_length}; small model "
        f"(d_model {shapes.d_model}, {shapes.num_layers}+{shapes.num_layers} layers); "
        f"{steps.cpu_threads()} threads; {args.rounds} rounds x {args.steps} steps; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| method | non-pad target tokens/s | vs (c) | target padding | step, median (s) |")
    print("|---|---:|---:|---:|---:|")
    rates = {n: m.tokens / sum(m.seconds) for n, m in methods.items()}
    baseline = rates["(c) padded to longest, eager PyTorch"]
    for name, method in methods.items():
        padding = 1 - method.tokens / method.slots
        print(
            f"| {name} | {rates[name]:,.0f} | {rates[name] / baseline:.2f}x | "
            f"{100 * padding:.0f}% | {statistics.median(method.seconds):.3f} |"
        )
    compiled = next(m for m in methods.values() if m.compile_per_shape)
    print(
        f"\n(b) compiled {len(compiled.shapes)} shapes in {compiled.compile_seconds:.0f} s "
        "(not in its tokens/s)"
    )
    for method in methods.values():
        if hasattr(method.batches, "close"):
            method.batches.close()  # the prefetch thread
    return 0


if __name__ == "__main__":
    sys.exit(main())
