"""What every training pipeline shares: the order it reads in, its share of the batch, and
the checkpointable iterator the training loop holds.

The loop makes four calls on a training iterator:

    batch = next(iterator)          a dict of numpy arrays, forever
    state = iterator.get_state()    a JSON-serialisable dict, saved with the checkpoint
                                    (each process saves its own)
    iterator.restore_states(states, process_index, process_count)
                                    continue where the saving run was, from the states
                                    of all its processes (in process order)
    iterator.stats()                {name: float} for the log line (empty if none)

(``set_state(state)`` continues exactly where the one iterator that made ``state`` was.)

A pipeline is a grain ``DatasetIterator``; ``CheckpointableIterator`` wraps it. Its
``identity`` holds the settings that decide the stream of batches (seed, process layout,
sizes); a saved state records them, and a state made with other settings is refused, since
it would resume a different stream. Such a pipeline resumes only on as many processes as
it was saved with; the translation pipeline (jaxtrans.data.translation.pipeline) re-splits its data
shards for any number.
"""

import copy
import weakref
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from jaxtrans.errors import UserError

# Version of the {"format", **identity, "pipeline"} state; bump it if the layout changes.
STATE_FORMAT = 1


class ShuffledEpochs(Sequence):
    """Rows of a table in a fresh random order each epoch, forever: item i is row
    ``permutation(epoch)[i % n]`` with ``epoch = i // n`` (table order if not ``shuffle``).

    Random access by index keeps a pipeline resumable from a single counter. (Grain's
    ``shuffle`` computes every index separately, at about ten times the cost of making
    the example; one numpy permutation per epoch is nearly free.)
    """

    def __init__(self, rows: Sequence, seed: int, shuffle: bool = True):
        self.rows = rows
        self.seed = seed
        self.shuffle = shuffle
        self._cache: tuple[int, np.ndarray] = (-1, np.arange(len(rows)))
        self._row_array: np.ndarray | None = None  # rows as integers, for ``take``

    def __len__(self) -> int:
        return 2**62  # practically infinite: training stops by step count

    def __getitem__(self, index: int):
        epoch, i = divmod(int(index), len(self.rows))
        cached_epoch, order = self._cache  # one read: reader threads share the cache
        if self.shuffle and epoch != cached_epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
            self._cache = (epoch, order)
        return self.rows[order[i]]

    def take(self, indices: np.ndarray) -> np.ndarray:
        """Items ``indices`` (int64 array) at once, as an int64 array (rows must be integers)."""
        epochs, within = np.divmod(np.asarray(indices, np.int64), len(self.rows))
        if self._row_array is None:
            self._row_array = np.asarray(self.rows, np.int64)
        rows = self._row_array
        if not self.shuffle:
            return rows[within]
        out = np.empty(len(within), np.int64)
        for epoch in np.unique(epochs):
            where = epochs == epoch
            out[where] = rows[self._permutation(int(epoch))[within[where]]]
        return out

    def _permutation(self, epoch: int) -> np.ndarray:
        cached_epoch, order = self._cache
        if epoch != cached_epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
            self._cache = (epoch, order)
        return order


def local_batch_size(batch_size: int, process_count: int) -> int:
    """Rows per process: the global batch split evenly."""
    if batch_size % process_count:
        raise UserError(
            f"--config.data.batch_size={batch_size} is not divisible by the "
            f"{process_count} processes; choose a multiple of {process_count}"
        )
    return batch_size // process_count


def _close_once(pipeline: grain.DatasetIterator) -> None:
    pipeline.close()
    # grain's __del__ closes again, which fails during interpreter teardown; once is enough.
    pipeline.close = lambda: None


class CheckpointableIterator:
    """Infinite iterator over a grain pipeline's batches, checkpointable (see module doc).

    With an ``identity`` the state is ``{"format": 1, **identity, "pipeline": grain's
    state}`` and ``set_state`` raises a one-line UserError naming the first setting that
    differs. Without one (``None``) the state is the pipeline's own, unchecked.

    Subclasses name their state in the errors (``state_name``) and add ``stats()``.
    """

    state_name = "data-pipeline"
    resume_advice = "resume with the same settings"
    state_format = STATE_FORMAT

    def __init__(self, pipeline: grain.DatasetIterator, identity: dict[str, Any] | None = None):
        self._pipeline = pipeline
        self._identity = None if identity is None else dict(identity)
        # Stop prefetch and reader threads when dropped or at exit, before interpreter teardown.
        self._close = weakref.finalize(self, _close_once, pipeline)

    def __iter__(self) -> "CheckpointableIterator":
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._pipeline)

    def get_state(self) -> dict[str, Any]:
        """A JSON-serialisable dict; store it next to the model checkpoint."""
        pipeline = copy.deepcopy(self._pipeline.get_state())
        if self._identity is None:
            return pipeline
        return {"format": self.state_format, **self._identity, "pipeline": pipeline}

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly where the iterator that produced ``state`` was."""
        if self._identity is not None:
            self._check_identity(state)
            state = state["pipeline"]
        self._pipeline.set_state(copy.deepcopy(state))

    def restore_states(
        self, states: list[dict[str, Any]], process_index: int, process_count: int
    ) -> str | None:
        """Continue from a checkpoint's states, one per process of the run that saved it
        (a checkpoint of an older layout has process 0's only). Here each process takes its
        own, so the process count must be the saving run's: a one-line UserError otherwise,
        the same on every process. Returns a line to show, or None."""
        saved = len(states) if len(states) > 1 else states[0].get("process_count", 1)
        if saved != process_count:
            raise UserError(
                f"the checkpoint's {self.state_name} state was saved by {saved} processes, "
                f"this run has {process_count}; this pipeline resumes only on {saved} processes"
            )
        if len(states) < process_count:
            raise UserError(
                f"the checkpoint holds the {self.state_name} state of process 0 only (an "
                f"older jaxtrans saved no other); resume from a newer checkpoint, or use a "
                "new --workdir"
            )
        self.set_state(states[process_index])
        return None

    def _check_identity(self, state: dict[str, Any]) -> None:
        """UserError unless ``state`` was made with this iterator's format and settings."""
        if state.get("format") != self.state_format:
            raise UserError(f"the saved {self.state_name} state has an unknown format")
        for key, value in self._identity.items():
            if state.get(key) != value:
                raise UserError(
                    f"the saved {self.state_name} state was made with {key}={state.get(key)}, "
                    f"this run has {key}={value}; {self.resume_advice}"
                )

    def stats(self) -> dict[str, float]:
        """Counts for the log line; none here."""
        return {}

    def close(self) -> None:
        """Stops the pipeline's threads."""
        self._close()
