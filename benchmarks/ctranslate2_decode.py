"""Decoding a trained translation run: jaxtrans against CTranslate2, float32 and int8.

The run's latest checkpoint is exported with ``python -m jaxtrans.export --format
ctranslate2`` and decoded several ways, each in a fresh process of its own, the processes
alternating round by round:

    jaxtrans             jaxtrans.Translator's cached greedy / beam search, batches of the
                         run's eval.batch_size; "cold" is a fresh process's first call
                         (compilation included), "warm" the next --warm_calls
    ctranslate2 float32  ctranslate2.Translator(compute_type="float32"): translate_batch
                         with jaxtrans's search settings (ctranslate2_decoding.translate_tokens:
                         sentences of one length limit together, beam search to the limit)
    ctranslate2 int8     the same directory, quantized when it is loaded
    ..., patience 1      (beam search) CTranslate2's own stopping, after K finished
                         hypotheses: faster, and not always jaxtrans's best

Same model, sentences (the run's test split: the demo's 500) and settings: the length
penalty len ** alpha with the run's alpha (penalty_form "hf", which both have), outputs of
at most source + eval.max_extra_length tokens. The table gives medians over the rounds (of
every warm call of every process), sentences/s of the warm call and its ratio to
jaxtrans's, how many translations equal jaxtrans's token for token, and sacreBLEU against
the references. Every process is pinned to the same --cores cores (1 by default): XLA sizes
its thread pool by the affinity mask, CTranslate2 gets intra_threads = --cores.

    python benchmarks/ctranslate2_decode.py --workdir runs/demo
    python benchmarks/ctranslate2_decode.py --quick      # a tiny run trained here, one round
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (way, compute type, patience): patience None is jaxtrans's exact search.
WAYS = {
    "jaxtrans": ("jaxtrans", None, None),
    "ctranslate2 float32": ("ctranslate2", "float32", None),
    "ctranslate2 int8": ("ctranslate2", "int8", None),
    "ctranslate2 float32, patience 1": ("ctranslate2", "float32", 1.0),
    "ctranslate2 int8, patience 1": ("ctranslate2", "int8", 1.0),
}
# configs/demo.py shrunk to seconds of training, for --quick.
QUICK_TRAINING = {
    "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
    "model.num_encoder_layers": 1, "model.num_decoder_layers": 1,
    "data.demo_train_size": 1500, "data.demo_dev_size": 20, "data.demo_test_size": 20,
    "data.vocab_size": 300, "data.batch_size": 8, "train.num_steps": 10,
    "train.checkpoint_every": 10, "train.eval_every": 0, "train.log_every": 5,
}  # fmt: skip


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a trained translation run (train.py --config demo)")
    parser.add_argument("--split", default="test", help="the run's split to translate")
    parser.add_argument("--beams", default="1,4", help="beam sizes, comma-separated (1: greedy)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm_calls", type=int, default=3, help="warm calls a process")
    # One by default: every way on the same single core, as a serving process a core runs.
    parser.add_argument("--cores", type=int, default=1, help="cores every process is pinned to")
    parser.add_argument("--quick", action="store_true", help="a tiny run, one round")
    parser.add_argument("--child", choices=sorted(WAYS), help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--job", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def timed_calls(run, warm_calls: int) -> dict:
    """The first call's seconds (cold), each of the next ``warm_calls`` calls' (warm), and
    the last call's output (also ctranslate2_marian_decode.py's). One warm call a process
    is noisy on a shared machine: each process gives several, and the table their median."""
    start = time.perf_counter()
    run()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(warm_calls):
        start = time.perf_counter()
        output = run()
        warm.append(time.perf_counter() - start)
    return {"cold": cold, "warm": warm, "output": output}


def jaxtrans_child(job: dict, beam: int) -> dict:
    import jaxtrans
    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.inference.translate import translate_ids
    from jaxtrans.vocab import EOS_ID

    translator = jaxtrans.Translator.load(job["workdir"])
    task = translator.task
    target = task.tokenizer.sentencepiece_model("target")
    ids = [[*task.tokenizer.encode_source(s), EOS_ID] for s in job["sentences"]]

    def run():
        options = SearchOptions(
            beam_size=beam, alpha=job["alpha"], max_extra_length=job["max_extra_length"],
            batch_size=job["batch_size"], penalty_form="hf",
        )  # fmt: skip
        hypotheses = translate_ids(task.model_config, translator.params, ids, options)
        return [[target.id_to_piece(i) for i in h] for h in hypotheses]

    return timed_calls(run, job["warm_calls"])


def ctranslate2_child(job: dict, beam: int, compute_type: str, patience) -> dict:
    import ctranslate2
    import sentencepiece as spm

    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.tasks.translation.ctranslate2_decoding import translate_tokens

    directory = job["directory"]
    cutter = spm.SentencePieceProcessor(model_file=os.path.join(directory, "source.spm"))
    start = time.perf_counter()
    translator = ctranslate2.Translator(
        directory, device="cpu", compute_type=compute_type, intra_threads=job["cores"]
    )
    loaded = time.perf_counter() - start

    def run():
        sources = [cutter.encode(s, out_type=str) for s in job["sentences"]]
        options = SearchOptions(
            beam_size=beam, alpha=job["alpha"], max_extra_length=job["max_extra_length"],
            batch_size=job["batch_size"], penalty_form="hf",
        )  # fmt: skip
        return translate_tokens(translator, sources, options, patience=patience)

    return {**timed_calls(run, job["warm_calls"]), "load": loaded}


def use_cores(count: int) -> int:
    """Pin this process to its first ``count`` cores; the number it now has."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores[: max(count, 1)])
    return len(os.sched_getaffinity(0))


def child(args) -> dict:
    with open(args.job, encoding="utf-8") as f:
        job = json.load(f)
    kind, compute_type, patience = WAYS[args.child]
    use_cores(job["cores"])  # before jax starts its thread pool
    if kind == "jaxtrans":
        return jaxtrans_child(job, args.beam)
    return ctranslate2_child(job, args.beam, compute_type, patience)


def run_child(args, way: str, beam: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", way, "--beam", str(beam),
               "--job", args.job]  # fmt: skip
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, cwd=REPO)
    return json.loads(out.stdout.split("RESULT ", 1)[1])


def quick_run(scratch: str) -> str:
    """A tiny demo run trained in ``scratch`` (--quick)."""
    workdir = os.path.join(scratch, "run")
    overrides = [f"--config.{key}={value}" for key, value in QUICK_TRAINING.items()]
    command = [sys.executable, "train.py", "--config", "demo", "--workdir", workdir, *overrides]
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return workdir


def write_job(args, scratch: str) -> dict:
    """Export the run, read its split and decoding settings; the job file the children read."""
    from jaxtrans.config_sections import section_values
    from jaxtrans.data.translation.sources import read_split
    from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig
    from jaxtrans.workdirs.workdir import load_run_config

    directory = os.path.join(scratch, "ct2")
    export = [sys.executable, "-m", "jaxtrans.export", "--workdir", args.workdir,
              "--output", directory, "--format", "ctranslate2"]  # fmt: skip
    subprocess.run(export, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    config = load_run_config(args.workdir)
    pairs = read_split(config.data, args.split).pairs
    decoding = section_values(TranslationEvalConfig, config.get("eval"))
    job = {
        "workdir": args.workdir, "directory": directory, "cores": args.cores,
        "warm_calls": args.warm_calls,
        "sentences": [p.source for p in pairs], "references": [p.target for p in pairs],
        "alpha": float(decoding.alpha), "max_extra_length": int(decoding.max_extra_length),
        "batch_size": int(decoding.batch_size), "target_lang": config.data.get("target_lang", ""),
    }  # fmt: skip
    args.job = os.path.join(scratch, "job.json")
    with open(args.job, "w", encoding="utf-8") as f:
        json.dump(job, f)
    return job


def measure(args, keys: list) -> dict:
    """{(way, beam): {"cold": [...], "warm": [...], "output": ...}} over the rounds."""
    results = {key: {"cold": [], "warm": []} for key in keys}
    for round_ in range(args.rounds):
        for key in keys if round_ % 2 == 0 else list(reversed(keys)):
            result = run_child(args, *key)
            results[key]["cold"].append(result["cold"])
            results[key]["warm"].extend(result["warm"])
            results[key]["output"] = result["output"]
        print(f"  round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    return results


def print_table(job: dict, results: dict, beams: list) -> None:
    import ctranslate2
    import sentencepiece as spm

    from jaxtrans.inference.bleu import corpus_scores

    joiner = spm.SentencePieceProcessor(model_file=os.path.join(job["directory"], "target.spm"))
    count = len(job["sentences"])
    print("| decoding | way | cold: first call (s) | warm: median (s) | sentences/s (warm) | "
          "speed-up, warm | speed-up, cold | equal to jaxtrans | BLEU |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for beam in beams:
        name = "greedy" if beam == 1 else f"beam {beam}"
        ours = results[("jaxtrans", beam)]
        base_warm, base_cold = statistics.median(ours["warm"]), statistics.median(ours["cold"])
        for way in WAYS:
            if (way, beam) not in results:
                continue
            result = results[(way, beam)]
            warm, cold = statistics.median(result["warm"]), statistics.median(result["cold"])
            same = sum(a == b for a, b in zip(result["output"], ours["output"], strict=True))
            texts = [joiner.decode([joiner.piece_to_id(p) for p in h]) for h in result["output"]]
            bleu = corpus_scores(texts, job["references"], job["target_lang"]).bleu
            print(
                f"| {name} | {way} | {cold:.2f} | {warm:.3f} | {count / warm:,.0f} | "
                f"{base_warm / warm:.2f}x | {base_cold / cold:.2f}x | {same} / {count} | "
                f"{bleu:.2f} |"
            )
    print()
    print(f"ctranslate2 {ctranslate2.__version__}, every process on {job['cores']} core(s) "
          f"(CTranslate2 intra_threads={job['cores']}); load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    scratch = tempfile.mkdtemp(prefix="ctranslate2-decode-")
    if args.quick:
        args.workdir, args.rounds = quick_run(scratch), 1
    if not args.workdir:
        print("error: --workdir is required (or --quick)", file=sys.stderr)
        return 2
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    job = write_job(args, scratch)
    beams = [int(beam) for beam in args.beams.split(",")]
    keys = [
        (way, beam)
        for beam in beams
        for way, (_, _, patience) in WAYS.items()
        if patience is None or beam > 1
    ]
    results = measure(args, keys)
    print(
        f"{args.workdir}: {len(job['sentences'])} {args.split} sentences, alpha "
        f"{job['alpha']} (len ** alpha), at most source + {job['max_extra_length']} tokens, "
        f"batches of {job['batch_size']}; {args.rounds} alternating rounds, a process each; "
        f"{os.cpu_count()} CPUs, load average {load} at the start"
    )
    print()
    print_table(job, results, beams)
    return 0


if __name__ == "__main__":
    sys.exit(main())
