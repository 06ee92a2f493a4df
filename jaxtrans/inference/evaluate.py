"""The evaluate.py program: restore a trained workdir, then report BLEU, translate, or plot.

    python evaluate.py --workdir DIR [--split test|dev] [--checkpoint latest|STEP|avg:K]
    python evaluate.py --workdir DIR --input FILE|- [--output FILE]
    python evaluate.py --workdir DIR --plot_attention "a sentence" [--output attn.png]

DIR/config.json gives the model and data settings, DIR/tokenizer the SentencePiece
models, DIR/checkpoints the parameters; reports go to DIR/eval unless --outdir.
"""

import dataclasses
import os
import sys
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
from absl import flags

from jaxtrans import checkpoints, data
from jaxtrans.cli import fail, parse_flags, run
from jaxtrans.errors import UserError
from jaxtrans.inference.plots import plot_attention
from jaxtrans.inference.report import evaluate_translations
from jaxtrans.inference.translate import translate
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.workdir import load_run_config

USAGE = """usage: python evaluate.py --workdir DIR [--split test|dev]
                   [--checkpoint latest|STEP|avg:K] [--beam_size N] [--alpha A]
                   [--batch_size N] [--max_extra_length N]
                   [--input FILE|- [--output FILE]] [--plot_attention SENTENCE [--output PNG]]

Without --input or --plot_attention: translates the split, prints BLEU/chrF and examples,
and writes DIR/eval/{split}-step{N}.json, .md and .hyp.txt. Decoding settings default to
the run config's eval section."""

# Decoding settings used when neither the flags nor the run config give one.
DEFAULT_DECODING = {"beam_size": 4, "alpha": 0.6, "batch_size": 64, "max_extra_length": 50}


@dataclasses.dataclass(frozen=True)
class RestoredRun:
    """What a workdir holds, ready to decode with."""

    run_config: ml_collections.ConfigDict
    model_config: TransformerConfig
    tokenizer: data.Tokenizer
    params: Any
    step: int
    # "step N" or "average of steps [...]".
    checkpoint: str


def restore_run(workdir: str, checkpoint: str = "latest") -> RestoredRun:
    """Config, tokenizer and parameters (``latest``, a step, or ``avg:K``) of a workdir."""
    run_config = load_run_config(workdir)
    try:
        model_config = TransformerConfig.from_dict(run_config.model.to_dict())
    except (ValueError, TypeError) as error:
        raise UserError(f"{workdir}/config.json: model: {error}") from error
    tokenizer = data.load_tokenizer(workdir)
    tokenizer.check_vocab_size(model_config.vocab_size, model_config.output_vocab_size)
    ids = jnp.ones((1, 1), jnp.int32)
    model = Transformer(model_config)
    abstract = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(0), ids, ids))["params"])
    params, step, description = checkpoints.restore_params(workdir, abstract, checkpoint)
    return RestoredRun(run_config, model_config, tokenizer, params, step, description)


def decoding_settings(run_config: ml_collections.ConfigDict, **given: Any) -> dict[str, Any]:
    """beam_size, alpha, batch_size, max_extra_length: the given value (not None), else the
    run config's eval section, else DEFAULT_DECODING."""
    eval_config = run_config.get("eval") or {}
    settings = {}
    for name, default in DEFAULT_DECODING.items():
        value = given.get(name)
        settings[name] = value if value is not None else eval_config.get(name, default)
    return settings


def evaluate_workdir(
    workdir: str,
    *,
    split: str = "test",
    checkpoint: str = "latest",
    outdir: str | None = None,
    **decoding: Any,
) -> dict[str, Any]:
    """Translate the split, score it and write the report; returns the report.

    decoding: beam_size, alpha, batch_size, max_extra_length (None: from the run config).
    Averaged checkpoints (avg:K) write {split}-step{N}-avg{K}.* so that they do not
    overwrite the report of step N alone.
    """
    restored = restore_run(workdir, checkpoint)
    pairs = data.load_split(restored.run_config.data, split)
    kind, count = checkpoints.parse_checkpoint_spec(checkpoint)
    stem = f"{split}-step{restored.step}" + (f"-avg{count}" if kind == "avg" else "")
    return evaluate_translations(
        restored.model_config,
        restored.params,
        restored.tokenizer,
        pairs,
        outdir or os.path.join(workdir, "eval"),
        restored.step,
        split,
        restored.checkpoint,
        target_lang=restored.run_config.data.get("target_lang") or None,
        stem=stem,
        **decoding_settings(restored.run_config, **decoding),
    )


def translate_file(
    workdir: str,
    input_path: str,
    output_path: str | None = None,
    *,
    checkpoint: str = "latest",
    **decoding: Any,
) -> list[str]:
    """Translate one sentence per line of input_path ("-": stdin) to output_path (None:
    stdout); returns the translations."""
    if input_path == "-":
        sentences = sys.stdin.read().splitlines()
    else:
        try:
            with open(input_path, encoding="utf-8") as f:
                sentences = f.read().splitlines()
        except OSError as error:
            raise UserError(f"--input {input_path}: {error.strerror}; check the path") from error
    restored = restore_run(workdir, checkpoint)
    translations = translate(
        restored.model_config,
        restored.params,
        restored.tokenizer,
        sentences,
        **decoding_settings(restored.run_config, **decoding),
    )
    text = "".join(t + "\n" for t in translations)
    if output_path is None:
        sys.stdout.write(text)
    else:
        try:
            with open(output_path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as error:
            raise UserError(f"--output {output_path}: {error.strerror}") from error
    return translations


def plot_workdir_attention(
    workdir: str,
    sentence: str,
    output_png: str,
    *,
    checkpoint: str = "latest",
    **decoding: Any,
) -> str:
    """Cross-attention heatmaps of one sentence to output_png, its masks beside it
    (``*-masks.png``); returns the translation."""
    restored = restore_run(workdir, checkpoint)
    settings = decoding_settings(restored.run_config, **decoding)
    masks_png = os.path.splitext(output_png)[0] + "-masks.png"
    translation = plot_attention(
        restored.model_config,
        restored.params,
        restored.tokenizer,
        sentence,
        output_png,
        masks_png=masks_png,
        beam_size=settings["beam_size"],
        alpha=settings["alpha"],
        max_extra_length=settings["max_extra_length"],
    )
    print(f"{sentence}\n-> {translation}\nwrote {output_png} and {masks_png}")
    return translation


def check_writable(path: str, flag: str, *, is_file: bool = False) -> None:
    """UserError unless ``path`` (a directory, or a file when ``is_file``) can be written:
    its nearest existing ancestor must be a writable directory. Checked before decoding,
    so that a bad output path fails in a second, not after the whole test set."""
    if is_file and os.path.isdir(path):
        raise UserError(f"{flag} {path} is a directory; give a file name")
    existing = os.path.abspath(os.path.dirname(os.path.abspath(path)) if is_file else path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
        raise UserError(
            f"{flag} {path}: cannot write there ({existing} is not a writable directory); "
            "choose another path"
        )


def _define(values: flags.FlagValues) -> None:
    def string(name, default, help_):
        flags.DEFINE_string(name, default, help_, flag_values=values)

    string("workdir", None, "Run directory written by train.py.")
    string("split", "test", "Split to evaluate: test or dev.")
    string("checkpoint", "latest", "latest, a step number, or avg:K (mean of the last K).")
    string("input", None, "Translate this file, one sentence a line ('-': stdin).")
    string("output", None, "Where --input translations (default stdout) or the PNG go.")
    string("plot_attention", None, "Draw the cross-attention of this sentence as a PNG.")
    string("outdir", None, "Directory of the reports (default DIR/eval).")
    for name, help_ in (
        ("beam_size", "Beam size (1 = greedy)."),
        ("batch_size", "Sentences per decoding batch."),
        ("max_extra_length", "Longest output = source length + this."),
    ):
        flags.DEFINE_integer(name, None, help_ + " Default: the run config.", flag_values=values)
    flags.DEFINE_float(
        "alpha", None, "Length penalty exponent. Default: the run config.", flag_values=values
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if not values.workdir:
        fail("--workdir is required, e.g. --workdir runs/demo")
    if values.input is not None and values.plot_attention is not None:
        fail("give either --input or --plot_attention, not both")
    if values.output is not None and values.input is None and values.plot_attention is None:
        fail("--output goes with --input or --plot_attention")
    if values.split not in ("test", "dev"):
        fail(f"--split {values.split!r}: use test or dev")
    decoding = {
        name: values[name].value
        for name in ("beam_size", "alpha", "batch_size", "max_extra_length")
    }
    common = dict(checkpoint=values.checkpoint, **decoding)

    outdir = values.outdir or os.path.join(values.workdir, "eval")

    def evaluate() -> None:
        task = load_run_config(values.workdir).get("task", "translation")
        if task != "translation":
            evaluate_bert(task)
        elif values.input is not None:
            if values.output is not None:
                check_writable(values.output, "--output", is_file=True)
            translate_file(values.workdir, values.input, values.output, **common)
        elif values.plot_attention is not None:
            output = values.output or os.path.join(outdir, "attention.png")
            check_writable(output, "--output", is_file=True)
            os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
            plot_workdir_attention(values.workdir, values.plot_attention, output, **common)
        else:
            check_writable(outdir, "--outdir")
            evaluate_workdir(values.workdir, split=values.split, outdir=values.outdir, **common)

    def evaluate_bert(task: str) -> None:
        if values.input is not None or values.plot_attention is not None:
            raise UserError(
                f"{values.workdir} is a {task} workdir; --input and --plot_attention need a "
                "translation workdir"
            )
        # BERT runs are scored by their training task; only this command-line layer
        # reaches from inference into training, lazily.
        from jaxtrans.training.bert_evaluation import evaluate_bert_workdir

        default_split = "test" if task == "bert_classification" else "dev"
        split = values.split if values["split"].present else default_split
        evaluate_bert_workdir(
            values.workdir, split=split, checkpoint=values.checkpoint, outdir=values.outdir
        )

    run(evaluate)
