"""Shared command-line plumbing: config flags, one-line errors, exit status 2.

Configs are Python files (``get_config()`` returning an ml_collections ConfigDict) and
run as code when loaded: only use config files you trust.
"""

import atexit
import contextlib
import functools
import gc
import os
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import thread as futures_thread

import ml_collections
from absl import flags
from ml_collections import config_flags

from jaxtrans.errors import TrainingStopped, UserError
from jaxtrans.programs.config_names import allow_sibling_imports, resolve_config_arg
from jaxtrans.programs.platforms import cpu_only_without_accelerators

USAGE_ERROR = 2


def fail(message: str) -> None:
    """Print a one-line error and exit with status 2."""
    first_line = " ".join(str(message).split("\n")[0].split())
    print(f"error: {first_line}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


def config_file_arg(argv: list[str]) -> str | None:
    """The value of ``--config`` in ``argv`` (``--config=PATH`` or ``--config PATH``; the
    last one given, as absl takes)."""
    found = None
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            found = arg.split("=", 1)[1]
        elif arg == "--config" and i + 1 < len(argv):
            found = argv[i + 1]
    return found


def config_file_dir_on_path(argv: list[str]) -> None:
    """Let config files import their siblings (``from configs import bert_base``)."""
    path = config_file_arg(argv)
    if path:
        allow_sibling_imports(path)


def unknown_field(argv: list[str], error: Exception) -> tuple[str, str] | None:
    """(override, hint) for the ``--config.KEY`` of ``argv`` that names a field the config
    lacks, judged from ml_collections' error, which names the missing part (``'nope'``)
    and may suggest a field (``Did you mean "num_steps"``)."""
    while error.args and isinstance(error.args[0], BaseException):  # AttributeError(KeyError)
        error = error.args[0]
    text = str(error.args[0]) if error.args else str(error)
    quoted = re.search(r"'([^'\\]+)'", text)
    suggestion = re.search(r'Did you mean "([^"]+)"', text)
    hint = f"did you mean {suggestion.group(1)}? " if suggestion else ""
    # A lookup inside a leaf ("Attempting to lookup: train.num_steps.x") names the whole path.
    lookup = re.search(r"lookup: (\S+)", text)
    for arg in argv:
        if arg.startswith("--config."):
            path = arg.split("=", 1)[0].removeprefix("--config.")
            if lookup:
                found = path == lookup.group(1)
            else:
                found = bool(quoted) and quoted.group(1) in path.split(".")
            if found:
                return path, hint
    return None


def flag_error(error: Exception) -> str:
    """The one-line message of a flag absl cannot parse (or a --flagfile it cannot read)."""
    if isinstance(error, UnicodeDecodeError):
        return f"a --flagfile is not UTF-8 text (byte {error.start}); fix it, see --help"
    return f"{error}; see --help"


def parse_flags(
    argv: list[str], define: Callable[[flags.FlagValues], None], usage: str
) -> flags.FlagValues:
    """Parse ``argv`` into a fresh FlagValues; bad flags are a one-line error (exit 2).
    The config flag looks for its ``--config.KEY`` overrides in ``sys.argv``, so ``argv``
    stands there while it is parsed (``main(argv)`` called from Python works as the
    program does). A bare ``--config NAME`` is the shipped config NAME (configs/NAME.py).
    First, before anything starts JAX: the CPU platform alone on a machine without
    accelerators (jaxtrans.programs.platforms)."""
    cpu_only_without_accelerators()
    try:
        argv = resolve_config_arg(argv)
    except UserError as error:
        fail(str(error))
    saved = sys.argv
    sys.argv = list(argv)
    try:
        return _parse_flags(argv, define, usage)
    finally:
        sys.argv = saved


def _parse_flags(
    argv: list[str], define: Callable[[flags.FlagValues], None], usage: str
) -> flags.FlagValues:
    values = flags.FlagValues()
    try:
        define(values)  # the config flag reads --flagfile files of sys.argv already here
    except (flags.Error, UnicodeDecodeError) as error:
        fail(flag_error(error))
    if any(arg in ("-h", "--help", "--helpfull") for arg in argv[1:]):
        print(usage)
        print(values.get_help())
        sys.exit(0)
    config_file = config_file_arg(argv) if "config" in values else None
    if config_file is not None and not config_file.strip():
        fail("--config is empty; give a config file, e.g. configs/demo.py")
    if config_file and not os.path.isfile(config_file.split(":", 1)[0]):
        fail(f"--config {config_file}: no such file; give a config file, e.g. configs/demo.py")
    for arg in argv:
        field = arg.split("=", 1)[0].removeprefix("--config.")
        if arg.startswith("--config.") and not all(field.split(".")):
            fail(
                f"{arg.split('=', 1)[0]}: a config override names a field, e.g. "
                "--config.train.num_steps=1000 (docs/configuration.md lists every field)"
            )
    config_file_dir_on_path(argv)
    try:
        values(argv)
    except (flags.Error, UnicodeDecodeError) as error:
        fail(flag_error(error))
    except (AttributeError, LookupError) as error:
        unknown = unknown_field(argv, error)
        if unknown is not None:
            path, hint = unknown
            fail(
                f"--config.{path}: the config has no field {path}; {hint}check the spelling "
                "(docs/configuration.md lists every field)"
            )
        if "get_config" in str(error):
            fail(f"--config {config_file}: the file has no get_config() returning a ConfigDict")
        fail(f"cannot load the config {config_file}: {type(error).__name__}: {error}")
    except (OSError, SyntaxError, ImportError, TypeError, ValueError) as error:
        # ml_collections re-raises errors of get_config() with the traceback as the message;
        # its last line names the error.
        lines = str(error).strip().splitlines() or [""]
        detail = lines[-1] if "Traceback" in str(error) else f"{type(error).__name__}: {lines[0]}"
        fail(f"cannot load the config {config_file}: {detail}; fix the config file")
    if config_file and not isinstance(values["config"].value, ml_collections.ConfigDict):
        fail(f"--config {config_file}: get_config() must return an ml_collections.ConfigDict")
    return values


def _is_pool_worker(thread: threading.Thread) -> bool:
    """A ``concurrent.futures`` pool's worker: it waits for work until its pool shuts down,
    which the interpreter does at exit after the work it holds is done."""
    return getattr(thread, "_target", None) is futures_thread._worker


def finish_background_threads(timeout: float = 30.0) -> None:
    """Wait for the other non-daemon threads before exiting on an error.

    The interpreter waits for them at exit anyway, but only after it has shut down the
    thread pools of ``concurrent.futures``: a library thread still at work then (orbax
    cleans up a checkpoint directory in the background from the moment its manager is
    made) fails to submit its next step and logs a traceback after our one line. The pools'
    own workers are not waited for: an idle one (orbax keeps a metadata-store pool) would
    hold the exit for the whole timeout."""
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.daemon or _is_pool_worker(thread):
            continue
        # orbax's writer threads re-raise, on join, the failure already reported.
        with contextlib.suppress(Exception):
            thread.join(timeout)


@functools.cache
def freeze_at_exit() -> None:
    """Keep the interpreter's exit from searching what a program leaves (jax, flax, the
    model: some 160,000 objects) for reference cycles, 0.2 s of every fresh process (a
    fresh evaluate.py at beam 4 on 1,000 demo sentences about 5.0 -> 4.8 s, 2026-12-05).
    An exit handler freezes everything (gc.freeze): objects are still freed as their
    modules go, and cycles among them are left to the operating system with the rest of
    the process's memory; every output is closed by then, and the other exit handlers
    still run."""
    atexit.register(gc.freeze)


def run(main: Callable[[], None]) -> None:
    """Run ``main``; a UserError becomes a one-line message and exit status 2."""
    cpu_only_without_accelerators()  # for programs that parse their flags otherwise
    freeze_at_exit()
    try:
        main()
    except UserError as error:
        finish_background_threads()
        fail(str(error))
    except TrainingStopped as error:
        finish_background_threads()
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def define_config_flag(values: flags.FlagValues) -> None:
    config_flags.DEFINE_config_file(
        "config",
        None,
        "Run config: a Python file whose get_config() returns a ConfigDict, or the name of a "
        "shipped config (configs/NAME.py: demo, base, bert_demo, ...); override any "
        "field with --config.KEY=VALUE (e.g. --config.train.num_steps=1000).",
        flag_values=values,
        lock_config=True,
    )
