"""``train.py`` / ``jaxtrans-train``: flags, then one call to train_and_evaluate."""

import sys

from absl import flags

from jaxtrans.programs.cli import define_config_flag, fail, parse_flags, run

USAGE = """usage: python train.py --config configs/NAME.py --workdir DIR [--config.KEY=VALUE ...]

Trains the model of the config in DIR; rerunning the same command resumes from the
latest checkpoint. SIGTERM or Ctrl-C saves a checkpoint and stops."""


def _define(values: flags.FlagValues) -> None:
    define_config_flag(values)
    flags.DEFINE_string("workdir", None, "Run directory (created if needed).", flag_values=values)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if values.config is None:
        fail("--config is required, e.g. --config configs/demo.py")
    if not values.workdir:
        fail("--workdir is required, e.g. --workdir runs/demo")

    def train() -> None:
        from jaxtrans.tasks import train_and_evaluate  # imports JAX; after flag checks

        train_and_evaluate(values.config, values.workdir)

    run(train)
