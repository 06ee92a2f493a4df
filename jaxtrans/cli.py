"""Shared command-line plumbing: config flags, one-line errors, exit status 2.

Configs are Python files (``get_config()`` returning an ml_collections ConfigDict) and
run as code when loaded: only use config files you trust.
"""

import os
import sys
from collections.abc import Callable

from absl import flags
from ml_collections import config_flags

from jaxtrans.errors import TrainingStopped, UserError

USAGE_ERROR = 2


def fail(message: str) -> None:
    """Print a one-line error and exit with status 2."""
    first_line = " ".join(str(message).split("\n")[0].split())
    print(f"error: {first_line}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


def config_file_dir_on_path(argv: list[str]) -> None:
    """Let config files import their siblings (``from configs import base``)."""
    for i, arg in enumerate(argv):
        path = None
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        if path:
            root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
            if root not in sys.path:
                sys.path.insert(0, root)


def parse_flags(
    argv: list[str], define: Callable[[flags.FlagValues], None], usage: str
) -> flags.FlagValues:
    """Parse ``argv`` into a fresh FlagValues; bad flags are a one-line error (exit 2)."""
    values = flags.FlagValues()
    define(values)
    if any(arg in ("-h", "--help", "--helpfull") for arg in argv[1:]):
        print(usage)
        print(values.get_help())
        sys.exit(0)
    config_file_dir_on_path(argv)
    try:
        values(argv)
    except flags.Error as error:
        fail(f"{error}")
    except (OSError, SyntaxError, ImportError, AttributeError, TypeError, ValueError) as error:
        fail(f"cannot load the config: {type(error).__name__}: {error}")
    return values


def run(main: Callable[[], None]) -> None:
    """Run ``main``; a UserError becomes a one-line message and exit status 2."""
    try:
        main()
    except UserError as error:
        fail(str(error))
    except TrainingStopped as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def define_config_flag(values: flags.FlagValues) -> None:
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Run config: a Python file whose get_config() returns a ConfigDict; override any "
        "field with --config.KEY=VALUE (e.g. --config.train.num_steps=1000).",
        flag_values=values,
        lock_config=True,
    )
