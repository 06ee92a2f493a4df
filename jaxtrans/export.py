"""``python -m jaxtrans.export``: a trained workdir -> a Hugging Face model directory:
Marian for translation runs (jaxtrans.tasks.translation.translation_export), BERT for BERT runs
(jaxtrans.tasks.bert.bert_export)."""

import sys

from absl import flags

from jaxtrans.programs.cli import fail, parse_flags, run

USAGE = """usage: python -m jaxtrans.export --workdir DIR --output HF_DIR
                   [--checkpoint latest|STEP|avg:K]

Writes HF_DIR (a new or empty directory; nothing is overwritten): config.json,
model.safetensors and the tokenizer files of the run in DIR, which transformers'
from_pretrained (and evaluate.py --init_from HF_DIR) load: a MarianMTModel with
MarianTokenizer files for a translation run, a BERT model with its head and tokenizer
for a BERT run. Settings the format cannot express (translation: Pre-LN, RoPE or
learned positions; BERT: Pre-LN, RoPE or sinusoidal positions) are refused."""


def _define(values: flags.FlagValues) -> None:
    flags.DEFINE_string("workdir", None, "Run directory written by train.py.", flag_values=values)
    flags.DEFINE_string(
        "output", None, "The Hugging Face directory to write (new or empty).", flag_values=values
    )
    flags.DEFINE_string(
        "checkpoint",
        "latest",
        "latest, a step number, or avg:K (mean of the last K).",
        flag_values=values,
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if not values.workdir:
        fail("--workdir is required: the run to export, e.g. --workdir runs/demo")
    if not values.output:
        fail("--output is required: the new Hugging Face directory, e.g. --output exported/demo")

    def export() -> None:
        from jaxtrans.tasks import export_workdir  # imports JAX; after flag checks

        export_workdir(values.workdir, values.output, values.checkpoint)

    run(export)


if __name__ == "__main__":
    main()
