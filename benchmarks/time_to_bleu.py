"""Time to BLEU: the test BLEU each way of training reaches within the same wall-clock budget.

(a) the seeds' way, in its own process: torch.nn.Transformer with the seeds' embedding,
    sinusoidal positions and tied output (steps.py), random batches of --seeds-batch pairs
    padded to the longest, Adam(0.9, 0.98, 1e-9) + Noam (warmup --seeds-warmup), label
    smoothing 0.1, clipping 1.0, eager PyTorch; then naive greedy decoding (the decoder
    re-run on the whole prefix at every step) of the dev and test sets.
(b) jaxtrans: ``train.py --config CONFIG`` with ``train.max_minutes`` set to the budget,
    then ``evaluate.py`` on dev and test, greedy and beam 4, as real processes.

The budget counts from each process's launch: imports, the SentencePiece tokenizer (the
same settings for both: jaxtrans's trainer), reading the data and compiling are included.
Decoding comes after the budget and is timed on its own. Both ways run one after the
other, never at the same time, with the same model shape (--shape, the seeds' 256/4/1024,
3 + 3 layers by default; ``--shape config`` keeps the jaxtrans config's own).

    python benchmarks/time_to_bleu.py --minutes 30                    # zh -> en gettext
    python benchmarks/time_to_bleu.py --minutes 30 --reverse          # en -> zh
    python benchmarks/time_to_bleu.py --minutes 30 --skip seeds --config configs/base.py \\
        --set optimizer.warmup_steps=1000 --set data.batch_size=48
    python benchmarks/time_to_bleu.py --minutes 30 --data demo        # the demo corpus
    python benchmarks/time_to_bleu.py --quick --data demo             # a smoke run

Skips (exit 0) when the data files are absent. The data is read in place, never copied.
"""

import time

LAUNCHED = time.monotonic()  # the seeds' budget counts from here, imports included

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
    parser.add_argument("--skip", choices=["seeds", "jaxtrans"], help="run one way only")
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
    parser.add_argument("--child", choices=["seeds"], help=argparse.SUPPRESS)
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


# ---------------------------------------------------------------- (a) the seeds' way


def seeds_child(args) -> dict:
    """Train eagerly until the budget is spent, then decode dev and test naively."""
    import numpy as np
    import steps
    import torch
    import torch.nn.functional as F
    from input_pipeline import padded_random_batches

    from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID
    from jaxtrans.data.translation.data_config import get_data_config
    from jaxtrans.data.translation.sources import read_split
    from jaxtrans.data.translation.sources import training_pairs as read_pairs
    from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
    from jaxtrans.inference.bleu import corpus_scores

    budget = args.minutes * 60
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # as many threads as CPUs given
    data_config = get_data_config()
    data_config.update_from_flattened_dict(
        {key.split(".", 1)[1]: value for key, value in shared_data_settings(args).items()}
    )
    workdir = os.path.join(args.outdir, "seeds")
    tokenizer = load_or_train_tokenizer(data_config, workdir)
    pairs = list(read_pairs(data_config))
    shape = steps.Shapes(
        **model_shape(args), vocab_size=tokenizer.source_vocab_size, batch_size=args.seeds_batch,
        source_length=args.max_length, target_length=args.max_length,
    )  # fmt: skip
    torch.manual_seed(0)
    model = steps.TorchTransformer(shape).train()
    adam = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup = args.seeds_warmup
    noam = lambda i: shape.d_model**-0.5 * min((i + 1) ** -0.5, (i + 1) * warmup**-1.5)
    schedule = torch.optim.lr_scheduler.LambdaLR(adam, noam)
    batches = padded_random_batches(
        pairs, tokenizer, args.seeds_batch, args.max_length, args.max_length
    )
    steps_done = tokens = 0
    loss = math.nan
    while time.monotonic() - LAUNCHED < budget:
        batch = next(batches)
        target_out = torch.from_numpy(batch["target_out"]).long()
        logits = model(torch.from_numpy(batch["source"]).long(),
                       torch.from_numpy(batch["target_in"]).long())  # fmt: skip
        loss_t = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target_out.reshape(-1),
            ignore_index=PAD_ID, label_smoothing=0.1,
        )  # fmt: skip
        adam.zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        adam.step()
        schedule.step()
        steps_done += 1
        tokens += int((target_out != PAD_ID).sum())
        loss = float(loss_t)
    trained_minutes = (time.monotonic() - LAUNCHED) / 60
    model.eval()

    @torch.no_grad()
    def naive_greedy(sentences: list[str], max_extra: int = 8 if args.quick else 50) -> list[str]:
        """Encode once, then re-run the decoder on the whole prefix for every token."""
        sources = [tokenizer.encode_source(s)[: args.max_length - 1] + [EOS_ID] for s in sentences]
        order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
        outputs: list[list[int]] = [[] for _ in sources]
        for start in range(0, len(order), 64):
            chunk = order[start : start + 64]
            length = max(len(sources[i]) for i in chunk)
            source = np.full((len(chunk), length), PAD_ID, np.int64)
            for row, i in enumerate(chunk):
                source[row, : len(sources[i])] = sources[i]
            source_t = torch.from_numpy(source)
            pad = source_t == PAD_ID
            memory = model.transformer.encoder(model.embed(source_t), src_key_padding_mask=pad)
            prefix = torch.full((len(chunk), 1), BOS_ID, dtype=torch.long)
            done = torch.zeros(len(chunk), dtype=torch.bool)
            for _ in range(length + max_extra):
                causal = torch.nn.Transformer.generate_square_subsequent_mask(prefix.shape[1])
                y = model.transformer.decoder(
                    model.embed(prefix), memory, tgt_mask=causal, tgt_is_causal=True,
                    memory_key_padding_mask=pad,
                )  # fmt: skip
                logits = F.linear(y[:, -1], model.embedding.weight)
                logits[:, PAD_ID] = -math.inf
                logits[:, BOS_ID] = -math.inf
                token = torch.where(done, PAD_ID, logits.argmax(-1))
                prefix = torch.cat([prefix, token[:, None]], dim=1)
                done |= token == EOS_ID
                if bool(done.all()):
                    break
            for row, i in enumerate(chunk):
                ids = []
                for t in prefix[row, 1:].tolist():
                    if t == EOS_ID:
                        break
                    if t != PAD_ID:
                        ids.append(t)
                outputs[i] = ids
        return [tokenizer.decode_target(ids) for ids in outputs]

    result = {"way": "seeds (eager PyTorch)", "steps": steps_done, "target_tokens": tokens,
              "train_minutes": trained_minutes, "final_loss": loss}  # fmt: skip
    decode_start = time.monotonic()
    target_lang = languages(args)[1 - int(args.reverse)]
    for split in args.splits.split(","):
        split_pairs = read_split(data_config, split).pairs
        hypotheses = naive_greedy([p.source for p in split_pairs])
        scores = corpus_scores(hypotheses, [p.target for p in split_pairs], target_lang)
        result[f"{split}_greedy_bleu"] = scores.bleu
        result[f"{split}_greedy_chrf"] = scores.chrf
    result["decode_seconds"] = time.monotonic() - decode_start
    return result


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
    if args.child == "seeds":
        print("RESULT " + json.dumps(seeds_child(args)), flush=True)
        return 0
    config = os.path.join(REPO, args.config)
    if args.skip != "jaxtrans" and not os.path.isfile(config):
        # Before the seeds' side spends its budget, not after.
        print(f"error: --config {args.config}: no such file; give a jaxtrans config, e.g. "
              "configs/demo.py", file=sys.stderr)  # fmt: skip
        return 2
    args.outdir = args.outdir or tempfile.mkdtemp(prefix="time_to_bleu-")
    os.makedirs(args.outdir, exist_ok=True)
    if args.data == "demo":
        write_demo_files(args)
    missing = [path for path in data_files(args).values() if not os.path.exists(path)]
    if missing:
        print(f"skipped: {missing[0]} not found")
        return 0
    print(f"workdirs and results in {args.outdir}", flush=True)
    results = []
    if args.skip != "seeds":
        child = [sys.executable, os.path.abspath(__file__), "--child", "seeds", *sys.argv[1:]]
        if "--outdir" not in sys.argv:
            child += ["--outdir", args.outdir]
        output = subprocess.run(child, check=True, stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(output.split("RESULT ", 1)[1]))
    if args.skip != "jaxtrans":
        results.append(run_jaxtrans(args))
    with open(os.path.join(args.outdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
