"""Cached decoding with the layers looped against scanned (model.scan_layers), same weights.

One random-weight model, its parameters per layer for the looped model and stacked
(jaxtrans.models.layer_stacks) for the scanned one, decodes the same sentences greedily
and with beam 4 (EOS unreachable, so every row decodes the full length); the four ways
run interleaved in rounds and the table shows medians. Both layouts must decode the same
tokens.

    python benchmarks/scan_layers_decode.py                 # small model, 64 x 64 tokens
    python benchmarks/scan_layers_decode.py --quick         # tiny model, seconds
"""

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import steps
from decode import NO_EOS

from jaxtrans.inference.decoding import beam_decode, greedy_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.models import Transformer
from jaxtrans.models.layer_stacks import arrange_layers


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small", help="a name in steps.SHAPES")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--length", type=int, default=64, help="tokens decoded per sentence")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny model, one round")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.quick:
        args.shapes, args.sentences, args.length, args.rounds = "tiny", 4, 6, 1
    shapes = steps.dataclasses.replace(
        steps.SHAPES[args.shapes], batch_size=args.sentences, source_length=32
    )
    source = jnp.asarray(steps.random_batch(shapes)["source"])
    lengths = jnp.full((args.sentences,), args.length, jnp.int32)
    looped = steps.jaxtrans_config(shapes, scan_layers=False)
    params = Transformer(looped).init(jax.random.key(0), source, source[:, :1])["params"]
    runners, first, outputs = {}, {}, {}
    for scan in (False, True):
        config = steps.jaxtrans_config(shapes, scan_layers=scan)
        p = arrange_layers(params, scan)
        common = dict(config=config, max_len=args.length, eos_id=NO_EOS)
        layers = "scanned" if scan else "looped"
        runners[f"greedy, layers {layers}"] = lambda p=p, c=common: np.asarray(
            greedy_decode(p, source, lengths, **c)
        )
        runners[f"beam 4, layers {layers}"] = lambda p=p, c=common: np.asarray(
            beam_decode(p, source, lengths, SearchOptions(beam_size=4), **c)[0]
        )
    for name, run in runners.items():
        start = time.perf_counter()
        outputs[name] = run()
        first[name] = time.perf_counter() - start
    for search in ("greedy", "beam 4"):
        if not np.array_equal(
            outputs[f"{search}, layers looped"], outputs[f"{search}, layers scanned"]
        ):
            print(f"error: {search} decodes different tokens with the layers scanned")
            return 1
    times = {name: [] for name in runners}
    for round_ in range(args.rounds):
        order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
        for name in order:
            start = time.perf_counter()
            runners[name]()
            times[name].append(time.perf_counter() - start)
    s = shapes
    print(
        f"model d_model {s.d_model}, {s.num_heads} heads, d_ff {s.d_ff}, {s.num_layers}+"
        f"{s.num_layers} layers, vocab {s.vocab_size}; {args.sentences} sentences of 32 source "
        f"tokens, {args.length} decoded each; {args.rounds} interleaved rounds; looped and "
        "scanned decode the same tokens"
    )
    print()
    print("| method | first call (s) | batch time, median (s) | scanned / looped |")
    print("|---|---:|---:|---:|")
    for name, measured in times.items():
        looped_name = name.replace("scanned", "looped")
        ratio = statistics.median(measured) / statistics.median(times[looped_name])
        print(
            f"| {name} | {first[name]:.1f} | {statistics.median(measured):.3f} | "
            f"{'' if name == looped_name else f'{ratio:.2f}x'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
