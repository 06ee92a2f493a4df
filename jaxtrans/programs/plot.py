"""Training curves of a run: ``python -m jaxtrans.plot DIR [--output PNG]``; and the
pictures of how the model works: ``python -m jaxtrans.plot positions|masks|schedule|
smoothing [--config FILE] [--config.KEY=VALUE ...] [--output PNG]`` (jaxtrans/programs/pictures.py,
docs/pictures.md). A first argument that names a picture selects it; a run directory
with such a name is given as ``./positions``.

Reads ``DIR/metrics.jsonl`` (one JSON object per line, written by the training loop:
train records with step, loss, lr, tokens_per_sec, ...; dev records with
``"split": "dev"`` and loss, bleu, chrf) and draws loss, learning rate, tokens/s and dev
BLEU against step into one PNG (default ``DIR/metrics.png``). Works while the run is
still training: it only reads the file.
"""

import argparse
import json
import os
import sys
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from jaxtrans.errors import UserError
from jaxtrans.programs.cli import fail, run

METRICS_FILE = "metrics.jsonl"
# The pictures of jaxtrans/programs/pictures.py (its KINDS), and their resolution.
PICTURES = ("positions", "masks", "schedule", "smoothing")
PICTURE_DPI = 80


def read_metrics(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """(train records, dev records, malformed lines skipped) of a metrics.jsonl, in the
    order of the surviving run.

    A run that crashed and resumed from an earlier checkpoint logs some steps again; when
    a record's step is not past the previous one of its split, the records it repeats
    (same split, step >= its step) are dropped, so the curves follow the run that went on.
    A line cut short by a crash is skipped and counted.
    """
    if not os.path.isfile(path):
        raise UserError(f"{path} does not exist; give the --workdir of a training run")
    train: list[dict[str, Any]] = []
    dev: list[dict[str, Any]] = []
    malformed = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                malformed += 1
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                malformed += 1
                continue
            records = dev if record.get("split") == "dev" else train
            while records and records[-1]["step"] >= record["step"]:
                records.pop()
            records.append(record)
    if not train and not dev:
        raise UserError(f"{path} holds no metrics yet; plot again after the first log step")
    return train, dev, malformed


def series(records: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the records that hold a number under ``key`` (null, e.g. a NaN
    or an MFU unknown on CPU, is left out)."""
    points = [
        (r["step"], float(r[key]))
        for r in records
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]
    steps = np.array([p[0] for p in points], dtype=np.int64)
    values = np.array([p[1] for p in points], dtype=np.float64)
    return steps, values


# Panels: title, then (records kind, key, legend label) per line.
PANELS = (
    ("loss", (("train", "loss", "train"), ("dev", "loss", "dev"))),
    ("learning rate", (("train", "lr", "lr"),)),
    ("tokens/s", (("train", "tokens_per_sec", "tokens/s"),)),
    ("dev BLEU", (("dev", "bleu", "BLEU"), ("dev", "chrf", "chrF"))),
)


def draw(train: list[dict[str, Any]], dev: list[dict[str, Any]], title: str = "") -> Figure:
    """A 2 x 2 figure of the PANELS against step (matplotlib Agg canvas, no display)."""
    fig = Figure(figsize=(11, 7), layout="constrained")
    kinds = {"train": train, "dev": dev}
    for ax, (panel_title, lines) in zip(fig.subplots(2, 2, sharex=True).flat, PANELS, strict=True):
        drawn = 0
        for kind, key, label in lines:
            steps, values = series(kinds[kind], key)
            if len(steps):
                # A single evaluation is still worth a visible point.
                ax.plot(steps, values, marker="o" if kind == "dev" else None, ms=3, label=label)
                drawn += 1
        ax.set_title(panel_title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn > 1:
            ax.legend()
        elif drawn == 0:
            ax.text(0.5, 0.5, "not logged yet", ha="center", va="center", transform=ax.transAxes)
    if title:
        fig.suptitle(title)
    return fig


def plot_metrics(workdir: str, output: str | None = None) -> str:
    """Draw DIR/metrics.jsonl to ``output`` (default DIR/metrics.png); returns the path."""
    train, dev, malformed = read_metrics(os.path.join(workdir, METRICS_FILE))
    if malformed:
        print(f"skipped {malformed} malformed line(s) of {METRICS_FILE}", file=sys.stderr)
    output = output or os.path.join(workdir, "metrics.png")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        draw(train, dev, title=os.path.basename(os.path.abspath(workdir))).savefig(
            output, format="png", dpi=100
        )
    except OSError as error:
        raise UserError(f"cannot write --output {output}: {error.strerror}") from error
    return output


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        fail(f"{message} (see python -m jaxtrans.plot --help)")


PICTURE_USAGE = """usage: python -m jaxtrans.plot KIND [--config FILE] [--config.KEY=VALUE ...]
                                [--output PNG]

KIND: positions | masks | schedule | smoothing, drawn from the library's own functions
for the config (a file or a shipped config's name; default base, configs/base.py) to
--output (default KIND.png)."""


def plot_picture(argv: list[str]) -> str:
    """``python -m jaxtrans.plot KIND ...`` (argv[1] is KIND); returns the PNG written."""
    from absl import flags

    from jaxtrans.programs.cli import config_file_arg, define_config_flag, parse_flags
    from jaxtrans.programs.config_names import shipped_config_path

    kind, rest = argv[1], argv[2:]
    if config_file_arg(rest) is None:  # the default config, so that overrides apply to it
        try:  # the shipped configs/base.py: the package's default run config
            rest = [f"--config={shipped_config_path('base')}", *rest]
        except UserError as error:
            fail(str(error))

    def define(values: flags.FlagValues) -> None:
        define_config_flag(values)
        flags.DEFINE_string("output", None, "Image to write (default KIND.png).",
                            flag_values=values)  # fmt: skip

    # ml_collections finds the --config.KEY overrides in sys.argv: let it read these.
    saved, sys.argv = sys.argv, [argv[0], *rest]
    try:
        values = parse_flags(sys.argv, define, PICTURE_USAGE)
    finally:
        sys.argv = saved
    output = values.output or f"{kind}.png"

    def draw() -> None:
        from jaxtrans.programs.pictures import picture  # imports JAX; after the flag checks

        label = os.path.basename(config_file_arg(rest))
        try:
            os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
            picture(kind, values.config, label).savefig(output, format="png", dpi=PICTURE_DPI)
        except OSError as error:
            raise UserError(f"cannot write --output {output}: {error.strerror}") from error
        print(f"wrote {output}")

    run(draw)
    return output


def main(argv: list[str] | None = None) -> None:
    """``python -m jaxtrans.plot DIR [--output PNG]`` or ``python -m jaxtrans.plot KIND
    ...`` (PICTURE_USAGE); errors exit with status 2."""
    argv = list(sys.argv if argv is None else argv)
    if len(argv) > 1 and argv[1] in PICTURES:
        plot_picture(argv)
        return
    parser = _Parser(
        prog="python -m jaxtrans.plot",
        description="Draw loss, learning rate, tokens/s and dev BLEU of a run against step.",
        epilog=f"python -m jaxtrans.plot {'|'.join(PICTURES)} --help: the pictures of how "
        "the model works (a run directory with one of these names: ./NAME).",
    )
    parser.add_argument("workdir", metavar="DIR", help="run directory written by train.py")
    parser.add_argument("--output", metavar="PNG", help="image to write (default DIR/metrics.png)")
    args = parser.parse_args(argv[1:])
    run(lambda: print(f"wrote {plot_metrics(args.workdir, args.output)}"))


if __name__ == "__main__":
    main()
