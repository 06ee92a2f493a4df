"""What stored decoders save a fresh ``evaluate.py``: the same command with the traced
programs read from the store and with every decoder traced again, the compilation cache
warm both ways.

Stored decoders (``jaxtrans/inference/stored_decoders.py``, ``StoredJit`` and
``stored_shapes``) keep each traced decoder (``jax.export``) and a checkpoint's parameter
shapes beside the persistent compilation cache, so that a later process neither traces nor
lowers its decoders again. This script measures what that is worth where it matters, a
fresh ``evaluate.py --workdir RUN`` scoring a split:

    stored   the stored programs present (what evaluate.py did)
    traced   the same process with the store switched off (``store_directory`` returns
             ""): every decoder traced, lowered and read from the compilation cache, the
             parameters' shapes traced from the model's init
    plain    only with --checkout: this tree's own evaluate.py, for a tree where the stored
             decoders are gone (plain ``jax.jit``); it should equal ``traced``

Every way has its own warm compilation cache, filled by one untimed run first. The ways
alternate round by round; the table gives the medians of the process's wall time, its
CPU time and its decoding (the report's ``decode_seconds``: tracing, reading the cache
and decoding), what ``stored`` saves and that saving over the ``traced`` process (the
rule: they stay only if they save at least a third of a fresh evaluate.py). Every run's
report must hold the same BLEU and translations.

    python train.py --config configs/demo.py --workdir runs/demo
    python benchmarks/stored_decoders.py --workdir runs/demo [--beams 1,4] [--rounds 5]

The stored decoders were removed on 2026-12-06 (docs/benchmarks.md, "Cold start"): since,
--checkout names a tree that has them, the revision before their removal:

    git worktree add /tmp/with_stored "$(git log --diff-filter=D --format=%H -1 \
        -- jaxtrans/inference/stored_decoders.py)^"
    python benchmarks/stored_decoders.py --workdir runs/demo --checkout /tmp/with_stored
"""

import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAYS = ("stored", "traced")
# A run's measurements: the process's wall and CPU seconds (user + system, less sensitive to
# other work on a loaded machine), and the report's decode_seconds.
PARTS = ("wall", "cpu", "decode")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a trained translation run (configs/demo.py)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--beams", default="1,4", help="beam sizes, comma-separated (1: greedy)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--checkout", default=REPO, help="the tree whose stored decoders are measured"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the job of a fresh process
    return parser.parse_args(argv)


def child(way: str, argv: list[str]) -> None:
    """evaluate.py's main with ``argv``, the store switched off for the ``traced`` way."""
    if way == "traced":
        from jaxtrans.inference import stored_decoders

        stored_decoders.store_directory = lambda: ""
    from jaxtrans.programs.evaluate import main

    main(["evaluate.py", *argv])


def run_evaluate(args, way: str, beam: int, cache: str, outdir: str) -> dict:
    """A fresh evaluate.py of ``way``: its wall seconds and its report."""
    tree = REPO if way == "plain" else args.checkout
    evaluate = ["--workdir", args.workdir, "--split", args.split, f"--beam_size={beam}",
                "--outdir", outdir, f"--compilation_cache_dir={cache}"]  # fmt: skip
    if way == "plain":
        command = [sys.executable, "evaluate.py", *evaluate]
    else:
        command = [sys.executable, os.path.abspath(__file__), "--child", way, "--", *evaluate]
    environment = {**os.environ, "PYTHONPATH": tree}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(command, check=True, cwd=tree, env=environment, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    (path,) = glob.glob(os.path.join(outdir, "*.json"))
    with open(path, encoding="utf-8") as file:
        report = json.load(file)
    (path,) = glob.glob(os.path.join(outdir, "*.hyp.txt"))
    with open(path, encoding="utf-8") as file:
        report["hypotheses"] = file.read()
    for path in glob.glob(os.path.join(outdir, "*")):  # the next run's files alone
        os.remove(path)
    return {"wall": seconds, "cpu": cpu, "decode": report["decode_seconds"], "report": report}


def measure(args, scratch: str, ways: list[str]) -> dict:
    """{beam: {way: [run, ...]}}, the ways alternating round by round."""
    beams = [int(b) for b in args.beams.split(",")]
    caches = {way: os.path.join(scratch, f"cache-{way}") for way in ways}
    outdir = os.path.join(scratch, "eval")
    for beam in beams:  # each way's cache warm, untimed
        for way in ways:
            run_evaluate(args, way, beam, caches[way], outdir)
    results = {beam: {way: [] for way in ways} for beam in beams}
    for round_ in range(args.rounds):
        for beam in beams:
            for way in ways if round_ % 2 == 0 else ways[::-1]:
                run = run_evaluate(args, way, beam, caches[way], outdir)
                results[beam][way].append(run)
                print(f"  round {round_ + 1}, beam {beam}, {way}: {run['wall']:.2f} s, CPU "
                      f"{run['cpu']:.2f} s (decoding {run['decode']:.2f} s)",
                      file=sys.stderr, flush=True)  # fmt: skip
    return results


def print_table(args, results: dict, ways: list[str]) -> None:
    print(f"\nA fresh `evaluate.py --split {args.split}`, warm compilation cache, "
          f"{args.rounds} rounds, medians\n")  # fmt: skip
    print("| decoding | way | process (s) | process CPU (s) | decoding (s) |")
    print("|---|---|---:|---:|---:|")
    for beam, runs in results.items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        medians = {way: {k: statistics.median(r[k] for r in runs[way]) for k in PARTS}
                   for way in ways}  # fmt: skip
        for way in ways:
            print(f"| {name} | {way} | " + " | ".join(f"{medians[way][k]:.2f}" for k in PARTS)
                  + " |")  # fmt: skip
        # What the store saves, and its share of the traced process's (the rule:
        # at least a third of a fresh evaluate.py) and of the stored one's.
        cells = []
        for k in PARTS:
            saved = medians["traced"][k] - medians["stored"][k]
            cells.append(f"{saved:.2f} ({saved / medians['traced'][k]:.0%} of traced, "
                         f"{saved / medians['stored'][k]:.0%} of stored)")  # fmt: skip
        print(f"| {name} | **saved** | " + " | ".join(cells) + " |")
    for beam, runs in results.items():
        outputs = {(r["report"]["bleu"], r["report"]["hypotheses"]) for w in ways for r in runs[w]}
        same = "the same translations" if len(outputs) == 1 else "DIFFERENT translations"
        print(f"\nbeam {beam}: every process wrote {same} (BLEU {sorted(o[0] for o in outputs)})")


def main() -> None:
    if "--child" in sys.argv:
        at = sys.argv.index("--child")
        child(sys.argv[at + 1], sys.argv[sys.argv.index("--") + 1 :])
        return
    args = parse_args()
    if not args.workdir:
        sys.exit("give --workdir: a trained translation run (python train.py --config demo)")
    args.workdir, args.checkout = os.path.abspath(args.workdir), os.path.abspath(args.checkout)
    if not os.path.exists(os.path.join(args.checkout, "jaxtrans/inference/stored_decoders.py")):
        sys.exit(f"{args.checkout} has no stored decoders: give --checkout, a tree that has them")
    ways = [*WAYS, "plain"] if args.checkout != REPO else list(WAYS)
    with tempfile.TemporaryDirectory(prefix="stored_decoders_") as scratch:
        print_table(args, measure(args, scratch, ways), ways)


if __name__ == "__main__":
    main()
