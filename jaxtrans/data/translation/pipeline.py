"""The training input pipeline: shard, shuffle, read ids, filter, pack, batch, prefetch.

    pairs s, s + S, s + 2S, ...        data shard s of S (random access, from the id shards
                                       of jaxtrans.data.translation.id_shards)
    -> a new permutation of the shard each epoch (seeded), repeated forever
    -> K packing streams: stream j reads positions j, j + K, j + 2K, ... of that order
    -> drop (or truncate) pairs over max_source_length / max_target_length, counting them
    -> pack pairs first-fit into rows (segment ids 1, 2, ...; positions restart per pair),
       or one pair a row (jaxtrans.data.translation.packed_rows)
    -> the shard's batch b (batch_size // S rows) is stream b % K's next batch
    -> the global batch is the shards' batches one after another, and process p of P takes
       rows [p, p + 1) * batch_size // P of it (jaxtrans.data.data_shards)
    -> made in ``data.workers`` grain worker processes (jaxtrans.data.translation.
       worker_batches), or in this process and prefetched in a thread (workers = 0)

S, the number of data shards, is the process count of the run's first start: then process
p runs shard p. A run resumed on another number of processes runs the same S shards split
anew, so its global batches are those the original run would have made. K, the number of
packing streams, is the worker count of the run's first start (1 with workers = 0, which
is the order of the runs before streams existed); it too stays with the run, and a run
resumed with another number of workers makes the same batches (the workers run the
streams between them).

The iterator's state (``get_state``) is a small JSON-serialisable dict holding the
position of each stream of each shard the process runs; restoring the states of all
processes (``restore_states``) yields exactly the global batches an uninterrupted run
would have made next, whatever the number of processes and of worker processes.
"""

import os
from typing import Any

import grain
import grain.experimental
import numpy as np

from jaxtrans.data.data_shards import (
    ProcessRows,
    as_data_shards,
    merge_positions,
    process_parts,
    resplit_note,
)
from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs, local_batch_size
from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.translation.id_shards import IdShards
from jaxtrans.data.translation.packed_rows import BATCH_KEYS, Limits, PackedStream
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.worker_batches import ShardStreams, WorkerBatches, stream_states
from jaxtrans.errors import UserError

__all__ = ["BATCH_KEYS", "TrainIterator", "default_workers", "train_iterator"]

# Worker processes of data.workers = -1: one a core, at most this many.
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """data.workers = -1: the cores this process may use, at most MAX_DEFAULT_WORKERS."""
    return min(len(os.sched_getaffinity(0)), MAX_DEFAULT_WORKERS)


class _PackedBatches(grain.IterDataset):
    """Id shards -> an iterable of this process's rows of the packed global batches
    (``ProcessRows`` over data shards of ``ShardStreams`` of ``PackedStream``); in worker
    ``worker`` of ``workers``, only the batches that worker makes."""

    def __init__(
        self,
        shards: IdShards,
        data_config: dict[str, Any],
        seed: int,
        process: tuple[int, int],
        streams: int,
        worker: tuple[int, int] = (0, 1),
        start: dict[str, Any] | None = None,
    ):
        super().__init__()
        self._shards = shards
        self._config = data_config
        self._seed = seed
        self._process = process
        self.streams = streams
        self._worker = worker
        self._start = start

    def for_worker(
        self, worker: int, workers: int, start: dict[str, Any] | None
    ) -> "_PackedBatches":
        """Worker ``worker`` of ``workers``'s batches, from the ``ProcessRows`` state
        ``start`` (None: the beginning)."""
        streams = self.streams
        if start is not None:
            streams = next(iter(start["positions"].values())).get("streams", 1)
        args = (self._shards, self._config, self._seed, self._process, streams)
        return _PackedBatches(*args, worker=(worker, workers), start=start)

    def _stream(self, shard: int, shards: int, stream: int, streams: int) -> PackedStream:
        """Stream ``stream`` of ``streams`` of data shard ``shard`` of ``shards``."""
        config, rows = self._config, self._config["batch_size"] // shards
        order = ShuffledEpochs(
            range(shard, len(self._shards), shards), self._seed, shuffle=config["shuffle"]
        )
        limits = Limits(
            config["max_source_length"], config["max_target_length"], config["truncate"]
        )
        if config["pack"]:
            packer_args = dict(pool_rows=rows * config["pack_pool_batches"])
        else:
            packer_args = dict(pool_rows=1, max_pairs_per_row=1)
        packer = FirstFitPacker(limits.max_source, limits.max_target, **packer_args)
        return PackedStream(self._shards, order, limits, rows, packer, stream, streams)

    def _shard(self, shard: int, shards: int) -> ShardStreams:
        make = lambda j, k: self._stream(shard, shards, j, k)  # noqa: E731
        return ShardStreams(make, self.streams, *self._worker)

    def __iter__(self) -> ProcessRows:
        # A fresh run has one data shard per process; restoring a state may change that.
        process_count = self._process[1]
        rows = ProcessRows(self._shard, self._config["batch_size"], *self._process, process_count)
        if self._start is not None:
            rows.set_state(self._start)
        return rows


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
        streams = [p for position in positions.values() for p in stream_states(position)]
        counts = {
            key: sum(p["counts"][key] for p in streams)
            for key in ("read", "too_long", "truncated", "malformed")
        }
        # Pairs read but still waiting in rows, not yet in a batch, are not past.
        waiting = sum(len(row) for p in streams for row in p["open_rows"] + p["ready_rows"])
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


def resolved_workers(data_config) -> int:
    """The worker processes of ``data.workers`` (-1: ``default_workers()``)."""
    workers = data_config.get("workers", 0)
    if not isinstance(workers, int) or workers < -1:
        raise UserError(
            f"--config.data.workers={workers!r}: use a whole number of worker processes, "
            "0 (batches made in the training process) or -1 (one a core)"
        )
    return default_workers() if workers == -1 else workers


def train_iterator(
    data_config,
    tokenizer=None,
    *,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    shards: IdShards | None = None,
) -> TrainIterator:
    """Batches of this process's shard of the training data, forever (see module doc).

    ``shards``: the run's id shards (``ensure_id_shards``); without them the training
    pairs are tokenised into memory with ``tokenizer`` first.

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
    workers = resolved_workers(data_config)
    if shards is None:
        shards = IdShards.from_pairs(training_pairs(data_config), tokenizer)
    if len(shards) < process_count:
        raise UserError(
            f"{len(shards)} training pairs cannot be sharded over {process_count} processes"
        )
    seed = int(seed) % 2**32
    keys = ("batch_size", "shuffle", "max_source_length", "max_target_length", "truncate",
            "pack", "pack_pool_batches")  # fmt: skip
    settings = {key: data_config[key] for key in keys}
    process = (process_index, process_count)
    batches = _PackedBatches(shards, settings, seed, process, streams=max(workers, 1))
    if workers:
        pipeline = WorkerBatches(batches, workers, max(data_config.prefetch_batches, 1))
    else:
        if data_config.prefetch_batches > 0:
            batches = grain.experimental.ThreadPrefetchIterDataset(
                batches, prefetch_buffer_size=data_config.prefetch_batches
            )
        pipeline = iter(batches)
    # What must match for a saved state to mean the same stream of global batches.
    identity = {
        "seed": seed,
        "num_pairs": len(shards),
        "batch_size": data_config.batch_size,
        "max_source_length": max_source,
        "max_target_length": max_target,
        "pack": bool(data_config.pack),
    }
    return TrainIterator(pipeline, identity, process_index, process_count)
