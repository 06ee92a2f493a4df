"""One packing stream: tokenised pairs in a seeded order -> packed rows -> whole batches.

    positions first, first + step, first + 2 step, ... of a data shard's order
    -> the pair's lengths from the id shards; drop (or truncate) pairs over the limits
    -> first-fit packing into rows (jaxtrans.data.packing)
    -> batches of ``rows`` rows, assembled from the ids with a few numpy calls

Every batch is a dict of int32 arrays of fixed shape: ``source``, ``source_segments``,
``source_positions`` [rows, max_source_length]; ``target_in``, ``target_out``,
``target_segments``, ``target_positions`` [rows, max_target_length]. Padding is PAD_ID
with segment 0 and position 0. A pair's source is its ids + [EOS]; its target_in is
[BOS] + ids and target_out ids + [EOS], so packing never leaks a token across pairs.
"""

from typing import Any, NamedTuple

import grain
import numpy as np

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.iterators import ShuffledEpochs
from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.translation.id_shards import IdShards
from jaxtrans.errors import UserError

SOURCE_KEYS = ("source", "source_segments", "source_positions")
TARGET_KEYS = ("target_in", "target_out", "target_segments", "target_positions")
BATCH_KEYS = SOURCE_KEYS + TARGET_KEYS

# Pairs whose lengths are looked up together: amortises per-call overhead; part of no state.
CHUNK_PAIRS = 256

# Status of a pair; only OK and TRUNCATED pairs reach the batches.
OK, TRUNCATED, TOO_LONG, MALFORMED = 0, 1, 2, 3
_STATUS_COUNTER = {TRUNCATED: "truncated", TOO_LONG: "too_long", MALFORMED: "malformed"}


class Limits(NamedTuple):
    """The length limits (EOS and BOS/EOS included) and what to do with longer pairs."""

    max_source: int
    max_target: int
    truncate: bool


def pair_status(lengths: np.ndarray, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """(status [n], packed lengths [n, 2]: source + EOS, target + BOS/EOS, after
    truncation) of pairs with id ``lengths`` [n, 2] (-1: malformed)."""
    too_long = (lengths[:, 0] >= limits.max_source) | (lengths[:, 1] >= limits.max_target)
    status = np.where(too_long, TRUNCATED if limits.truncate else TOO_LONG, OK)
    status = np.where(lengths[:, 0] < 0, MALFORMED, status)
    packed = np.minimum(lengths, [limits.max_source - 1, limits.max_target - 1]) + 1
    return status, packed


class PackedStream(grain.DatasetIterator):
    """Reads pairs at positions ``first + step * t`` (t = 0, 1, ...) of ``order``, packs
    them and yields batches of ``rows`` rows.

    State: ``next_index`` (the next t), the t of the pairs in open rows and in closed rows
    not yet batched (re-read by position on restore), and the running counts.
    """

    def __init__(
        self,
        shards: IdShards,
        order: ShuffledEpochs,
        limits: Limits,
        rows: int,
        packer: FirstFitPacker,
        first: int = 0,
        step: int = 1,
    ):
        super().__init__()
        self._shards = shards
        self._order = order
        self._limits = limits
        self._rows = rows
        self._packer = packer
        self._first, self._step = first, step
        self._next_index = 0
        self._chunk: tuple[int, Any] = (-1, None)
        self._ready: list[list[int]] = []  # closed rows waiting for a batch
        self._cache: dict[int, int] = {}  # t -> pair index, for pairs in open and ready rows
        self._counts = {"read": 0, "malformed": 0, "too_long": 0, "truncated": 0}
        # Pairs read since the last usable one: a whole shard of them means none ever fits.
        self._unusable_run = 0

    def _pairs_at(self, ts: np.ndarray) -> np.ndarray:
        return self._order.take(self._first + self._step * np.asarray(ts, np.int64))

    def _load_chunk(self, chunk: int) -> tuple[int, Any]:
        pairs = self._pairs_at(np.arange(chunk * CHUNK_PAIRS, (chunk + 1) * CHUNK_PAIRS))
        status, packed = pair_status(self._shards.lengths[pairs], self._limits)
        return chunk, (
            pairs.tolist(),
            status.tolist(),
            packed[:, 0].tolist(),
            packed[:, 1].tolist(),
        )

    def _fill(self) -> None:
        """Reads pairs until ``rows`` closed rows are ready (the per-pair loop, kept lean)."""
        add, ready, cache, counts = self._packer.add, self._ready, self._cache, self._counts
        index = self._next_index
        while len(ready) < self._rows:
            chunk, offset = divmod(index, CHUNK_PAIRS)
            if self._chunk[0] != chunk:
                self._chunk = self._load_chunk(chunk)
            pairs, status, source, target = self._chunk[1]
            counts["read"] += 1
            s = status[offset]
            if s <= TRUNCATED:  # OK or TRUNCATED
                if s == TRUNCATED:
                    counts["truncated"] += 1
                self._unusable_run = 0
                cache[index] = pairs[offset]
                closed = add(index, source[offset], target[offset])
                if closed:
                    ready += closed
            else:
                counts[_STATUS_COUNTER[s]] += 1
                self._unusable_run += 1
                if self._unusable_run >= len(self._order.rows):
                    self._next_index = index + 1
                    raise self._nothing_fits()
            index += 1
        self._next_index = index

    def _nothing_fits(self) -> UserError:
        return UserError(
            f"none of the {len(self._order.rows)} training pairs can be used: all are longer "
            f"than max_source_length={self._limits.max_source} / "
            f"max_target_length={self._limits.max_target} tokens (EOS/BOS included) or "
            "malformed; raise the limits or set --config.data.truncate=True"
        )

    def __next__(self) -> dict[str, np.ndarray]:
        self._fill()
        rows, self._ready = self._ready[: self._rows], self._ready[self._rows :]
        return assemble(
            self._shards,
            [[self._cache.pop(t) for t in row] for row in rows],
            self._rows,
            self._limits,
        )

    def get_state(self) -> dict[str, Any]:
        return {
            "next_index": self._next_index,
            "open_rows": [list(r) for r in self._packer.rows],
            "ready_rows": [list(r) for r in self._ready],
            "counts": dict(self._counts),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._next_index = state["next_index"]
        self._counts = dict(state["counts"])
        self._ready = [list(r) for r in state["ready_rows"]]
        keys = [k for row in state["ready_rows"] + state["open_rows"] for k in row]
        pairs = self._pairs_at(np.array(keys, np.int64)) if keys else np.zeros(0, np.int64)
        self._cache = dict(zip(keys, pairs.tolist(), strict=True))
        _, packed = pair_status(self._shards.lengths[pairs].reshape(-1, 2), self._limits)
        lengths = dict(zip(keys, map(tuple, packed.tolist()), strict=True))
        self._packer.restore(state["open_rows"], lengths)
        self._unusable_run = 0


def _place(lengths: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where the tokens of consecutive pairs go in rows holding ``counts`` pairs each:
    (row [tokens], column [tokens], position within its pair [tokens], segment [tokens],
    each pair's first token [pairs] and last token [pairs] in the flat token order)."""
    pairs = len(lengths)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    row_of_pair = np.repeat(np.arange(len(counts)), counts)
    first_pair_of_row = np.cumsum(counts) - counts
    segment = np.arange(pairs) - first_pair_of_row[row_of_pair] + 1
    row_start = starts[first_pair_of_row[row_of_pair]]  # flat start of each pair's row
    within = np.arange(int(ends[-1])) - np.repeat(starts, lengths)
    column = np.repeat(starts - row_start, lengths) + within
    return (
        np.repeat(row_of_pair, lengths),
        column,
        within,
        np.repeat(segment, lengths),
        starts,
        ends - 1,
    )


def assemble(shards: IdShards, rows: list[list[int]], num_rows: int, limits: Limits) -> dict:
    """The batch arrays of ``rows`` (pair indices of each row, in packing order)."""
    batch = {key: np.zeros((num_rows, limits.max_source), np.int32) for key in SOURCE_KEYS}
    batch |= {key: np.zeros((num_rows, limits.max_target), np.int32) for key in TARGET_KEYS}
    counts = np.array([len(r) for r in rows], np.int64)
    pairs = np.array([p for r in rows for p in r], np.int64)
    if not len(pairs):
        return batch
    # Source: ids + [EOS].
    ids, lengths = shards.gather(0, pairs, limits.max_source - 1)
    row, column, position, segment, first, last = _place(lengths + 1, counts)
    tokens = np.full(len(row), vocab.EOS_ID, np.int32)
    is_id = np.ones(len(row), bool)
    is_id[last] = False
    tokens[is_id] = ids
    batch["source"][row, column] = tokens
    batch["source_segments"][row, column] = segment
    batch["source_positions"][row, column] = position
    # Target: target_in = [BOS] + ids, target_out = ids + [EOS].
    ids, lengths = shards.gather(1, pairs, limits.max_target - 1)
    row, column, position, segment, first, last = _place(lengths + 1, counts)
    target_in = np.full(len(row), vocab.BOS_ID, np.int32)
    is_id = np.ones(len(row), bool)
    is_id[first] = False
    target_in[is_id] = ids
    target_out = np.full(len(row), vocab.EOS_ID, np.int32)
    is_id[:] = True
    is_id[last] = False
    target_out[is_id] = ids
    batch["target_in"][row, column] = target_in
    batch["target_out"][row, column] = target_out
    batch["target_segments"][row, column] = segment
    batch["target_positions"][row, column] = position
    return batch
