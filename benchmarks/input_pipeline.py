"""Training input throughput at base's shapes, against what the accelerators eat.

Measures the translation pipeline as train.py runs it (``train_iterator`` with the data
config's defaults, from the run's id shards) at base's shapes: 96 packed rows of 256
source and 256 target tokens, one shared 8k SentencePiece model. Counted: non-pad target
tokens (what the loss is over) per second of wall time, after WARMUP batches, over
--seconds, for each worker count of --workers (0 = made in the training process and
prefetched by a thread; -1 = the default, one worker a core). Two corpora:

    zh-en   the shared zh-en gettext corpus (read in place, never copied; skipped when
            absent), 91k short pairs
    wmt     a synthetic corpus of WMT14 EN-DE's size and sentence lengths (4.5M pairs,
            about 27 and 29 pieces), generated into --tmp once

and prints, for each: the time to prepare its id shards (``python -m jaxtrans.prepare``'s
work), the tokens/s and tokens/s per worker process; then the table of the target tokens/s
each accelerator host consumes training base at an MFU (model FLOPs from
jaxtrans.models.model_flops, bf16 dense peaks from jaxtrans.training.mfu) and the worker
processes (host cores) that takes at the measured rate per worker.

    python benchmarks/input_pipeline.py                        # both corpora, 0,1,2,-1 workers
    python benchmarks/input_pipeline.py --corpora zh-en --seconds 5 --wmt-pairs 200000

Today's single thread (before id shards and workers) is measured by the same script at
the commit before them: ``--baseline REV`` runs the text pipeline of commit REV in a
temporary git worktree, with the same shapes and count.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(REPO, "..", "shared", "data", "zh-en_gettext.all.tsv")
WARMUP = 20
# Host accelerators: (name, chips per host, dense bf16 peak FLOP/s per chip).
HOSTS = (("H100", 1, 989e12), ("8x H100", 8, 989e12), ("v5e-8", 8, 197e12),
         ("v5p (4 chips)", 4, 459e12))  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default="zh-en,wmt", help="zh-en and/or wmt")
    parser.add_argument("--data", default=os.path.normpath(SHARED), help="the zh-en TSV")
    parser.add_argument("--workers", default="0,1,2,-1", help="worker counts to measure")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured per setting")
    parser.add_argument("--wmt-pairs", type=int, default=4_500_000)
    parser.add_argument("--tmp", default=os.path.join(tempfile.gettempdir(), "jaxtrans-input"))
    parser.add_argument("--mfu", default="0.4,0.8", help="MFUs of the accelerator table")
    parser.add_argument("--baseline", default="", help="measure this commit's pipeline too")
    parser.add_argument("--measure-text", default="", help=argparse.SUPPRESS)
    return parser.parse_args()


def base_data(train: str, workers: int | None = None):
    from jaxtrans.data.translation.data_config import get_data_config

    data = get_data_config()
    data.update(train=train, vocab_size=8000, character_coverage=1.0, batch_size=96)
    data.update(max_source_length=256, max_target_length=256, spm_max_sentences=300_000)
    if workers is not None:
        data.workers = workers
    return data


def target_tokens_per_second(iterator, seconds: float) -> tuple[float, int]:
    """(non-pad target tokens per second over ``seconds`` after WARMUP batches, batches)."""
    for _ in range(WARMUP):
        next(iterator)
    tokens = batches = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        tokens += int(np.count_nonzero(next(iterator)["target_out"]))
        batches += 1
    return tokens / (time.perf_counter() - start), batches


def synthetic_wmt(path: str, pairs: int) -> None:
    """WMT14 EN-DE-sized pairs: Zipf-distributed words of a 40k-word vocabulary of made-up
    words (1-4 syllables), sentence lengths around WMT's (lognormal, median ~22 words a
    side, a long tail), about WMT's 27-29 pieces a sentence with an 8k SentencePiece."""
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        return
    rng = np.random.default_rng(0)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ei", "au")]
    words = np.array(["".join(rng.choice(syllables, rng.integers(1, 5))) for _ in range(40_000)])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.partial", "w", encoding="utf-8") as f:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            lengths = np.clip(rng.lognormal(3.1, 0.6, (n, 2)).astype(int), 1, 200)
            ids = np.minimum(rng.zipf(1.2, lengths.sum()) - 1, len(words) - 1)
            text = np.split(words[ids], np.cumsum(lengths.ravel())[:-1])
            f.writelines(
                f"{' '.join(text[2 * i])}\t{' '.join(text[2 * i + 1])}\n" for i in range(n)
            )
    os.replace(f"{path}.partial", path)


def measure_corpus(name: str, train: str, workdir: str, args) -> list[tuple]:
    from jaxtrans.data.translation.id_shards import ID_SHARDS_DIR, ensure_id_shards
    from jaxtrans.data.translation.pipeline import default_workers, train_iterator
    from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer

    start = time.perf_counter()
    tokenizer = load_or_train_tokenizer(base_data(train), workdir)
    seconds = time.perf_counter() - start
    print(f"{name}: tokenizer {tokenizer.source_vocab_size} pieces, {seconds:.0f} s")
    fresh = not os.path.isdir(os.path.join(workdir, ID_SHARDS_DIR))
    start = time.perf_counter()
    shards = ensure_id_shards(base_data(train), tokenizer, workdir, say=lambda line: None)
    kind = "prepared" if fresh else "found (delete them to time preparing)"
    seconds = time.perf_counter() - start
    print(f"{name}: id shards of {len(shards):,} pairs {kind} in {seconds:.1f} s")
    mean = np.maximum(shards.lengths, 0).mean(axis=0)
    print(f"{name}: {mean[0]:.1f} source and {mean[1]:.1f} target pieces a pair on average")
    rows = []
    for workers in [int(w) for w in args.workers.split(",")]:
        iterator = train_iterator(base_data(train, workers), seed=0, shards=shards)
        rate, batches = target_tokens_per_second(iterator, args.seconds)
        iterator.close()
        processes = default_workers() if workers == -1 else workers
        label = f"{processes} (default)" if workers == -1 else str(workers)
        rows.append((name, label, rate, rate / max(processes, 1), batches))
        print(f"{name}: workers {label}: {rate / 1e6:.3f}M target tokens/s", flush=True)
    if args.baseline:
        rows.append((name, f"text, one thread ({args.baseline})", baseline(args, train, workdir),
                     None, None))  # fmt: skip
    return rows


def baseline(args, train: str, workdir: str) -> float:
    """The pipeline of commit ``args.baseline`` (text, tokenised as it goes), measured by
    this script in a temporary git worktree of it (removed after), same tokenizer."""
    tree = os.path.join(args.tmp, "baseline")
    git = ["git", "-C", REPO, "worktree"]
    subprocess.run([*git, "add", "--detach", tree, args.baseline], check=True, capture_output=True)
    try:
        command = [sys.executable, os.path.abspath(__file__), "--measure-text",
                   f"{train}|{workdir}", "--seconds", str(args.seconds)]  # fmt: skip
        out = subprocess.run(command, env={**os.environ, "PYTHONPATH": tree}, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    finally:
        subprocess.run([*git, "remove", "--force", tree], check=False, capture_output=True)
    return float(out.split()[-1])


def measure_text(args) -> None:
    """(in the baseline's worktree) The old ``train_iterator(data, tokenizer, seed)``."""
    from jaxtrans.data.translation.pipeline import train_iterator
    from jaxtrans.data.translation.tokenizer import load_tokenizer

    train, workdir = args.measure_text.split("|")
    iterator = train_iterator(base_data(train), load_tokenizer(workdir), seed=0)
    print(target_tokens_per_second(iterator, args.seconds)[0])


def accelerator_table(per_worker: float, mfus: list[float]) -> None:
    from jaxtrans.models import TransformerConfig
    from jaxtrans.models.model_flops import train_step_flops

    # base: 512/8/2048, 6+6 layers, shared vocabulary (configs/base.py), rows of 256.
    config = TransformerConfig(vocab_size=32000, d_model=512, num_heads=8, d_ff=2048,
                               num_encoder_layers=6, num_decoder_layers=6)  # fmt: skip
    per_slot = train_step_flops(config, 1, 256, 256) / 256
    print(f"\nbase: {per_slot / 1e6:.0f} MFLOP a target-token slot; at the measured "
          f"{per_worker / 1e6:.2f}M target tokens/s per worker process:\n")  # fmt: skip
    print("| host | MFU | target tokens/s | worker processes (cores) |")
    print("|---|---:|---:|---:|")
    for name, chips, peak in HOSTS:
        for mfu in mfus:
            need = chips * peak * mfu / per_slot
            print(f"| {name} | {mfu:.0%} | {need / 1e6:.1f}M | {int(np.ceil(need / per_worker))} |")


def main() -> int:
    args = parse_args()
    if args.measure_text:
        measure_text(args)
        return 0
    rows = []
    corpora = args.corpora.split(",")
    if "zh-en" in corpora:
        if os.path.isfile(args.data):
            rows += measure_corpus("zh-en", args.data, os.path.join(args.tmp, "zh-en"), args)
        else:
            print(f"zh-en: skipped, {args.data} not found (the shared data is not here)")
    if "wmt" in corpora:
        path = os.path.join(args.tmp, f"wmt-{args.wmt_pairs}.tsv")
        start = time.perf_counter()
        synthetic_wmt(path, args.wmt_pairs)
        print(
            f"wmt: {path} ({args.wmt_pairs:,} pairs) ready in {time.perf_counter() - start:.0f} s"
        )
        rows += measure_corpus("wmt", path, os.path.join(args.tmp, f"wmt-{args.wmt_pairs}"), args)
    if not rows:
        return 0
    print(f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; 96 rows of 256, "
          f"{args.seconds:.0f} s a setting\n")  # fmt: skip
    print("| corpus | worker processes | target tokens/s | per worker process | batches |")
    print("|---|---|---:|---:|---:|")
    for name, label, rate, per, batches in rows:
        per_text = f"{per / 1e6:.3f}M" if per is not None else ""
        print(f"| {name} | {label} | {rate / 1e6:.3f}M | {per_text} | {batches or ''} |")
    one = [r for r in rows if r[1] == "1"]
    two = [r for r in rows if r[1] == "2"]
    for a, b in zip(one, two, strict=False):
        print(f"{a[0]}: 2 workers / 1 = {b[2] / a[2]:.2f}x")
    if one:
        accelerator_table(min(r[3] for r in one), [float(m) for m in args.mfu.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
