"""Translation speed: cached greedy and beam search against the naive re-run loop.

(a) naive greedy: the seeds' loop. Encode once, then at every step re-run the whole
    decoder on the prefix so far and append the argmax. Each prefix length is its own
    jit-compiled shape (compiled before the timing), so a step costs the prefix length.
(b) jaxtrans greedy: key/value cache, the whole search in one jitted while_loop.
(c) jaxtrans beam search, beam 4 (length penalty 0.6), same cache.

The model has random weights and EOS is made unreachable (the search is told an id no
row can produce), so every row of every method decodes exactly --length tokens: the
methods do the same number of steps and sentences/s compare like for like. Rounds run
interleaved; the table shows medians.

    python benchmarks/decode.py                    # steps.py "small" model
    python benchmarks/decode.py --shapes base --sentences 16
    python benchmarks/decode.py --quick            # a tiny model, seconds
    python benchmarks/decode.py --profile          # where a cached greedy batch spends its time
"""

import argparse
import collections
import glob
import gzip
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import steps

from jaxtrans.data.reserved_pieces import BOS_ID, PAD_ID
from jaxtrans.inference.decoding import beam_decode, greedy_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.models import Transformer

NO_EOS = -1  # an id the argmax never returns: every row runs to its length


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small", help="a name in steps.SHAPES")
    parser.add_argument("--sentences", type=int, default=64, help="sentences per batch")
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--length", type=int, default=64, help="tokens decoded per sentence")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny model, one round")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only trace one cached greedy batch (jax.profiler) and print its time by XLA op",
    )
    return parser.parse_args()


def naive_greedy(config, params, source: jnp.ndarray, length: int) -> Callable[[], np.ndarray]:
    """The re-run loop, compiled for every prefix length up front; returns its runner."""
    model = Transformer(config)
    encode = jax.jit(lambda p, s: model.apply({"params": p}, s, method=Transformer.encode))

    @jax.jit
    def next_token(p, memory, s, prefix):
        logits = model.apply({"params": p}, memory, s, prefix, method=Transformer.decode)
        # The searches never emit PAD or BOS (search._allowed_logits); nor does this loop.
        logits = logits[:, -1].at[:, PAD_ID].set(-jnp.inf).at[:, BOS_ID].set(-jnp.inf)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def run() -> np.ndarray:
        memory = encode(params, source)
        prefix = jnp.full((source.shape[0], 1), BOS_ID, jnp.int32)
        for _ in range(length):
            token = next_token(params, memory, source, prefix)
            prefix = jnp.concatenate([prefix, token[:, None]], axis=1)
        return np.asarray(prefix[:, 1:])

    run()  # compiles every prefix length
    return run


def profile_greedy(run: Callable[[], np.ndarray], compiled_text: str, top: int = 25) -> None:
    """Trace one call of run and print the XLA ops that took longest, with their shapes."""
    run()
    shapes = dict(re.findall(r"^\s*(?:ROOT )?%(\S+) = (\S+)", compiled_text, re.MULTILINE))
    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory):
            start = time.perf_counter()
            run()
            seconds = time.perf_counter() - start
        (path,) = glob.glob(f"{directory}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as trace:
            events = json.load(trace)["traceEvents"]
    total, calls = collections.Counter(), collections.Counter()
    for event in events:
        if event.get("ph") == "X" and event["name"] in shapes:
            total[event["name"]] += event["dur"] / 1000
            calls[event["name"]] += 1
    inside = sum(ms for name, ms in total.items() if not name.startswith("while"))
    print(f"traced batch: {seconds:.3f} s; XLA ops (the loop's own event aside): {inside:.1f} ms")
    print("| op | shape | calls | ms |")
    print("|---|---|---:|---:|")
    for name, ms in total.most_common(top):
        print(f"| {name} | {shapes[name]} | {calls[name]} | {ms:.1f} |")


def main() -> int:
    args = parse_args()
    if args.quick:
        args.shapes, args.sentences, args.source_length, args.length, args.rounds = (
            "tiny",
            4,
            8,
            6,
            1,
        )
    shapes = steps.SHAPES[args.shapes]
    config = steps.jaxtrans_config(shapes)
    source = jnp.asarray(
        steps.random_batch(
            steps.dataclasses.replace(
                shapes, batch_size=args.sentences, source_length=args.source_length
            )
        )["source"]
    )
    params = Transformer(config).init(jax.random.key(0), source, source[:, :1])["params"]
    lengths = jnp.full((args.sentences,), args.length, jnp.int32)
    common = dict(config=config, max_len=args.length, eos_id=NO_EOS)
    if args.profile:
        compiled = greedy_decode.lower(params, source, lengths, **common).compile()
        profile_greedy(
            lambda: np.asarray(greedy_decode(params, source, lengths, **common)),
            compiled.as_text(),
        )
        return 0

    runners = {
        "naive greedy (re-run the prefix)": naive_greedy(config, params, source, args.length),
        "jaxtrans greedy (cache)": lambda: np.asarray(
            greedy_decode(params, source, lengths, **common)
        ),
        "jaxtrans beam 4 (cache)": lambda: np.asarray(
            beam_decode(params, source, lengths, SearchOptions(beam_size=4), **common)[0]
        ),
    }
    outputs, times = {}, {name: [] for name in runners}
    for name, run in runners.items():
        outputs[name] = run()  # compilation
    naive, cached = outputs["naive greedy (re-run the prefix)"], outputs["jaxtrans greedy (cache)"]
    agree = float(np.mean(naive == cached))
    for round_ in range(args.rounds):
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for name in order:
            start = time.perf_counter()
            runners[name]()
            times[name].append(time.perf_counter() - start)
        print(f"  round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)

    s = shapes
    print(
        f"{jax.device_count()} {jax.default_backend()} device(s); model d_model {s.d_model}, "
        f"{s.num_heads} heads, d_ff {s.d_ff}, {s.num_layers}+{s.num_layers} layers, vocab "
        f"{s.vocab_size} (random weights); {args.sentences} sentences of {args.source_length} "
        f"source tokens, {args.length} tokens decoded each; {args.rounds} interleaved rounds; "
        f"cached greedy equals the naive loop on {100 * agree:.1f}% of tokens"
    )
    print()
    print("| method | batch time, median (s) | sentences/s | tokens/s | vs naive |")
    print("|---|---:|---:|---:|---:|")
    naive_time = statistics.median(times["naive greedy (re-run the prefix)"])
    for name, measured in times.items():
        median = statistics.median(measured)
        print(
            f"| {name} | {median:.3f} | {args.sentences / median:,.1f} | "
            f"{args.sentences * args.length / median:,.0f} | {naive_time / median:.1f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
