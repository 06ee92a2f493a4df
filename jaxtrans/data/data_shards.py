"""Data shards: the global batch stays the same whatever the number of processes.

The training data is split into S data shards (shard s reads pairs s, s + S, s + 2S, ...
in its own seeded order and packs them into rows of its own). The global batch of B rows
is shard 0's next B / S rows, then shard 1's, ..., then shard S-1's:

    global batch = [ shard 0 | shard 1 | ... | shard S-1 ]      B / S rows each
    process p of P feeds rows [p * B/P, (p + 1) * B/P) of it, so it runs the shards
    those rows come from (and takes only its part of a shard that several processes share)

S is the number of processes of the run's first start, and stays with the run: the
pipeline state saved in each checkpoint names S and holds each shard's position. A run
resumed on another number of processes P' runs the same S shards, split anew (P' < S:
a process runs several; P' > S: processes share a shard, each reading all of it and taking
its own rows), from the exact positions saved, so every global batch (what the loss
depends on) is the one the original run would have made. With P = S each process runs
one shard, as it always did.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import grain
import numpy as np

from jaxtrans.errors import UserError


class ShardPart(NamedTuple):
    """Rows [start, stop) of data shard ``shard``'s batch, which this process feeds."""

    shard: int
    start: int
    stop: int


def process_parts(
    process_index: int, process_count: int, batch_size: int, shards: int
) -> list[ShardPart]:
    """The parts of the data shards' batches that process ``process_index`` feeds, in
    global row order (see the module docstring)."""
    if batch_size % shards or batch_size % process_count:
        raise UserError(
            f"--config.data.batch_size={batch_size} must be divisible by the {shards} data "
            f"shards of the run and its {process_count} processes; choose a multiple of both"
        )
    shard_rows, local_rows = batch_size // shards, batch_size // process_count
    first, last = process_index * local_rows, (process_index + 1) * local_rows
    return [
        ShardPart(s, max(first - s * shard_rows, 0), min(last - s * shard_rows, shard_rows))
        for s in range(first // shard_rows, (last - 1) // shard_rows + 1)
    ]


class ProcessRows(grain.DatasetIterator):
    """This process's rows of each global batch, from the data shards they come from.

    ``make_shard(s, shards)`` -> a checkpointable iterator (``grain.DatasetIterator``) of
    shard ``s``'s batches of ``batch_size // shards`` rows. State: ``{"shards": S,
    "positions": {"s": shard s's state}}`` for the shards this process runs.
    """

    def __init__(
        self,
        make_shard: Callable[[int, int], grain.DatasetIterator],
        batch_size: int,
        process_index: int,
        process_count: int,
        shards: int,
    ):
        super().__init__()
        self._make_shard = make_shard
        self._batch_size = batch_size
        self._process = (process_index, process_count)
        self._split(shards)

    def _split(self, shards: int) -> None:
        self.shards = shards
        self.parts = process_parts(*self._process, self._batch_size, shards)
        self._iterators = {part.shard: self._make_shard(part.shard, shards) for part in self.parts}

    def __next__(self) -> dict[str, np.ndarray]:
        pieces = []
        for part in self.parts:
            batch = next(self._iterators[part.shard])
            pieces.append({key: value[part.start : part.stop] for key, value in batch.items()})
        if len(pieces) == 1:
            return pieces[0]
        return {key: np.concatenate([p[key] for p in pieces]) for key in pieces[0]}

    def get_state(self) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "positions": {str(s): it.get_state() for s, it in self._iterators.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from ``state``, which must hold the position of every shard this process
        runs (see ``merge_positions``); it may have been saved with another split."""
        if state["shards"] != self.shards:
            self._split(state["shards"])
        for s, iterator in self._iterators.items():
            iterator.set_state(state["positions"][str(s)])


def merge_positions(states: list[dict[str, Any]], needed: list[int], what: str) -> dict[str, Any]:
    """One ``ProcessRows`` state from those of every process of the saving run: the union
    of their shard positions (a shard that several processes ran is at the same position in
    each). UserError if they disagree on the shard count or one of ``needed`` is missing."""
    counts = {state["shards"] for state in states}
    if len(counts) != 1:
        raise UserError(f"the saved {what} states disagree on the number of data shards")
    positions: dict[str, Any] = {}
    for state in states:
        for shard, position in state["positions"].items():
            positions.setdefault(shard, position)
    missing = [s for s in needed if str(s) not in positions]
    if missing:
        raise UserError(
            f"the checkpoint holds no saved {what} position of data shard {missing[0]} (it "
            "has those of the processes that wrote it; an older jaxtrans saved process 0's "
            "only); resume from a checkpoint written by this version, or use a new --workdir"
        )
    return {"shards": counts.pop(), "positions": positions}


def as_data_shards(state: dict[str, Any]) -> dict[str, Any]:
    """A pipeline state of format 1 (one process's position, before data shards) as one of
    format 2: process p of P ran what is now data shard p of P, on batch_size // P rows."""
    if state.get("format") != 1 or "process_count" not in state:
        return state
    old = dict(state)
    index, count, rows = old.pop("process_index"), old.pop("process_count"), old.pop("rows")
    pipeline = {"shards": count, "positions": {str(index): old.pop("pipeline")}}
    return {**old, "format": 2, "batch_size": rows * count, "pipeline": pipeline}


def resplit_note(saved_by: int, process_index: int, process_count: int, shards: int) -> str | None:
    """The line to show when a run resumes on another number of processes than saved it."""
    if saved_by == process_count == shards:
        return None
    batch_size = shards * process_count  # any multiple of both splits alike
    runs = [part.shard for part in process_parts(process_index, process_count, batch_size, shards)]
    return (
        f"data: the checkpoint was saved by {saved_by} processes, this run has "
        f"{process_count}; its {shards} data shards are split anew (process {process_index} "
        f"runs {', '.join(map(str, runs))}), so the global batches continue unchanged"
    )
