"""Packed rows against batches padded to their longest sentence, on one CPU core.

Compares (a) the jaxtrans training pipeline, packing pairs into fixed-length rows, with
(b) the common baseline of random batches padded to their longest sentence (what a
PyTorch DataLoader with a padding collate function does), and (c) the jaxtrans pipeline
without packing (one pair a row, padded to the maximum length). All three use the same
SentencePiece model; (a) and (c) read the pairs' ids tokenised when the iterator is made
(as training reads its id shards), (b) tokenises as it goes; on one core (the process is
pinned to it), in the training process (data.workers = 0). The pipeline's throughput with
worker processes is benchmarks/input_pipeline.py's.

    python benchmarks/input_padding.py                   # ../shared/data/zh-en_gettext.all.tsv

Skips (exit 0) when the data file is absent. The data is read in place, never copied.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.pipeline import train_iterator
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer

DEFAULT_DATA = os.path.normpath(
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "..",
        "shared",
        "data",
        "zh-en_gettext.all.tsv",
    )
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="TSV of SOURCE<TAB>TARGET pairs")
    parser.add_argument("--workdir", default="", help="reuse the tokenizer trained here")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per batch")
    # Chinese sources take ~13% fewer pieces than their English targets, so the source
    # budget is 7/8 of the target's: both sides then fill alike.
    parser.add_argument("--max-source-length", type=int, default=56)
    parser.add_argument("--max-target-length", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=300, help="batches timed per method")
    return parser.parse_args()


def measure(batches, count: int) -> dict[str, float]:
    """Times ``count`` batches; pairs = segments, tokens = non-pad source + target ids."""
    for _ in range(5):  # warm-up
        next(batches)
    pairs = tokens = pads = 0
    start = time.perf_counter()
    for _ in range(count):
        batch = next(batches)
        if "source_segments" in batch:
            pairs += int(batch["source_segments"].max(axis=1).sum())
        else:
            pairs += batch["source"].shape[0]
        real = np.count_nonzero(batch["source"] != PAD_ID)
        real += np.count_nonzero(batch["target_in"] != PAD_ID)
        tokens += real
        pads += batch["source"].size + batch["target_in"].size - real
    seconds = time.perf_counter() - start
    return {
        "pairs/s": pairs / seconds,
        "tokens/s": tokens / seconds,
        "padding": pads / (pads + tokens),
        "pairs/batch": pairs / count,
    }


def padded_random_batches(pairs, tokenizer, batch_size: int, max_source: int, max_target: int):
    """Baseline: shuffled pairs, batch_size at a time, padded to the longest in the batch."""
    rng = np.random.default_rng(0)
    while True:
        order = rng.permutation(len(pairs))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            sources, targets = [], []
            for i in order[start : start + batch_size]:
                pair = pairs[int(i)]
                source = tokenizer.encode_source(pair.source) + [EOS_ID]
                target = tokenizer.encode_target(pair.target)
                if len(source) <= max_source and len(target) < max_target:
                    sources.append(source)
                    targets.append(target)
            yield pad_batch(sources, targets)


def pad_batch(sources: list[list[int]], targets: list[list[int]]) -> dict[str, np.ndarray]:
    """Sources (ending in EOS) and targets (without BOS or EOS) padded to the longest:
    source [rows, longest], target_in (BOS first) and target_out (EOS last) [rows,
    longest target + 1], int32."""
    source_length = max(map(len, sources))
    target_length = max(map(len, targets)) + 1
    batch = {
        "source": np.full((len(sources), source_length), PAD_ID, np.int32),
        "target_in": np.full((len(sources), target_length), PAD_ID, np.int32),
        "target_out": np.full((len(sources), target_length), PAD_ID, np.int32),
    }
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        batch["source"][row, : len(source)] = source
        batch["target_in"][row, : len(target) + 1] = [BOS_ID, *target]
        batch["target_out"][row, : len(target) + 1] = [*target, EOS_ID]
    return batch


def main() -> int:
    args = parse_args()
    if not os.path.isfile(args.data):
        print(f"skipped: {args.data} not found (the shared development data is not here)")
        return 0
    data = get_data_config()
    data.update(
        train=args.data,
        vocab_size=args.vocab_size,
        character_coverage=1.0,
        batch_size=args.batch_size,
        max_source_length=args.max_source_length,
        max_target_length=args.max_target_length,
        prefetch_batches=0,  # measure the pipeline itself, in this one thread
        workers=0,
    )
    workdir = args.workdir or tempfile.mkdtemp(prefix="jaxtrans-bench-")
    start = time.perf_counter()
    tokenizer = load_or_train_tokenizer(data, workdir)
    print(f"tokenizer: vocab {tokenizer.source_vocab_size}, {time.perf_counter() - start:.1f} s")

    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    pairs = training_pairs(data)
    print(
        f"data: {args.data} ({len(pairs)} pairs), batch {args.batch_size} rows, "
        f"max lengths {args.max_source_length}/{args.max_target_length}, 1 CPU core"
    )

    results = {}
    packed = train_iterator(data, tokenizer, seed=0)
    results["(a) jaxtrans, packed rows"] = measure(packed, args.batches)
    dropped = packed.stats()["pairs_dropped_too_long"] / packed.stats()["pairs_read"]
    baseline = padded_random_batches(
        pairs, tokenizer, args.batch_size, args.max_source_length, args.max_target_length
    )
    results["(b) random batches padded to longest"] = measure(baseline, args.batches)
    data.pack = False
    unpacked = train_iterator(data, tokenizer, seed=0)
    results["(c) jaxtrans, one pair a row"] = measure(unpacked, args.batches)

    print()
    print("| method | pairs/s | tokens/s | padding | pairs/batch |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(
            f"| {name} | {r['pairs/s']:,.0f} | {r['tokens/s']:,.0f} | "
            f"{100 * r['padding']:.1f}% | {r['pairs/batch']:.0f} |"
        )
    print(f"\npairs dropped as too long: {100 * dropped:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
