"""Packing streams and the grain worker processes that run them.

A data shard's batches come from K packing streams in turn: batch b is stream b % K's next
batch (``ShardStreams``). K is fixed when a run starts (its worker count), so the batches
do not depend on how many processes make them. With W worker processes (W divides K),
worker w runs the streams j = w, w + W, ... of every data shard the training process
runs, so it makes the process's batches b = w, w + W, ...; ``WorkerBatches`` takes them
from the workers in turn. Each worker is a grain ``ProcessPrefetchIterDataset`` (its own
process, spawned, with a buffer of batches).

State (the same whoever made the batches): the ``ProcessRows`` layout, each shard's
position being its single stream's state when K = 1 (the layout of runs made before
streams existed) and ``{"streams": K, "next": j, "states": {"j": stream state}}``
otherwise. A run resumed with W' workers runs the largest W <= W' that divides K.
"""

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import grain
import numpy as np
from absl import flags

# One grain worker process with a buffer of elements and its element's state. grain's
# public ``mp_prefetch`` wraps W of these in an interleave whose state is tied to W; the
# streams above need the workers' states one by one, to resume on another count.
from grain._src.python.dataset.transformations.process_prefetch import (
    ProcessPrefetchIterDataset,
)

from jaxtrans.errors import TrainingStopped


def stream_states(position: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream states of one shard's saved position (either layout)."""
    if "streams" not in position:
        return [position]
    return [position["states"][key] for key in sorted(position["states"], key=int)]


def _streams_of(position: dict[str, Any]) -> int:
    return position.get("streams", 1)


class ShardStreams(grain.DatasetIterator):
    """One data shard's batches from ``streams`` packing streams in turn; in worker
    ``worker`` of ``workers`` only its streams and batches (see the module docstring).
    ``make_stream(j, K)`` makes stream j of K."""

    def __init__(
        self,
        make_stream: Callable[[int, int], grain.DatasetIterator],
        streams: int,
        worker: int = 0,
        workers: int = 1,
    ):
        super().__init__()
        self._make_stream = make_stream
        self._worker = (worker, workers)
        self._build(streams)

    def _build(self, streams: int) -> None:
        worker, workers = self._worker
        assert streams % workers == 0, (streams, workers)
        self.streams = streams
        self._iterators = {
            j: self._make_stream(j, streams) for j in range(worker, streams, workers)
        }
        self._next = worker

    def __next__(self) -> dict[str, np.ndarray]:
        batch = next(self._iterators[self._next])
        self._next = (self._next + self._worker[1]) % self.streams
        return batch

    def get_state(self) -> dict[str, Any]:
        if self.streams == 1:
            return self._iterators[0].get_state()
        states = {str(j): it.get_state() for j, it in self._iterators.items()}
        return {"streams": self.streams, "next": self._next, "states": states}

    def set_state(self, state: dict[str, Any]) -> None:
        if "streams" not in state:
            state = {"streams": 1, "next": 0, "states": {"0": state}}
        if state["streams"] != self.streams:
            self._build(state["streams"])
        for j, iterator in self._iterators.items():
            iterator.set_state(state["states"][str(j)])
        # This worker's first stream at or after the shard's next one (W divides K).
        worker, workers = self._worker
        self._next = (state["next"] + (worker - state["next"]) % workers) % self.streams


def exit_with_parent(parent: int) -> None:
    """(In a worker) Exit as soon as the training process ``parent`` is gone: a worker whose
    parent was killed (kill -9, out of memory) would otherwise wait forever to hand over
    its next batch."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def usable_workers(workers: int, streams: list[int]) -> int:
    """The most worker processes, at most ``workers``, that divide every shard's streams."""
    return max(w for w in range(1, workers + 1) if all(k % w == 0 for k in streams))


class WorkerBatches(grain.DatasetIterator):
    """A ``ProcessRows`` dataset's batches made in worker processes, taken in turn.

    ``dataset.for_worker(w, W, state)`` is the dataset of worker w's batches from ``state``
    (None: the beginning), ``dataset.streams`` the streams of a new run. The workers start
    on the first batch (again after ``set_state``), as many as the streams allow.
    """

    def __init__(self, dataset, workers: int, buffer_size: int):
        super().__init__()
        self._dataset = dataset
        self._workers = workers
        self._buffer_size = buffer_size
        self._state: dict[str, Any] | None = None  # to start from; None: the beginning
        self._iterators: list[grain.DatasetIterator] = []
        self._turn = 0

    def _start(self) -> None:
        if not flags.FLAGS.is_parsed():  # grain reads its absl flags' defaults
            flags.FLAGS.mark_as_parsed()
        state = self._state
        if state is None:
            streams, first_next = [self._dataset.streams], 0
        else:
            positions = list(state["positions"].values())
            streams = [_streams_of(p) for p in positions]
            first_next = positions[0].get("next", 0)
        count = usable_workers(self._workers, streams)
        # Each worker starts from the state itself (rather than grain's set_state, which
        # drops an error raised before it is done).
        self._iterators = [
            iter(
                ProcessPrefetchIterDataset(
                    self._dataset.for_worker(w, count, state),
                    buffer_size=self._buffer_size,
                    worker_init_fn=functools.partial(exit_with_parent, os.getpid()),
                )
            )
            for w in range(count)
        ]
        for iterator in self._iterators:  # boot them all now, not each at its first batch
            getattr(iterator, "start_prefetch", lambda: None)()
        self._turn = first_next % count

    def __next__(self) -> dict[str, np.ndarray]:
        if not self._iterators:
            self._start()
        turn = self._turn
        # grain forgets its process when it fails; its pid names it in the error.
        process = getattr(self._iterators[turn], "_prefetch_process", None)
        try:
            batch = next(self._iterators[turn])
        except RuntimeError as error:
            if "terminated unexpectedly" not in str(error):
                raise
            pid = f" (pid {process.pid})" if process is not None else ""
            raise TrainingStopped(
                f"data worker process {turn} of {len(self._iterators)}{pid} died "
                f"({str(error).split('. ')[0].split(' with ')[-1]}), maybe killed for memory; "
                "rerun the same command to resume from the last checkpoint, with fewer "
                "workers (--config.data.workers) if memory is short"
            ) from None
        self._turn = (turn + 1) % len(self._iterators)
        self._state = None
        return batch

    def get_state(self) -> dict[str, Any]:
        if not self._iterators:
            return self._state or iter(self._dataset.for_worker(0, 1, None)).get_state()
        states = [iterator.get_state() for iterator in self._iterators]
        merged = dict(states[0])
        positions = {}
        for shard, position in states[0]["positions"].items():
            if "streams" not in position:  # one stream, so one worker
                positions[shard] = position
                continue
            # Each stream's state from the worker that runs it.
            union = {}
            for w, state in enumerate(states):
                for j, stream in state["positions"][shard]["states"].items():
                    if int(j) % len(states) == w:
                        union[j] = stream
            following = states[self._turn]["positions"][shard]["next"]
            positions[shard] = {**position, "next": following, "states": union}
        merged["positions"] = positions
        return merged

    def set_state(self, state: dict[str, Any]) -> None:
        self.close()
        self._state = state

    def close(self) -> None:
        for iterator in self._iterators:
            iterator.close()
        self._iterators = []
