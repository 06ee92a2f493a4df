"""Decoding at the Marian (opus-mt) shape: jaxtrans against CTranslate2, float32 and int8.

The random-weight MarianMTModel of benchmarks/marian_decode.py (6+6 layers, d_model 512,
8 heads, d_ff 2048, vocabulary 32k, swish, EOS unreachable) is saved with
``save_pretrained``, converted by CTranslate2's own converter
(``ctranslate2.converters.TransformersConverter``, as ct2-transformers-converter does;
token names made up, since the model has no tokenizer files) and decoded several ways,
each in a fresh process of its own, the processes alternating round by round:

    jaxtrans             models.marian.from_huggingface, then the cached greedy / beam
                         search (decoding.generate, one jitted while_loop), as
                         marian_decode.py decodes it
    ctranslate2 float32  ctranslate2.Translator(compute_type="float32").translate_batch
                         with jaxtrans's search (ctranslate2_decoding.search_options)
    ctranslate2 int8     the same directory, quantized when it is loaded

Same sentences (marian_decode.py's: --sentences rows of --source-length random ids, one
batch), same length penalty (len ** 1.0, penalty_form "hf"), every row decoding exactly
--length tokens (EOS is unreachable). Every process is pinned to the same --cores cores:
XLA sizes its thread pool by the affinity mask, CTranslate2 gets intra_threads = --cores.
"cold" is a fresh process's first call (compilation for jaxtrans; model loading is not
counted either way), "warm" the next --warm_calls. The table gives medians over the rounds
(of every warm call of every process) and how many sentences (and tokens) equal jaxtrans's.

    python benchmarks/ctranslate2_marian_decode.py              # 3 rounds, greedy and beam 4
    python benchmarks/ctranslate2_marian_decode.py --quick      # a tiny model, one round
    python benchmarks/ctranslate2_marian_decode.py --profile    # jaxtrans's warm call by op kind
"""

import argparse
import collections
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import marian_decode
from ctranslate2_decode import timed_calls, use_cores

# way: CTranslate2's compute type (None: jaxtrans).
WAYS = {"jaxtrans": None, "ctranslate2 float32": "float32", "ctranslate2 int8": "int8"}
ALPHA = 1.0  # marian_decode.py's length penalty, len ** 1.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=16, help="rows of the one batch")
    parser.add_argument("--source-length", type=int, default=32, help="source ids, EOS included")
    parser.add_argument("--length", type=int, default=64, help="tokens decoded per sentence")
    parser.add_argument("--beams", default="1,4", help="beam sizes, comma-separated (1: greedy)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm_calls", type=int, default=3, help="warm calls a process")
    parser.add_argument("--cores", type=int, default=1, help="cores every process is pinned to")
    parser.add_argument("--quick", action="store_true", help="a tiny model, one round")
    parser.add_argument("--profile", action="store_true", help="trace jaxtrans's warm call")
    parser.add_argument("--child", choices=sorted(WAYS), help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def token_names(vocab: int) -> list[str]:
    """A made-up piece per Marian id: </s> at 0, <unk> at 1, <pad> last (marian_decode)."""
    names = [f"t{i}" for i in range(vocab)]
    names[0], names[1], names[-1] = "</s>", "<unk>", "<pad>"
    return names


class _Vocabulary:
    """What CTranslate2's Marian loader reads of a tokenizer."""

    eos_token, unk_token = "</s>", "<unk>"

    def __init__(self, names: list[str]):
        self.names = names

    def get_vocab(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}


def convert(model: str, output: str, vocab: int) -> None:
    """The Marian directory ``model`` -> a float32 CTranslate2 directory, by CTranslate2."""
    import ctranslate2

    class Converter(ctranslate2.converters.TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return _Vocabulary(token_names(vocab))

    Converter(model).convert(output)


def jaxtrans_run(args, vocab: int):
    """marian_decode.py's decoding, a function of no arguments -> Marian ids [rows, length]."""
    import jax.numpy as jnp
    import numpy as np

    from jaxtrans.inference.decoding import generate
    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.models.marian.marian_from_huggingface import from_huggingface, marian_to_model_ids

    config, params = from_huggingface(args.model)
    to_model = marian_to_model_ids(vocab, vocab - 1, 0)
    source = jnp.asarray(to_model[marian_decode.sources(args, vocab)], jnp.int32)
    lengths = jnp.full((args.sentences,), args.length, jnp.int32)
    to_marian = np.argsort(to_model)

    def run():
        options = SearchOptions(beam_size=args.beam, alpha=ALPHA, penalty_form="hf")
        tokens = generate(params, source, lengths, options, config=config, max_len=args.length)
        return to_marian[np.asarray(tokens)].tolist()

    return run


def ctranslate2_run(args, vocab: int, compute_type: str, threads: int):
    import ctranslate2

    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.tasks.translation.ctranslate2_decoding import search_options

    names = token_names(vocab)
    ids = {name: i for i, name in enumerate(names)}
    sources = [[names[i] for i in row] for row in marian_decode.sources(args, vocab)]
    translator = ctranslate2.Translator(
        os.path.join(os.path.dirname(args.model), "ct2"), device="cpu",
        compute_type=compute_type, intra_threads=threads,
    )  # fmt: skip
    options = search_options(
        SearchOptions(beam_size=args.beam, alpha=ALPHA, penalty_form="hf"), max_length=args.length
    )

    def run():
        results = translator.translate_batch(sources, max_batch_size=len(sources), **options)
        return [[ids[piece] for piece in r.hypotheses[0]] for r in results]

    return run


def child(args) -> dict:
    threads = use_cores(args.cores)
    vocab = marian_decode.TINY_SHAPE["vocab"] if args.quick else marian_decode.OPUS_SHAPE["vocab"]
    compute_type = WAYS[args.child]
    if compute_type is None:
        return timed_calls(jaxtrans_run(args, vocab), args.warm_calls)
    return timed_calls(ctranslate2_run(args, vocab, compute_type, threads), args.warm_calls)


def run_child(args, way: str, beam: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", way, "--beam", str(beam),
               "--model", args.model, "--sentences", str(args.sentences),
               "--source-length", str(args.source_length), "--length", str(args.length),
               "--cores", str(args.cores), "--warm_calls", str(args.warm_calls),
               ] + (["--quick"] if args.quick else [])  # fmt: skip
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.split("RESULT ", 1)[1])


# Op kinds of the profile, by the HLO instruction (fusions by what they compute).
KINDS = (
    ("attention products (batched dot)", r"lhs_batch_dims=\{\d"),
    ("matrix products (dot)", r"\bdot\(|custom-call.*matmul|__onednn\$matmul"),
    ("top-k / sort", r"\bsort\(|TopK|topk"),
    ("gather / dynamic-slice", r"\bgather\(|dynamic-slice\("),
    ("scatter / dynamic-update-slice", r"\bscatter\(|dynamic-update-slice\("),
    ("reduce (softmax, norms, argmax)", r"\breduce\("),
    ("copy / transpose", r"\bcopy\(|transpose\("),
)


def op_kinds(hlo_text: str) -> dict[str, tuple[str, str]]:
    """{instruction name: (kind, result shape)} of a compiled HLO module, a fusion by the
    first kind found among the instructions of its fused computation."""
    bodies = dict(re.findall(r"^%?(\S+) [^\n]*\{\n(.*?)^\}", hlo_text, re.MULTILINE | re.DOTALL))
    kinds = {}
    for name, line in re.findall(r"^\s*(?:ROOT )?%?(\S+) = (.*)$", hlo_text, re.MULTILINE):
        called = re.search(r"calls=%?([\w.\-]+)", line)
        text = line + (bodies.get(called.group(1), "") if called else "")
        kind = next((k for k, pattern in KINDS if re.search(pattern, text)), "other")
        kinds[name] = (kind, line.split(" ", 1)[0])
    return kinds


def profile(args) -> None:
    """Trace jaxtrans's warm call at each beam size and print its time by op kind."""
    import jax
    import jax.numpy as jnp

    from jaxtrans.inference.decoding import beam_decode, greedy_decode
    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.models.marian.marian_from_huggingface import from_huggingface

    args.model = os.path.join(tempfile.mkdtemp(prefix="ct2-marian-profile-"), "model")
    shape = marian_decode.TINY_SHAPE if args.quick else marian_decode.OPUS_SHAPE
    marian_decode.save_model(args.model, shape)
    threads = use_cores(args.cores)
    for beam in [int(b) for b in args.beams.split(",")]:
        args.beam = beam
        run = jaxtrans_run(args, shape["vocab"])
        run()  # compiled
        run()  # warm
        config, params = from_huggingface(args.model)
        source = jnp.zeros((args.sentences, args.source_length), jnp.int32)
        lengths = jnp.full((args.sentences,), args.length, jnp.int32)
        common = dict(config=config, max_len=args.length)
        options = SearchOptions(beam_size=beam, alpha=ALPHA, penalty_form="hf")
        decode = greedy_decode if beam == 1 else beam_decode
        lowered = decode.lower(params, source, lengths, options, **common)
        kinds = op_kinds(lowered.compile().as_text())
        with tempfile.TemporaryDirectory() as directory:
            with jax.profiler.trace(directory):
                start = time.perf_counter()
                run()
                seconds = time.perf_counter() - start
            path = next(os.path.join(d, f) for d, _, fs in os.walk(directory) for f in fs
                        if f.endswith(".trace.json.gz"))  # fmt: skip
            with gzip.open(path) as trace:
                events = json.load(trace)["traceEvents"]
        by_kind, by_op = collections.Counter(), collections.Counter()
        for event in events:
            name = event.get("name", "")
            if event.get("ph") == "X" and name in kinds and not name.startswith("while"):
                by_kind[kinds[name][0]] += event["dur"] / 1000
                by_op[name] += event["dur"] / 1000
        total = sum(by_kind.values())
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"{name}: traced warm call {seconds:.3f} s on {threads} core(s); "
              f"XLA ops {total:.0f} ms")  # fmt: skip
        print("| op kind | ms | share |")
        print("|---|---:|---:|")
        for kind, ms in by_kind.most_common():
            print(f"| {kind} | {ms:.1f} | {100 * ms / total:.0f}% |")
        print("| largest ops | kind | shape | ms |")
        print("|---|---|---|---:|")
        for op, ms in by_op.most_common(12):
            print(f"| {op} | {kinds[op][0]} | {kinds[op][1]} | {ms:.1f} |")
        print()


def print_table(args, results: dict, beams: list, load: str) -> None:
    import ctranslate2

    shape = marian_decode.TINY_SHAPE if args.quick else marian_decode.OPUS_SHAPE
    print(
        f"Marian d_model {shape['d_model']}, {shape['heads']} heads, d_ff {shape['ffn']}, "
        f"{shape['layers']}+{shape['layers']} layers, vocab {shape['vocab']} (random weights); "
        f"{args.sentences} sentences of {args.source_length} source ids, {args.length} tokens "
        f"each; {args.rounds} alternating rounds, a process each, {args.cores} core(s) each "
        f"(CTranslate2 {ctranslate2.__version__}, intra_threads={args.cores}); {os.cpu_count()} "
        f"CPUs, load average {load} at the start, "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end"
    )
    print()
    print(
        "| decoding | way | cold: first call (s) | warm: median (s) | sentences/s (warm) | "
        "speed-up, warm | speed-up, cold | sentences equal to jaxtrans | tokens equal |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for beam in beams:
        name = "greedy" if beam == 1 else f"beam {beam}"
        ours = results[("jaxtrans", beam)]
        base_warm, base_cold = statistics.median(ours["warm"]), statistics.median(ours["cold"])
        for way in WAYS:
            result = results[(way, beam)]
            warm, cold = statistics.median(result["warm"]), statistics.median(result["cold"])
            pairs = list(zip(result["output"], ours["output"], strict=True))
            same = sum(a == b for a, b in pairs)
            tokens = [x == y for a, b in pairs for x, y in zip(a, b, strict=True)]
            print(
                f"| {name} | {way} | {cold:.2f} | {warm:.3f} | {args.sentences / warm:,.1f} | "
                f"{base_warm / warm:.2f}x | {base_cold / cold:.2f}x | {same} / {len(pairs)} | "
                f"{100 * sum(tokens) / len(tokens):.1f}% |"
            )


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.sentences, args.source_length, args.length, args.rounds = 4, 8, 6, 1
    if args.child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return 0
    if args.profile:
        profile(args)
        return 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    shape = marian_decode.TINY_SHAPE if args.quick else marian_decode.OPUS_SHAPE
    scratch = tempfile.mkdtemp(prefix="ct2-marian-decode-")
    args.model = os.path.join(scratch, "model")
    marian_decode.save_model(args.model, shape)
    convert(args.model, os.path.join(scratch, "ct2"), shape["vocab"])
    beams = [int(beam) for beam in args.beams.split(",")]
    keys = [(way, beam) for beam in beams for way in WAYS]
    results = {key: {"cold": [], "warm": []} for key in keys}
    for round_ in range(args.rounds):
        for key in keys if round_ % 2 == 0 else list(reversed(keys)):
            result = run_child(args, *key)
            results[key]["cold"].append(result["cold"])
            results[key]["warm"].extend(result["warm"])
            results[key]["output"] = result["output"]
        print(f"  round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    print_table(args, results, beams, load)
    return 0


if __name__ == "__main__":
    sys.exit(main())
