"""``python -m jaxtrans.export``: a trained BERT workdir -> a Hugging Face model directory
(jaxtrans.tasks.bert_export says what is written)."""

import sys

from absl import flags

from jaxtrans.programs.cli import fail, parse_flags, run

USAGE = """usage: python -m jaxtrans.export --workdir DIR --output HF_DIR
                   [--checkpoint latest|STEP|avg:K]

Writes HF_DIR (a new or empty directory; nothing is overwritten): config.json,
model.safetensors and the tokenizer files of the BERT run in DIR, which
transformers' from_pretrained (and evaluate.py --init_from HF_DIR) load. Settings
Hugging Face BERT cannot express (Pre-LN, RoPE or sinusoidal positions) are refused."""


def _define(values: flags.FlagValues) -> None:
    flags.DEFINE_string(
        "workdir", None, "BERT run directory written by train.py.", flag_values=values
    )
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
        fail("--workdir is required: the BERT run to export, e.g. --workdir runs/sst2")
    if not values.output:
        fail("--output is required: the new Hugging Face directory, e.g. --output exported/sst2")

    def export() -> None:
        from jaxtrans.tasks.bert_export import export_workdir  # imports JAX; after flag checks

        export_workdir(values.workdir, values.output, values.checkpoint)

    run(export)


if __name__ == "__main__":
    main()
