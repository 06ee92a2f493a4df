"""A checkpoint item that every process writes its own part of: one JSON file a process.

    CHECKPOINT/data/process_0-of-2.json     written by process 0
    CHECKPOINT/data/process_1-of-2.json     written by process 1

This is grain's layout (``grain.checkpoint.CheckpointHandler``), but grain's handler gives
each process back only the file of its own index and count, so a checkpoint could not be
restored on another number of processes. Here every process reads back the whole list,
in process order, and decides what it needs (the data pipeline re-splits its shards).

Orbax creates the item's directory inside the checkpoint's temporary directory before the
processes write, and renames the checkpoint only once every process has finished, so a
checkpoint that looks complete holds every process's file.
"""

import dataclasses
import json
import re
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

_FILE = re.compile(r"process_(\d+)-of-(\d+)\.json")


class ProcessJsonHandler(ocp.CheckpointHandler):
    """Saves this process's JSON value; restores the values of all processes, in order."""

    def save(self, directory: epath.Path, args: "ProcessJsonSave") -> None:
        name = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
        (directory / name).write_text(json.dumps(args.value))

    def restore(self, directory: epath.Path, args: "ProcessJsonRestore | None" = None) -> list:
        """The values of processes 0 .. N-1 of the run that saved them. A missing file is
        FileNotFoundError and a garbled one json.JSONDecodeError: a damaged checkpoint."""
        found = {}
        for path in directory.iterdir():
            match = _FILE.fullmatch(path.name)
            if match:
                found[int(match.group(1))] = (int(match.group(2)), path)
        counts = {count for count, _ in found.values()}
        if len(counts) != 1 or set(found) != set(range(counts.pop())):
            names = sorted(path.name for _, path in found.values())
            raise FileNotFoundError(f"{directory} lacks the file of a process (it has {names})")
        return [json.loads(found[i][1].read_text()) for i in range(len(found))]

    def metadata(self, directory: epath.Path) -> None:
        return None

    def finalize(self, directory: epath.Path) -> None:
        pass

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(ProcessJsonHandler, for_save=True)
@dataclasses.dataclass
class ProcessJsonSave(ocp.args.CheckpointArgs):
    value: Any  # this process's JSON-serialisable value


@ocp.args.register_with_handler(ProcessJsonHandler, for_restore=True)
@dataclasses.dataclass
class ProcessJsonRestore(ocp.args.CheckpointArgs):
    pass
