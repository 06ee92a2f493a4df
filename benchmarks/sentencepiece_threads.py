"""What the fixed SentencePiece thread count costs: the demo corpus's tokenizer trained with
one thread per core (what os.cpu_count() gave) and with the fixed count
(jaxtrans.data.tokenizers.sentencepiece_training.TRAINING_THREADS), each in a fresh
process pinned to the first N cores, and whether the model files agree.

    python benchmarks/sentencepiece_threads.py                 # 1 and 2 cores, 100,000 pairs
    python benchmarks/sentencepiece_threads.py --cores 1 2 4 8 --pairs 200000 --repeats 3

Prints one row per (cores, threads): the median seconds of --repeats trainings, and the
SHA-256 of the model file (the same digest in every row of the fixed count: the same model
on every machine).
"""

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = """
import os, sys, time
os.sched_setaffinity(0, set(range(int(sys.argv[1]))))
from jaxtrans.data.tokenizers import sentencepiece_training as training
from jaxtrans.data.translation.demo import demo_split
training.TRAINING_THREADS = int(sys.argv[2])
pairs = demo_split("train", size=int(sys.argv[3]), seed=0, held_out_sizes=(500, 500))
sentences = [side for pair in pairs for side in (pair[0], pair[1])]
start = time.perf_counter()
training.train_sentencepiece(sentences, sys.argv[5], vocab_size=int(sys.argv[4]),
                             model_type="unigram", character_coverage=1.0)
print(time.perf_counter() - start)
"""


def train(cores: int, threads: int, pairs: int, vocab: int, path: str) -> float:
    env = {**os.environ, "PYTHONPATH": REPO}
    args = [str(a) for a in (cores, threads, pairs, vocab, path)]
    result = subprocess.run(
        [sys.executable, "-c", TRAIN, *args], env=env, capture_output=True, text=True, check=True
    )
    return float(result.stdout.split()[-1])


def main() -> None:
    from jaxtrans.data.tokenizers.sentencepiece_training import TRAINING_THREADS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    available = len(os.sched_getaffinity(0))
    print(f"| cores | threads | seconds (median of {args.repeats}) | model SHA-256 |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for cores in args.cores:
            if cores > available:
                print(f"| {cores} | - | only {available} cores here | |")
                continue
            for threads in sorted({cores, TRAINING_THREADS}):
                path = os.path.join(scratch, f"{cores}-{threads}.model")
                seconds = [
                    train(cores, threads, args.pairs, args.vocab, path) for _ in range(args.repeats)
                ]
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:16]
                print(f"| {cores} | {threads} | {statistics.median(seconds):.2f} | {digest} |")


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
