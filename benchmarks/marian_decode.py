"""Decoding a Marian (opus-mt) model: jaxtrans against transformers' MarianMTModel.generate.

One random-weight Marian model of opus-mt's shape (6+6 layers, d_model 512, 8 heads,
d_ff 2048, vocabulary 32k, swish) is saved with ``save_pretrained`` and decoded two ways,
each in its own process, the processes alternating round by round:

    jaxtrans   jaxtrans.models.marian.from_huggingface, then the cached greedy / beam
               search (one jitted while_loop; compiled before the timing)
    torch      MarianMTModel.generate(num_beams=1 | 4, do_sample=False), eager PyTorch

Same sentences (--sentences rows of --source-length random ids, one batch), same length
penalty (Hugging Face's: scores / length ** 1.0). EOS is made unreachable in the saved
weights (its final_logits_bias is -1e4), so every row decodes exactly --length tokens in
both frameworks and sentences/s compare like for like. The table shows medians and the
share of output tokens (the best beam's for beam search) on which the two agree.

    python benchmarks/marian_decode.py                  # opus-mt shape, 16 sentences
    python benchmarks/marian_decode.py --beams 1        # greedy only (a shorter run)
    python benchmarks/marian_decode.py --quick          # a tiny model, seconds
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPUS_SHAPE = dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=32000)
TINY_SHAPE = dict(d_model=32, layers=1, heads=2, ffn=64, vocab=300)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=16, help="rows of the one batch")
    parser.add_argument("--source-length", type=int, default=32, help="source ids, EOS included")
    parser.add_argument("--length", type=int, default=64, help="tokens decoded per sentence")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny model, one round")
    parser.add_argument(
        "--beams", default="1,4", help="beam sizes to run, comma-separated (1: greedy)"
    )
    parser.add_argument("--child", choices=["jaxtrans", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def save_model(path: str, shape: dict) -> None:
    """A random-weight MarianMTModel of ``shape`` with EOS made unreachable."""
    import torch
    import transformers

    config = transformers.MarianConfig(
        vocab_size=shape["vocab"], d_model=shape["d_model"],
        encoder_layers=shape["layers"], decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"], decoder_ffn_dim=shape["ffn"],
        pad_token_id=shape["vocab"] - 1, eos_token_id=0,
        decoder_start_token_id=shape["vocab"] - 1, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 0] = -1e4  # EOS
    model.generation_config.bad_words_ids = [[shape["vocab"] - 1]]
    # Marian's default forces EOS at the last position; here, as in jaxtrans, it stays
    # unreachable, so the last tokens compare too.
    model.generation_config.forced_eos_token_id = None
    model.save_pretrained(path)


def sources(args, vocab: int):
    """Marian ids [sentences, source_length]: random content ids, then </s> (0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab - 1, size=(args.sentences, args.source_length))
    ids[:, -1] = 0
    return ids


def jaxtrans_child(args, vocab: int) -> dict:
    import jax.numpy as jnp
    import numpy as np

    from jaxtrans.inference.decoding import generate
    from jaxtrans.inference.options import SearchOptions
    from jaxtrans.models.marian.marian_from_huggingface import from_huggingface, marian_to_model_ids

    config, params = from_huggingface(args.model)
    to_model = marian_to_model_ids(vocab, vocab - 1, 0)
    source = jnp.asarray(to_model[sources(args, vocab)], jnp.int32)
    lengths = jnp.full((args.sentences,), args.length, jnp.int32)

    def run():
        options = SearchOptions(beam_size=args.beam, alpha=1.0, penalty_form="hf")
        tokens = generate(params, source, lengths, options, config=config, max_len=args.length)
        return np.asarray(tokens)

    timed = first_and_second_call(run)
    timed["tokens"] = np.argsort(to_model)[timed["tokens"]].tolist()  # back to Marian ids
    return timed


def first_and_second_call(run) -> dict:
    """The first call's time (compilation or warm-up), the second's, and the tokens."""
    start = time.perf_counter()
    tokens = run()
    first_call = time.perf_counter() - start
    start = time.perf_counter()
    run()
    return {"seconds": time.perf_counter() - start, "first_call": first_call, "tokens": tokens}


def torch_child(args, vocab: int) -> dict:
    import torch
    import transformers

    model = transformers.MarianMTModel.from_pretrained(args.model).eval()
    source = torch.from_numpy(sources(args, vocab))

    @torch.no_grad()
    def run():
        out = model.generate(
            input_ids=source, attention_mask=torch.ones_like(source), num_beams=args.beam,
            do_sample=False, max_new_tokens=args.length, min_new_tokens=args.length,
            length_penalty=1.0, early_stopping=False,
        )  # fmt: skip
        return out[:, 1:]  # without the start token

    timed = first_and_second_call(run)
    timed["tokens"] = timed["tokens"].tolist()
    return timed


def child(args, way: str, beam: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", way, "--beam", str(beam),
               "--model", args.model, "--sentences", str(args.sentences),
               "--source-length", str(args.source_length),
               "--length", str(args.length)]  # fmt: skip
    if args.quick:
        command.append("--quick")
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.split("RESULT ", 1)[1])


def main(argv=None) -> int:
    args = parse_args(argv)
    shape = TINY_SHAPE if args.quick else OPUS_SHAPE
    if args.quick:
        args.sentences, args.source_length, args.length, args.rounds = 4, 8, 6, 1
    if args.child:
        run = jaxtrans_child if args.child == "jaxtrans" else torch_child
        print("RESULT " + json.dumps(run(args, shape["vocab"])), flush=True)
        return 0
    args.model = os.path.join(tempfile.mkdtemp(prefix="marian-decode-"), "model")
    save_model(args.model, shape)
    beams = [int(beam) for beam in args.beams.split(",")]
    ways = [(way, beam) for beam in beams for way in ("jaxtrans", "torch")]
    times = {key: [] for key in ways}
    first = {}
    tokens = {}
    for round_ in range(args.rounds):
        for key in ways if round_ % 2 == 0 else list(reversed(ways)):
            result = child(args, *key)
            times[key].append(result["seconds"])
            first.setdefault(key, result["first_call"])
            tokens[key] = result["tokens"]
        print(f"  round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    agreement = {}
    for beam in beams:
        pairs = zip(tokens[("jaxtrans", beam)], tokens[("torch", beam)], strict=True)
        same = [a == b for row_a, row_b in pairs for a, b in zip(row_a, row_b, strict=True)]
        agreement[beam] = f"{100 * sum(same) / len(same):.1f}%"
    import torch  # noqa: PLC0415  (after the children: the parent stays light)

    print(
        f"Marian d_model {shape['d_model']}, {shape['heads']} heads, d_ff {shape['ffn']}, "
        f"{shape['layers']}+{shape['layers']} layers, vocab {shape['vocab']} (random weights); "
        f"{args.sentences} sentences of {args.source_length} source ids, {args.length} tokens "
        f"decoded each; {args.rounds} alternating rounds, each way in its own process; "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )
    print()
    print("| decoding | way | batch time, median (s) | first call (s) | sentences/s | "
          "jaxtrans / torch | tokens equal |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|")
    for beam in beams:
        name = "greedy" if beam == 1 else f"beam {beam}"
        torch_median = statistics.median(times[("torch", beam)])
        for way in ("jaxtrans", "torch"):
            median = statistics.median(times[(way, beam)])
            ratio = f"{torch_median / median:.2f}x" if way == "jaxtrans" else ""
            equal = agreement[beam] if way == "jaxtrans" else ""
            print(
                f"| {name} | {way} | {median:.3f} | {first[(way, beam)]:.1f} | "
                f"{args.sentences / median:,.1f} | {ratio} | {equal} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
