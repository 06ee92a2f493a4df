"""``python -m jaxtrans.export``: a trained workdir -> a Hugging Face model directory:
Marian for translation runs (jaxtrans.tasks.translation.translation_export), BERT for BERT runs
(jaxtrans.tasks.bert.bert_export); or, with ``--format ctranslate2``, a translation run as a
CTranslate2 model (jaxtrans.tasks.translation.ctranslate2_export)."""

import sys

from absl import flags

from jaxtrans.programs.cli import fail, parse_flags, run

USAGE = """usage: python -m jaxtrans.export --workdir DIR --output HF_DIR
                   [--checkpoint latest|best|STEP|avg:K] [--format huggingface|ctranslate2]

Writes HF_DIR (a new or empty directory; nothing is overwritten): config.json,
model.safetensors and the tokenizer files of the run in DIR, which transformers'
from_pretrained (and evaluate.py --init_from HF_DIR) load: a MarianMTModel with
MarianTokenizer files for a translation run, a BERT model with its head and tokenizer
for a BERT run. Settings the format cannot express (translation: Pre-LN, RoPE or
learned positions, a LayerNorm epsilon other than 1e-5; BERT: Pre-LN, RoPE or
sinusoidal positions) are refused. A learned decoder start is written as <pad>'s row,
which transformers reads; Marian itself starts from a zero vector (the export says so).

--format ctranslate2 (translation runs) writes a CTranslate2 model instead (model.bin,
config.json, vocabularies) with the run's SentencePiece models (source.spm, target.spm),
which ctranslate2.Translator loads; every model setting converts (docs/pretrained.md)."""

# --format values: the task's Hugging Face format, or CTranslate2 (translation runs).
FORMATS = ("huggingface", "ctranslate2")


def _define(values: flags.FlagValues) -> None:
    flags.DEFINE_string("workdir", None, "Run directory written by train.py.", flag_values=values)
    flags.DEFINE_string(
        "output", None, "The Hugging Face directory to write (new or empty).", flag_values=values
    )
    flags.DEFINE_string(
        "checkpoint",
        "latest",
        "latest, best (train.keep_best), a step number, or avg:K (mean of the last K).",
        flag_values=values,
    )
    flags.DEFINE_string(
        "format",
        "huggingface",
        "huggingface (Marian or BERT directory) or ctranslate2 (a translation run).",
        flag_values=values,
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if not values.workdir:
        fail("--workdir is required: the run to export, e.g. --workdir runs/demo")
    if not values.output:
        fail("--output is required: the new Hugging Face directory, e.g. --output exported/demo")
    if values.format not in FORMATS:
        fail(f"--format {values.format}: use {' or '.join(FORMATS)}")

    def export() -> None:
        from jaxtrans.tasks import export_workdir  # imports JAX; after flag checks

        export_workdir(values.workdir, values.output, values.checkpoint, values.format)

    run(export)


if __name__ == "__main__":
    main()
