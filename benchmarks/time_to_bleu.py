"""Time to BLEU: the test BLEU each way of training reaches within the same wall-clock budget.

(a) ``seeds``, the seeds' way, in its own process: torch.nn.Transformer with the seeds'
    embedding, sinusoidal positions and tied output (steps.py), random batches of
    --seeds-batch pairs padded to the longest, Adam(0.9, 0.98, 1e-9) + Noam (warmup
    --seeds-warmup), label smoothing 0.1, clipping 1.0, dropout 0.1, Post-LN, eager
    PyTorch; then naive greedy decoding (the decoder re-run on the whole prefix at every
    step, torch_greedy.py) of the dev and test sets.
(b) ``jaxtrans``: ``train.py --config CONFIG`` with ``train.max_minutes`` set to the
    budget, then ``evaluate.py`` on dev and test, greedy and beam 4, as real processes.
(c) ``torch_recipe``, the same recipe in eager PyTorch, in its own process: the same
    model as (a) with CONFIG's norm (Pre-LN: ``norm_first=True``) and dropout, CONFIG's
    Adam, peak learning rate, warm-up steps, label smoothing and clipping, batches of
    about CONFIG's ``data.tokens_per_batch`` padded tokens bucketed by length as fairseq's
    ``--max-tokens`` makes them (token_buckets.py), and the linear decay to 0 at the
    budget's end taken in wall-clock time (the fraction of the time after the warm-up
    that is left), where jaxtrans fixes the step count from the measured step time; then
    greedy decoding with cached keys and values (torch_greedy.py).

The budget counts from each process's launch: imports, the SentencePiece tokenizer (the
same settings for all: jaxtrans's trainer), reading the data and compiling are included.
Decoding comes after the budget and is timed on its own. The ways of --ways run one after
the other, never at the same time, with the same model shape (--shape, the seeds'
256/4/1024, 3 + 3 layers by default; ``--shape config`` keeps the jaxtrans config's own,
for jaxtrans only). To run two side by side, one core each, start two of these with
different --ways and --cpus.

    python benchmarks/time_to_bleu.py --minutes 30                    # zh -> en gettext
    python benchmarks/time_to_bleu.py --minutes 30 --ways torch_recipe,jaxtrans
    python benchmarks/time_to_bleu.py --minutes 30 --reverse          # en -> zh
    python benchmarks/time_to_bleu.py --minutes 30 --skip seeds --config configs/base.py \\
        --set optimizer.warmup_steps=1000 --set data.batch_size=48
    python benchmarks/time_to_bleu.py --minutes 30 --data demo        # the demo corpus
    python benchmarks/time_to_bleu.py --quick --data demo --ways seeds,torch_recipe,jaxtrans

Skips (exit 0) when the data files are absent. The data is read in place, never copied.
"""

import time

LAUNCHED = time.monotonic()  # a PyTorch way's budget counts from here, imports included

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))
SPLITS = {"train": "zh-en_gettext.all.tsv", "dev": "zh-en_gettext.dev.tsv",
          "test": "zh-en_gettext.test.tsv"}  # fmt: skip
WAYS = ("seeds", "torch_recipe", "jaxtrans")
SEEDS_SHAPE = {"d_model": 256, "num_heads": 4, "d_ff": 1024, "num_layers": 3}
QUICK_SHAPE = {"d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 1}


def model_shape(args) -> dict[str, int]:
    return QUICK_SHAPE if args.quick else SEEDS_SHAPE


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget per way")
    parser.add_argument("--data", default=DATA, help="folder with the gettext TSV files")
    parser.add_argument("--reverse", action="store_true", help="en -> zh instead of zh -> en")
    parser.add_argument(
        "--config", default="configs/small_data.py",
        help="jaxtrans config, relative to the repository (the small-data recipe by default)",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="jaxtrans overrides"
    )
    parser.add_argument(
        "--shape", default="seeds", help="'seeds' (256/4/1024, 3+3) or 'config' (the config's)"
    )
    parser.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece pieces")
    parser.add_argument("--max-length", type=int, default=64, help="tokens, source and target")
    parser.add_argument("--seeds-batch", type=int, default=64, help="pairs per seeds step")
    parser.add_argument("--seeds-warmup", type=int, default=4000, help="Noam warmup steps")
    parser.add_argument(
        "--ways", default="seeds,jaxtrans",
        help=f"comma-separated, run in this order, of {', '.join(WAYS)}",
    )  # fmt: skip
    parser.add_argument("--skip", choices=WAYS, help="leave this way out of --ways")
    parser.add_argument(
        "--splits", default="dev,test",
        help="splits decoded after training: 'dev' alone while choosing settings",
    )  # fmt: skip
    parser.add_argument(
        "--cpus", default="",
        help="run on these CPUs only, e.g. '0' or '0,1' (both ways and their children)",
    )  # fmt: skip
    parser.add_argument("--outdir", default="", help="workdirs and results (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run")
    parser.add_argument("--child", choices=["seeds", "torch_recipe"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def data_files(args) -> dict[str, str]:
    """The train/dev/test TSV files: the gettext files in --data, or with ``--data demo``
    the built-in demo corpus written to OUTDIR/demo-*.tsv (smaller with --quick)."""
    if args.data != "demo":
        return {split: os.path.join(args.data, name) for split, name in SPLITS.items()}
    return {split: os.path.join(args.outdir, f"demo-{split}.tsv") for split in SPLITS}


def write_demo_files(args) -> None:
    from jaxtrans.data.translation.demo import demo_split

    sizes = {"train": 3000, "dev": 40, "test": 40} if args.quick else {
        "train": 20_000, "dev": 500, "test": 500}  # fmt: skip
    for split, path in data_files(args).items():
        pairs = demo_split(split, size=sizes[split], seed=1234,
                           held_out_sizes=(sizes["dev"], sizes["test"]))  # fmt: skip
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{p.source}\t{p.target}\n" for p in pairs)


def languages(args) -> tuple[str, str]:
    """(source, target) as stored, before --reverse."""
    return ("kl", "en") if args.data == "demo" else ("zh", "en")


def shared_data_settings(args) -> dict[str, object]:
    """The data fields both ways use (jaxtrans config keys)."""
    files = data_files(args)
    return {
        "data.train": files["train"],
        "data.dev": files["dev"],
        "data.test": files["test"],
        "data.source_lang": languages(args)[0],
        "data.target_lang": languages(args)[1],
        "data.reverse": bool(args.reverse),
        "data.vocab_size": args.vocab_size,
        "data.max_source_length": args.max_length,
        "data.max_target_length": args.max_length,
    }


# ---------------------------------------------------------------- (b) jaxtrans


def jaxtrans_overrides(args) -> list[str]:
    settings = dict(shared_data_settings(args))
    if args.shape == "seeds" or args.quick:
        shape = model_shape(args)
        settings.update({
            "model.d_model": shape["d_model"], "model.num_heads": shape["num_heads"],
            "model.d_ff": shape["d_ff"], "model.num_encoder_layers": shape["num_layers"],
            "model.num_decoder_layers": shape["num_layers"],
        })  # fmt: skip
    settings["train.max_minutes"] = args.minutes
    flags = [f"--config.{key}={value}" for key, value in settings.items()]
    return flags + [f"--config.{item}" for item in args.set]


def metrics_lines(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def tokens_seen(lines: list[dict]) -> int:
    """Target tokens trained on, from the logged windows (tokens/s over steps/s per step)."""
    total, previous = 0.0, 0
    for line in lines:
        if "tokens_per_sec" in line and line.get("steps_per_sec"):
            total += line["tokens_per_sec"] / line["steps_per_sec"] * (line["step"] - previous)
            previous = line["step"]
    return int(total)


def run_jaxtrans(args) -> dict:
    workdir = os.path.join(args.outdir, "jaxtrans")
    start = time.monotonic()
    command = [sys.executable, "train.py", "--config", args.config, "--workdir", workdir]
    subprocess.run(command + jaxtrans_overrides(args), cwd=REPO, check=True)
    train_minutes = (time.monotonic() - start) / 60
    lines = metrics_lines(workdir)
    steps = max(line["step"] for line in lines if "step" in line)
    train_losses = [line["loss"] for line in lines if "loss" in line and "split" not in line]
    way = ", ".join([os.path.basename(args.config), *args.set])
    result = {"way": f"jaxtrans ({way})", "steps": steps,
              "target_tokens": tokens_seen(lines), "train_minutes": train_minutes,
              "final_loss": train_losses[-1] if train_losses else math.nan}  # fmt: skip
    decode_start = time.monotonic()
    for split in args.splits.split(","):
        for name, beam in (("greedy", 1), ("beam4", 4)):
            subprocess.run(
                [sys.executable, "evaluate.py", "--workdir", workdir, "--split", split,
                 "--beam_size", str(beam)],
                cwd=REPO, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            (path,) = glob.glob(os.path.join(workdir, "eval", f"{split}-step{steps}-{name}.json"))
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
            result[f"{split}_{name}_bleu"] = report["bleu"]
            result[f"{split}_{name}_chrf"] = report["chrf"]
    result["decode_seconds"] = time.monotonic() - decode_start
    return result


# ---------------------------------------------------------------- the table


def run_child(way: str, args) -> dict:
    """A PyTorch way in a process of its own, launched now (its budget counts from here)."""
    child = [sys.executable, os.path.abspath(__file__), "--child", way, *sys.argv[1:]]
    if "--outdir" not in sys.argv:
        child += ["--outdir", args.outdir]
    output = subprocess.run(child, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(output.split("RESULT ", 1)[1])


def cell(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else f"{value:,}"


def table(results: list[dict], args) -> str:
    source, target = languages(args)[:: -1 if args.reverse else 1]
    direction = f"{source} -> {target}"
    head = [f"time to BLEU, {direction}, {args.minutes:g} minutes each, shape {args.shape}", "",
            "| way | steps | target tokens | min | dev BLEU greedy / beam4 "
            "| test BLEU greedy / beam4 | test chrF greedy | decode s |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        dev = f"{cell(r.get('dev_greedy_bleu'))} / {cell(r.get('dev_beam4_bleu'))}"
        test = f"{cell(r.get('test_greedy_bleu'))} / {cell(r.get('test_beam4_bleu'))}"
        head.append(
            f"| {r['way']} | {cell(r['steps'])} | {cell(r['target_tokens'])} | "
            f"{cell(r['train_minutes'])} | {dev} | {test} | {cell(r.get('test_greedy_chrf'))} | "
            f"{cell(r['decode_seconds'], 0)} |"
        )
    return "\n".join(head)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.minutes, args.vocab_size, args.max_length = 0.25, 400, 32
        args.seeds_warmup = 100
        args.set = [*args.set, "optimizer.warmup_steps=100", "train.eval_every=0"]
    if args.cpus:
        cpus = {int(cpu) for cpu in args.cpus.split(",")}
        os.sched_setaffinity(0, cpus)  # inherited by every child process
    if set(args.splits.split(",")) - {"dev", "test"}:
        print(f"error: --splits {args.splits}: use dev, test or dev,test", file=sys.stderr)
        return 2
    ways = [way for way in args.ways.split(",") if way and way != args.skip]
    if set(ways) - set(WAYS):
        print(f"error: --ways {args.ways}: choose from {', '.join(WAYS)}", file=sys.stderr)
        return 2
    if args.child:
        import time_to_bleu_torch

        way = time_to_bleu_torch.Way(
            launched=LAUNCHED, data_settings=shared_data_settings(args),
            shape=model_shape(args), target_lang=languages(args)[1 - int(args.reverse)],
            config=os.path.join(REPO, args.config),
        )  # fmt: skip
        print("RESULT " + json.dumps(time_to_bleu_torch.CHILDREN[args.child](args, way)),
              flush=True)  # fmt: skip
        return 0
    config = os.path.join(REPO, args.config)
    if {"jaxtrans", "torch_recipe"} & set(ways) and not os.path.isfile(config):
        # Before any way spends its budget, not after.
        print(f"error: --config {args.config}: no such file; give a jaxtrans config, e.g. "
              "configs/demo.py", file=sys.stderr)  # fmt: skip
        return 2
    args.outdir = args.outdir or tempfile.mkdtemp(prefix="time_to_bleu-")
    used = [way for way in ways if os.path.exists(os.path.join(args.outdir, way))]
    if used and not args.child:
        # A jaxtrans workdir there would be resumed: its budget would start part spent.
        print(f"error: --outdir {args.outdir} already holds a {used[0]} run; give a new "
              "--outdir", file=sys.stderr)  # fmt: skip
        return 2
    os.makedirs(args.outdir, exist_ok=True)
    if args.data == "demo":
        write_demo_files(args)
    missing = [path for path in data_files(args).values() if not os.path.exists(path)]
    if missing:
        print(f"skipped: {missing[0]} not found")
        return 0
    print(f"workdirs and results in {args.outdir}", flush=True)
    results = []
    for way in ways:
        results.append(run_jaxtrans(args) if way == "jaxtrans" else run_child(way, args))
    with open(os.path.join(args.outdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
