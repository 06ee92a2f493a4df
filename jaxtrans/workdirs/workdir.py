"""The files of a run directory besides checkpoints.

DIR/config.json       the resolved run config (written once; a resumed run must match)
DIR/tokenizer/        SentencePiece models (jaxtrans.data)
DIR/checkpoints/      orbax checkpoints (jaxtrans.workdirs.checkpoints)
DIR/metrics.jsonl     one JSON object per logged step and per evaluation
DIR/tensorboard/      TensorBoard event files
DIR/eval/             evaluation reports
"""

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

import ml_collections

from jaxtrans.errors import UserError, describe, json_type

CONFIG_FILE = "config.json"


def config_path(workdir: str) -> str:
    return os.path.join(workdir, CONFIG_FILE)


# Sections of a run config: config.json must hold each it has as an object, and a model.
SECTIONS = ("model", "data", "train", "optimizer", "eval", "mesh")


def load_run_config(workdir: str) -> ml_collections.ConfigDict:
    """The config a workdir was trained with: a JSON object with a model, data and its
    SECTIONS as objects (UserError naming the file otherwise; the fields are the task's to
    check: jaxtrans.tasks.saved_run_config)."""
    path = config_path(workdir)
    if not os.path.exists(path):
        raise UserError(f"{workdir}: no {CONFIG_FILE}; is this a jaxtrans workdir? check --workdir")
    restore = "restore it or use a new workdir"
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(f"{path} is not valid JSON ({describe(error)}); {restore}") from error
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error.strerror}); {restore}") from error
    if not isinstance(saved, dict):
        raise UserError(f"{path} holds {json_type(saved)}, not an object; {restore}")
    for section in ("model", "data"):
        if section not in saved:
            raise UserError(f"{path} has no {section!r} section; {restore}")
    for section in SECTIONS:
        if section in saved and not isinstance(saved[section], dict):
            found = json_type(saved[section])
            raise UserError(f"{path}: {section!r} is {found}, not an object; {restore}")
    if not isinstance(saved.get("task", ""), str):
        raise UserError(f"{path}: task={saved['task']!r} is not a task name; {restore}")
    try:
        return ml_collections.ConfigDict(saved)
    except (ValueError, TypeError) as error:  # e.g. a key with a dot
        raise UserError(f"{path}: {describe(error)}; {restore}") from error


def huggingface_model_type(path: str) -> str | None:
    """The ``model_type`` of a Hugging Face model directory's config.json ("bert",
    "marian", ...); None for a jaxtrans workdir or anything that is not such a directory."""
    try:
        with open(config_path(path), encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    model_type = saved.get("model_type") if isinstance(saved, dict) else None
    return model_type if isinstance(model_type, str) else None


def save_run_config(workdir: str, config: ml_collections.ConfigDict) -> None:
    """Write config.json atomically (temporary file, then rename); an unchanged file is left
    alone, so that resuming touches nothing it does not have to."""
    path = config_path(workdir)
    text = config.to_json_best_effort(indent=2, sort_keys=True)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            if f.read() == text:
                return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def new_directory(workdir: str, name: str, complete: Callable[[str], bool]) -> Iterator[str]:
    """Write ``WORKDIR/NAME`` whole or not at all: fill the scratch directory this yields
    (inside the workdir); on success it is renamed into place. If another process put a
    directory there first and ``complete(path)`` says it is whole, that one is kept."""
    os.makedirs(workdir, exist_ok=True)
    target = os.path.join(workdir, name)
    scratch = tempfile.mkdtemp(prefix=f".{name}-", dir=workdir)
    try:
        yield scratch
        try:
            os.rename(scratch, target)
        except OSError as error:
            if not complete(target):  # else another process finished first: keep its copy
                raise UserError(
                    f"cannot write {target} ({error.strerror}); move what is there aside, "
                    "or use a new workdir"
                ) from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
