"""The training input pipeline: shard, shuffle, tokenise, filter, pack, batch, prefetch.

    pairs s, s + S, s + 2S, ...        data shard s of S (random access)
    -> a new permutation of the shard each epoch (seeded), repeated forever
    -> tokenise 256 pairs at a time: source = ids + [EOS]; target = ids
    -> drop (or truncate) pairs over max_source_length / max_target_length, counting them
    -> pack pairs first-fit into rows (segment ids 1, 2, ...; positions restart per pair),
       or one pair a row; target_in = [BOS] + ids, target_out = ids + [EOS] per pair
    -> batches of batch_size // S rows per shard; the global batch is the shards' batches
       one after another, and process p of P takes rows [p, p + 1) * batch_size // P of it
       (jaxtrans.data.data_shards) -> prefetched in a thread

S, the number of data shards, is the process count of the run's first start: then process
p runs shard p. A run resumed on another number of processes runs the same S shards split
anew, so its global batches are those the original run would have made.

The batches come from a grain ``DatasetIterator`` (prefetched by grain's
``ThreadPrefetchIterDataset``), so they have grain's checkpoint protocol; ``TrainIterator``
is the ``CheckpointableIterator`` (jaxtrans.data.iterators) around it, with counts to log.

Every batch is a dict of int32 arrays of fixed shape (one jit compilation):
``source``, ``source_segments``, ``source_positions`` [rows, max_source_length];
``target_in``, ``target_out``, ``target_segments``, ``target_positions``
[rows, max_target_length]. Padding is PAD_ID with segment 0 and position 0. Source and
target of one pair share a segment id; target_out is shifted inside each pair, so packing
never leaks a token across pairs.

The iterator's state (``get_state``) is a small JSON-serialisable dict holding the
position of each shard the process runs; restoring the states of all processes
(``restore_states``) yields exactly the global batches an uninterrupted run would have made
next, whatever the number of processes.
"""

from typing import Any, NamedTuple

import grain
import grain.experimental
import numpy as np

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.data_shards import (
    ProcessRows,
    as_data_shards,
    merge_positions,
    process_parts,
    resplit_note,
)
from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs, local_batch_size
from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.records import PairSource, TranslationPair
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import Tokenizer
from jaxtrans.errors import UserError

SOURCE_KEYS = ("source", "source_segments", "source_positions")
TARGET_KEYS = ("target_in", "target_out", "target_segments", "target_positions")
BATCH_KEYS = SOURCE_KEYS + TARGET_KEYS

# Pairs read and tokenised together: amortises per-call overhead; part of no state.
CHUNK_PAIRS = 256

# Status of a tokenised pair; only OK and TRUNCATED pairs reach the batches.
OK, TRUNCATED, TOO_LONG, MALFORMED = 0, 1, 2, 3
_STATUS_COUNTER = {TRUNCATED: "truncated", TOO_LONG: "too_long", MALFORMED: "malformed"}


class TokenizedPair(NamedTuple):
    """status, source ids + [EOS], target ids (BOS/EOS are added when rows are built)."""

    status: int
    source: list[int]
    target: list[int]


class PairTokenizer:
    """Tokenises a list of pairs at once and applies the length limits."""

    def __init__(
        self, tokenizer: Tokenizer, max_source_length: int, max_target_length: int, truncate: bool
    ):
        self.tokenizer = tokenizer
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.truncate = truncate

    def __call__(self, pairs: list[TranslationPair | None]) -> list[TokenizedPair]:
        present = [p for p in pairs if p is not None]
        sources = iter(self.tokenizer.encode_source_batch([p.source for p in present]))
        targets = iter(self.tokenizer.encode_target_batch([p.target for p in present]))
        return [
            TokenizedPair(MALFORMED, [], [])
            if p is None
            else self._limit(next(sources), next(targets))
            for p in pairs
        ]

    def _limit(self, source: list[int], target: list[int]) -> TokenizedPair:
        # EOS (source) and BOS/EOS (target) take one position each.
        status = OK
        if len(source) >= self.max_source_length or len(target) >= self.max_target_length:
            if not self.truncate:
                return TokenizedPair(TOO_LONG, [], [])
            source = source[: self.max_source_length - 1]
            target = target[: self.max_target_length - 1]
            status = TRUNCATED
        return TokenizedPair(status, [*source, vocab.EOS_ID], target)


class _BatchIterator(grain.DatasetIterator):
    """Reads pairs in order, tokenises them, packs them into rows and yields whole batches.

    State: the index of the next pair, the keys (pair indices) of the pairs in open rows and
    in closed rows not yet batched (re-read by index on restore), and the running counts.
    """

    def __init__(
        self,
        pairs: PairSource,
        order: ShuffledEpochs,
        tokenize: PairTokenizer,
        rows: int,
        packer: FirstFitPacker,
    ):
        super().__init__()
        self._pairs = pairs
        self._order = order
        self._tokenize = tokenize
        self._rows = rows
        self._packer = packer
        self._next_index = 0
        self._chunk: tuple[int, list[TokenizedPair]] = (-1, [])
        self._ready: list[list[int]] = []  # closed rows waiting for a batch
        self._cache: dict[int, TokenizedPair] = {}  # pairs in open and ready rows
        self._counts = {"read": 0, "malformed": 0, "too_long": 0, "truncated": 0}
        # Pairs read since the last usable one: a whole shard of them means none ever fits.
        self._unusable_run = 0

    def _read_one(self) -> None:
        index = self._next_index
        self._next_index += 1
        chunk, offset = divmod(index, CHUNK_PAIRS)
        if self._chunk[0] != chunk:
            positions = range(chunk * CHUNK_PAIRS, (chunk + 1) * CHUNK_PAIRS)
            self._chunk = (chunk, self._tokenize([self._pair_at(p) for p in positions]))
        pair = self._chunk[1][offset]
        self._counts["read"] += 1
        if pair.status != OK:
            self._counts[_STATUS_COUNTER[pair.status]] += 1
        if pair.status in (OK, TRUNCATED):
            self._unusable_run = 0
            self._cache[index] = pair
            self._ready += self._packer.add(index, len(pair.source), len(pair.target) + 1)
            return
        self._unusable_run += 1
        if self._unusable_run >= len(self._order.rows):
            limits = self._tokenize
            raise UserError(
                f"none of the {len(self._order.rows)} training pairs can be used: all are "
                f"longer than max_source_length={limits.max_source_length} / "
                f"max_target_length={limits.max_target_length} tokens (EOS/BOS included) "
                "or malformed; raise the limits or set --config.data.truncate=True"
            )

    def _pair_at(self, position: int) -> TranslationPair | None:
        return self._pairs[int(self._order[position])]

    def __next__(self) -> dict[str, np.ndarray]:
        while len(self._ready) < self._rows:
            self._read_one()
        rows, self._ready = self._ready[: self._rows], self._ready[self._rows :]
        return self._assemble(rows)

    def _assemble(self, rows: list[list[int]]) -> dict[str, np.ndarray]:
        """Keys of the pairs of each row -> the batch arrays (segments count from 1)."""
        max_source, max_target = self._packer.max_source, self._packer.max_target
        batch = {key: np.zeros((self._rows, max_source), np.int32) for key in SOURCE_KEYS}
        batch |= {key: np.zeros((self._rows, max_target), np.int32) for key in TARGET_KEYS}
        for r, keys in enumerate(rows):
            source, target_in, target_out = [], [], []
            source_segments, target_segments = [], []
            source_positions, target_positions = [], []
            for segment, key in enumerate(keys, start=1):
                pair = self._cache.pop(key)
                source += pair.source
                target_in += [vocab.BOS_ID, *pair.target]
                target_out += [*pair.target, vocab.EOS_ID]
                n, m = len(pair.source), len(pair.target) + 1
                source_segments += [segment] * n
                target_segments += [segment] * m
                source_positions += range(n)
                target_positions += range(m)
            n, m = len(source), len(target_in)
            batch["source"][r, :n] = source
            batch["source_segments"][r, :n] = source_segments
            batch["source_positions"][r, :n] = source_positions
            batch["target_in"][r, :m] = target_in
            batch["target_out"][r, :m] = target_out
            batch["target_segments"][r, :m] = target_segments
            batch["target_positions"][r, :m] = target_positions
        return batch

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
        self._cache = dict(zip(keys, self._tokenize([self._pair_at(k) for k in keys]), strict=True))
        lengths = {k: (len(p.source), len(p.target) + 1) for k, p in self._cache.items()}
        self._packer.restore(state["open_rows"], lengths)


class _PackedBatches(grain.IterDataset):
    """Pairs (random access) -> an iterable of this process's rows of the packed global
    batches (``ProcessRows`` over data shards of ``_BatchIterator``)."""

    def __init__(
        self,
        pairs: PairSource,
        data_config,
        seed: int,
        tokenize: PairTokenizer,
        process_index: int,
        process_count: int,
    ):
        super().__init__()
        self._pairs = pairs
        self._config = data_config
        self._seed = seed
        self._tokenize = tokenize
        self._process = (process_index, process_count)

    def _shard(self, shard: int, shards: int) -> _BatchIterator:
        """Data shard ``shard`` of ``shards``: pairs shard, shard + shards, ... packed into
        batches of batch_size // shards rows."""
        config, rows = self._config, self._config.batch_size // shards
        order = ShuffledEpochs(
            np.arange(shard, len(self._pairs), shards), self._seed, shuffle=config.shuffle
        )
        if config.pack:
            packer_args = dict(pool_rows=rows * config.pack_pool_batches)
        else:
            packer_args = dict(pool_rows=1, max_pairs_per_row=1)
        packer = FirstFitPacker(config.max_source_length, config.max_target_length, **packer_args)
        return _BatchIterator(self._pairs, order, self._tokenize, rows, packer)

    def __iter__(self) -> ProcessRows:
        # A fresh run has one data shard per process; restoring a state may change that.
        process_count = self._process[1]
        return ProcessRows(self._shard, self._config.batch_size, *self._process, process_count)


def padding_fraction(batch: dict[str, np.ndarray]) -> float:
    """Fraction of source and target positions in the batch that hold padding."""
    pads = np.count_nonzero(batch["source_segments"] == 0)
    pads += np.count_nonzero(batch["target_segments"] == 0)
    return float(pads / (batch["source_segments"].size + batch["target_segments"].size))


class TrainIterator(CheckpointableIterator):
    """Infinite iterator over training batches, checkpointable with get_state/set_state.

    ``stats()`` gives counts for logging, as of the last batch returned: ``pairs_read``
    (by this process, since the start of training), ``epoch`` (the pairs read and no longer
    waiting for a row of a batch, over the pairs of the data shards this process runs: 1.5
    = halfway through the second pass), ``pairs_dropped_too_long``,
    ``pairs_truncated``, ``pairs_malformed`` (skipped malformed lines), ``padding_fraction``
    (of the last batch) and ``mean_padding_fraction`` (over the batches since the previous
    ``stats()`` call, or since the iterator was created or restored: the training loop calls
    it once per log window, and windows restart at checkpoints, so a resumed run logs the
    same means as an uninterrupted one).
    """

    state_format = 2  # 1: one process's state, with its index and count (still restored)

    def __init__(
        self,
        pipeline: grain.DatasetIterator,
        identity: dict[str, Any],
        process_index: int,
        process_count: int,
    ):
        super().__init__(pipeline, identity)
        self._process = (process_index, process_count)
        self._reset_padding_stats()

    def _reset_padding_stats(self) -> None:
        self._last_padding = float("nan")
        self._padding_sum = 0.0
        self._batches = 0

    def __next__(self) -> dict[str, np.ndarray]:
        batch = super().__next__()
        self._last_padding = padding_fraction(batch)
        self._padding_sum += self._last_padding
        self._batches += 1
        return batch

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue where the iterator that made ``state`` was (same process count)."""
        self._restore([as_data_shards(state)], all_shards=False)

    def restore_states(
        self, states: list[dict[str, Any]], process_index: int, process_count: int
    ) -> str | None:
        """Continue from the states of all processes of the saving run, on any number of
        processes (jaxtrans.data.data_shards); returns a line saying so if they differ."""
        assert (process_index, process_count) == self._process
        states = [as_data_shards(state) for state in states]
        self._restore(states, all_shards=True)
        return resplit_note(len(states), *self._process, states[0]["pipeline"]["shards"])

    def _restore(self, states: list[dict[str, Any]], all_shards: bool) -> None:
        for state in states:
            self._check_identity(state)
        shards = states[0]["pipeline"]["shards"]
        parts = process_parts(*self._process, self._identity["batch_size"], shards)
        needed = range(shards) if all_shards else [part.shard for part in parts]
        merged = merge_positions([s["pipeline"] for s in states], list(needed), self.state_name)
        self._pipeline.set_state(merged)
        self._reset_padding_stats()

    def stats(self) -> dict[str, float]:
        state = self._pipeline.get_state()
        positions = state["positions"]
        counts = {
            key: sum(p["counts"][key] for p in positions.values())
            for key in ("read", "too_long", "truncated", "malformed")
        }
        # Pairs read but still waiting in rows, not yet in a batch, are not past.
        waiting = sum(
            len(row) for p in positions.values() for row in p["open_rows"] + p["ready_rows"]
        )
        num_pairs, shards = self._identity["num_pairs"], state["shards"]
        shard_pairs = sum(len(range(int(s), num_pairs, shards)) for s in positions)
        stats = {
            "pairs_read": counts["read"],
            "epoch": (counts["read"] - waiting) / shard_pairs,
            "pairs_dropped_too_long": counts["too_long"],
            "pairs_truncated": counts["truncated"],
            "pairs_malformed": counts["malformed"],
            "padding_fraction": self._last_padding,
            "mean_padding_fraction": self._padding_sum / max(self._batches, 1),
        }
        self._padding_sum, self._batches = 0.0, 0
        return stats


def train_iterator(
    data_config, tokenizer: Tokenizer, *, seed: int, process_index: int = 0, process_count: int = 1
) -> TrainIterator:
    """Batches of this process's shard of the training data, forever (see module doc).

    Arrays are numpy int32 of LOCAL shape [batch_size // process_count, length]: rows
    [p, p + 1) * batch_size // process_count of the global batch; the training loop
    assembles the global batch over the mesh (e.g. with
    ``jax.make_array_from_process_local_data``).
    """
    local_batch_size(data_config.batch_size, process_count)  # a one-line error if uneven
    max_source, max_target = data_config.max_source_length, data_config.max_target_length
    if min(max_source, max_target) < 2:
        raise UserError("max_source_length and max_target_length must be at least 2")
    if data_config.pack and data_config.pack_pool_batches < 1:
        raise UserError(
            f"--config.data.pack_pool_batches={data_config.pack_pool_batches}: use a whole "
            "number >= 1"
        )
    pairs = training_pairs(data_config)
    if len(pairs) < process_count:
        raise UserError(
            f"{len(pairs)} training pairs cannot be sharded over {process_count} processes"
        )
    seed = int(seed) % 2**32
    tokenize = PairTokenizer(tokenizer, max_source, max_target, data_config.truncate)
    batches = _PackedBatches(pairs, data_config, seed, tokenize, process_index, process_count)
    if data_config.prefetch_batches > 0:
        batches = grain.experimental.ThreadPrefetchIterDataset(
            batches, prefetch_buffer_size=data_config.prefetch_batches
        )
    # What must match for a saved state to mean the same stream of global batches.
    identity = {
        "seed": seed,
        "num_pairs": len(pairs),
        "batch_size": data_config.batch_size,
        "max_source_length": max_source,
        "max_target_length": max_target,
        "pack": bool(data_config.pack),
    }
    return TrainIterator(iter(batches), identity, process_index, process_count)
