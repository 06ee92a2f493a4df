"""The directory an export writes (``python -m jaxtrans.export``): new or empty, written
whole or not at all, never over anything already there."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from jaxtrans.errors import UserError
from jaxtrans.workdirs.workdir import new_directory


def check_output(output: Path) -> None:
    """UserError unless ``output`` is a new (or empty) directory: nothing is overwritten."""
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output} is a file; give a new directory")
    if output.is_dir() and any(output.iterdir()):
        raise UserError(
            f"--output {output} exists and is not empty; give a new directory (nothing is "
            "overwritten)"
        )


@contextlib.contextmanager
def written_whole(output: Path) -> Iterator[Path]:
    """Yields a scratch directory beside ``output``, renamed to ``output`` when the block
    ends without an error (an empty directory there is replaced: rename(2) allows that)."""

    def complete(path: str) -> bool:
        return False  # someone else's directory appeared meanwhile: never take it as ours

    parent, name = os.path.split(os.path.abspath(output))
    with new_directory(parent, name, complete) as scratch:
        yield Path(scratch)
