"""What the reliability tests share: the program server, a tiny demo run, an uninterrupted
reference run of it, and ways to look at a workdir (files, metrics, checkpoints).

The tiny run is configs/demo.py shrunk from the command line (d_model 32, 1+1 layers,
1500 demo pairs, batch 8), so every run is the real ``train.py`` with real flags. All runs
of one pytest process share a fresh XLA compilation cache (a temporary directory), so only
the first run compiles: a cached executable is the same program, so results stay bitwise
equal, and this is what users get by default.
"""

import atexit
import functools
import hashlib
import json
import os
import shutil
import tempfile

from program_server import ProgramServer
from tiny_configs import TINY_TRANSLATION

STEPS = 8
# Keys of a metrics record that measure time, not training; everything else must repeat.
TIMING_KEYS = {"tokens_per_sec", "steps_per_sec", "mfu", "input_wait", "input_wait_fraction"}


@functools.cache
def scratch() -> str:
    """A temporary directory for the whole pytest process (removed at exit)."""
    path = tempfile.mkdtemp(prefix="jaxtrans-reliability-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def server() -> ProgramServer:
    started = ProgramServer()
    atexit.register(started.close)
    return started


def tiny_flags(num_steps: int = STEPS, **overrides) -> list[str]:
    """``--config configs/demo.py`` and overrides for a tiny, fast run (plus ``overrides``,
    e.g. ``train__num_steps=3`` for --config.train.num_steps=3)."""
    values = {
        **TINY_TRANSLATION,
        "train.num_steps": num_steps,
        "train.checkpoint_every": 2,
        "train.keep_checkpoints": 20,
        "train.compilation_cache_dir": os.path.join(scratch(), "xla"),
    }
    values.update({key.replace("__", "."): value for key, value in overrides.items()})
    return ["--config", "configs/demo.py", *(f"--config.{k}={v}" for k, v in values.items())]


def run_program(program: str, flags: list[str], **kwargs):
    """Run ``python PROGRAM FLAGS`` and wait (kwargs: see ProgramServer.start)."""
    return server().run(program, flags, outdir=os.path.join(scratch(), "output"), **kwargs)


def train(workdir: str, *flags: str, **kwargs):
    """Run train.py on ``workdir`` with the given flags (defaults: tiny_flags()) and wait."""
    return run_program("train.py", [*(flags or tiny_flags()), "--workdir", str(workdir)], **kwargs)


@functools.cache
def reference_workdir() -> str:
    """A workdir trained for STEPS steps without interruption (checkpoints every 2 steps)."""
    workdir = os.path.join(scratch(), "reference")
    run = train(workdir)
    assert run.returncode == 0, run.stderr
    return workdir


def copy_of_reference(destination: str) -> str:
    shutil.copytree(reference_workdir(), destination)
    return str(destination)


# ------------------------------------------------------------------ looking at a workdir


def snapshot(workdir: str) -> dict[str, tuple[int, int, str]]:
    """relative path -> (size, mtime_ns, sha256) of every file, except the lock file (each
    training start rewrites it with its pid)."""
    files = {}
    for root, _, names in os.walk(workdir):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, workdir)
            if name == ".lock" or os.path.islink(path):
                continue
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            info = os.stat(path)
            files[relative] = (info.st_size, info.st_mtime_ns, digest)
    return files


def changed_files(before: dict, after: dict) -> list[str]:
    """Files of ``before`` that are gone or differ in ``after`` (new files do not count)."""
    return sorted(path for path, entry in before.items() if after.get(path) != entry)


def train_records(workdir: str) -> list[dict]:
    """The training records of metrics.jsonl, in file order."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if "split" not in r]


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING_KEYS}


def checkpoint_steps(workdir: str) -> list[int]:
    """Steps of the complete checkpoints, as orbax (and so a restart) sees them."""
    from jaxtrans.workdirs.checkpoints import Checkpointer

    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        return checkpointer.all_steps()
    finally:
        checkpointer.close()


def checkpoint_leaves(workdir: str, step: int) -> list:
    """Every array of checkpoint ``step`` (parameters, optimizer state, dropout key), as
    numpy, in a fixed order."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    from jaxtrans.workdirs.checkpoints import Checkpointer

    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        restored = checkpointer.manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(), training=ocp.args.StandardRestore()
            ),
        )
    finally:
        checkpointer.close()
    return [np.asarray(x) for x in jax.tree.leaves([restored["params"], restored["training"]])]


def one_error_line(stderr: str) -> str:
    """The one line of stderr that starts with "error:" (fails if there is not exactly one)."""
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]
