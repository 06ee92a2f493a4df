"""Cold start of decoding: a fresh process's first call against a warm one, with and
without the persistent compilation cache (jaxtrans.compilation_cache).

Each measurement is a fresh process of its own, the processes alternating round by round;
the table gives medians over the rounds, greedy and beam search alike:

    (a) empty cache   a fresh process, a new empty cache directory: Translator.load, then
                      the first translate call (tracing, compiling, decoding)
    (b) warm cache    a fresh process whose cache directory an earlier run filled: the
                      first call reads the compiled decoders instead of compiling them
    (c) warm          the second call in the same process (the (a) processes'): decoding
                      alone

and where the first call's time goes (jax's own monitoring events: tracing, lowering to
XLA, compiling or reading the cache), the import and the checkpoint restore. Then the
whole ``evaluate.py --input`` command, fresh, with no cache and with a warm one.

The sentences: the demo corpus's test stream (its first 500 are the demo's test split),
so any trained demo run decodes them; --input FILE takes a file's lines instead. The run
trains nothing: give it a workdir (python train.py --config demo --workdir runs/demo).

    python benchmarks/decode_cold_start.py --workdir runs/demo [--sentences 1000] [--rounds 3]
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # this checkout's jaxtrans, in the driver and in every child
# jax's monitoring events of a compilation, as the table names them.
EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile or read",
    "/jax/compilation_cache/cache_retrieval_time_sec": "read",
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a trained translation run (train.py --config demo)")
    parser.add_argument("--input", help="sentences to translate, one a line (default: demo)")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--beams", default="1,4", help="beam sizes, comma-separated (1: greedy)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the job of a fresh process
    return parser.parse_args(argv)


# ------------------------------------------------------------------ in the fresh process


def child(job: dict) -> dict:
    """Import, load, translate twice; seconds of each, and the first call's by event."""
    started = time.perf_counter()
    import jax

    from jaxtrans.programs.translator import Translator

    imported = time.perf_counter()
    events: dict[str, float] = {}

    def listen(event: str, duration: float, **_) -> None:
        if event in EVENTS:
            events[EVENTS[event]] = events.get(EVENTS[event], 0.0) + duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    translator = Translator.load(job["workdir"], compilation_cache_dir=job["cache"])
    loaded = time.perf_counter()
    events.clear()  # the first call's alone
    settings = dict(beam_size=job["beam"])
    first = translator.translate(job["sentences"], **settings)
    first_done = time.perf_counter()
    first_events = dict(events)
    second = translator.translate(job["sentences"], **settings)
    second_done = time.perf_counter()
    assert second == first, "the second call translated otherwise"
    return {
        "import": imported - started,
        "load": loaded - imported,
        "first": first_done - loaded,
        "second": second_done - first_done,
        "events": first_events,
        "digest": hashlib.sha256("\n".join(first).encode()).hexdigest()[:12],
    }


# ------------------------------------------------------------------ the driver


def run_child(job: dict, scratch: str) -> dict:
    path = os.path.join(scratch, "job.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(job, f)
    command = [sys.executable, os.path.abspath(__file__), "--child", path]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=REPO)
    return json.loads(out.stdout.split("RESULT ", 1)[1])


def run_evaluate(args, input_path: str, beam: int, cache: str) -> tuple[float, str]:
    """Wall seconds of a fresh ``evaluate.py --input`` and a digest of what it wrote."""
    output = input_path + f".beam{beam}.out"
    command = [sys.executable, "evaluate.py", "--workdir", args.workdir, "--input", input_path,
               "--output", output, f"--beam_size={beam}",
               f"--compilation_cache_dir={cache}"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(output, encoding="utf-8") as f:
        return seconds, hashlib.sha256(f.read().rstrip("\n").encode()).hexdigest()[:12]


def sentences(args) -> list[str]:
    if args.input:
        with open(args.input, encoding="utf-8") as f:
            return f.read().splitlines()[: args.sentences]
    from jaxtrans.data.translation.demo import demo_split
    from jaxtrans.workdirs.workdir import load_run_config

    data = load_run_config(args.workdir).data
    pairs = demo_split("test", size=args.sentences, seed=data.demo_seed, held_out_sizes=(0, 0))
    return [p.source for p in pairs]


def measure(args, scratch: str) -> dict:
    """{beam: {"a": [...], "b": [...], "eval none": [...], "eval warm": [...]}}."""
    lines = sentences(args)
    input_path = os.path.join(scratch, "input.txt")
    with open(input_path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    beams = [int(b) for b in args.beams.split(",")]
    warm = {beam: os.path.join(scratch, f"warm{beam}") for beam in beams}
    for beam in beams:  # fill each warm cache once, untimed
        run_evaluate(args, input_path, beam, warm[beam])

    def way(name: str, beam: int):
        job = {"workdir": args.workdir, "beam": beam, "sentences": lines}
        if name == "a":
            return run_child({**job, "cache": tempfile.mkdtemp(dir=scratch)}, scratch)
        if name == "b":
            return run_child({**job, "cache": warm[beam]}, scratch)
        return run_evaluate(args, input_path, beam, warm[beam] if name == "eval warm" else "")

    names = ["a", "b", "eval none", "eval warm"]
    results = {beam: {name: [] for name in names} for beam in beams}
    for round_ in range(args.rounds):
        for beam in beams if round_ % 2 == 0 else beams[::-1]:
            for name in names if round_ % 2 == 0 else names[::-1]:
                result = way(name, beam)
                results[beam][name].append(result)
                seconds = result[0] if name.startswith("eval") else result["first"]
                print(f"  round {round_ + 1}, beam {beam}, {name}: {seconds:.2f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
    return results


def print_tables(args, results: dict) -> None:
    def median(values) -> float:
        return statistics.median(values)

    count = args.sentences
    print(f"\n{count} sentences, {args.rounds} rounds, medians (s)\n")
    print("| decoding | (a) empty cache: first call | (b) warm cache: first call | "
          "(c) warm: second call | (a)/(c) | (b)/(c) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for beam, runs in results.items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        a, b = median([r["first"] for r in runs["a"]]), median([r["first"] for r in runs["b"]])
        c = median([r["second"] for r in runs["a"] + runs["b"]])
        print(f"| {name} | {a:.2f} | {b:.2f} | {c:.2f} | {a / c:.2f}x | {b / c:.2f}x |")
    print(
        "\nWhere a fresh process's time goes (s): import, Translator.load, the first call's "
        "tracing, lowering and compiling (or reading the cache)\n"
    )
    print("| decoding | cache | import | load | trace | lower | compile or read | first call |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for beam, runs in results.items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        for key, cache in (("a", "empty"), ("b", "warm")):
            rows = runs[key]
            parts = [median([r[p] for r in rows]) for p in ("import", "load")]
            parts += [median([r["events"].get(e, 0.0) for r in rows]) for e in
                      ("trace", "lower", "compile or read")]  # fmt: skip
            parts.append(median([r["first"] for r in rows]))
            print(f"| {name} | {cache} | " + " | ".join(f"{p:.2f}" for p in parts) + " |")
    print("\nThe whole `evaluate.py --input` command, fresh (s)\n")
    print(
        "| decoding | no cache | warm cache | warm call (c) | no cache / (c) | warm cache / (c) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for beam, runs in results.items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        none = median([s for s, _ in runs["eval none"]])
        warm = median([s for s, _ in runs["eval warm"]])
        c = median([r["second"] for r in runs["a"] + runs["b"]])
        print(f"| {name} | {none:.2f} | {warm:.2f} | {c:.2f} | {none / c:.2f}x | {warm / c:.2f}x |")
    for beam, runs in results.items():
        digests = {r["digest"] for r in runs["a"] + runs["b"]}
        digests |= {d for _, d in runs["eval none"] + runs["eval warm"]}
        same = "the same translations" if len(digests) == 1 else "DIFFERENT translations"
        print(f"\nbeam {beam}: every process wrote {same} ({', '.join(sorted(digests))})")


def main() -> None:
    args = parse_args()
    if args.child:
        with open(args.child, encoding="utf-8") as f:
            print("RESULT " + json.dumps(child(json.load(f))))
        return
    if not args.workdir:
        sys.exit("give --workdir: a trained translation run (python train.py --config demo)")
    args.workdir = os.path.abspath(args.workdir)
    with tempfile.TemporaryDirectory(prefix="cold_start_") as scratch:
        print_tables(args, measure(args, scratch))


if __name__ == "__main__":
    main()
