"""Batches made in grain worker processes: the same batches whatever the number of workers,
exact resume from a state saved at any batch with another number, and a worker that dies
is a one-line error naming it rather than a hang."""

import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.id_shards import IdShards
from jaxtrans.data.translation.pipeline import BATCH_KEYS, train_iterator
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.errors import TrainingStopped

pytestmark = pytest.mark.slow  # each iterator with workers spawns processes (seconds)


def demo_config(**overrides):
    data = get_data_config()
    data.update(demo_train_size=1500, demo_dev_size=50, demo_test_size=50, vocab_size=300)
    data.update(batch_size=8, max_source_length=32, max_target_length=32, prefetch_batches=2)
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    data = demo_config()
    tokenizer = load_or_train_tokenizer(data, str(tmp_path_factory.mktemp("run")))
    return IdShards.from_pairs(training_pairs(data), tokenizer)


def batches(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_same(expected, got):
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(a[key], b[key])


def resumed(state, shards, workers, n):
    iterator = train_iterator(demo_config(workers=workers), seed=1, shards=shards)
    iterator.restore_states([state], 0, 1)
    try:
        return batches(iterator, n)
    finally:
        iterator.close()


def test_a_state_saved_with_two_workers_resumes_the_same_batches_with_any_count(shards):
    run = train_iterator(demo_config(workers=2), seed=1, shards=shards)
    first = batches(run, 5)  # an odd count: the second worker's turn is next
    state = run.get_state()
    expected = batches(run, 6)
    run.close()
    assert sum(int(b["source_segments"].max(axis=1).sum()) for b in first + expected) > 0
    for workers in (0, 1, 2, 3):  # 0: in this process; 3 does not divide 2 streams: 2 run
        assert_same(expected, resumed(state, shards, workers, 6))


def test_two_workers_make_the_batches_of_two_streams_in_this_process(shards):
    """The worker processes change who makes the batches, not the batches: the same as
    two packing streams run in turn in this process (restored from the start state)."""
    with_workers = train_iterator(demo_config(workers=2), seed=4, shards=shards)
    start = with_workers.get_state()
    made = batches(with_workers, 7)
    with_workers.close()
    assert start["pipeline"]["positions"]["0"]["streams"] == 2
    assert_same(made, resumed_in_process(start, shards, 7))


def resumed_in_process(state, shards, n):
    iterator = train_iterator(demo_config(workers=0), seed=4, shards=shards)
    iterator.restore_states([state], 0, 1)
    return batches(iterator, n)


def test_a_state_of_one_stream_resumes_with_workers_on_one(shards):
    """A run made in-process (one stream, the layout older runs saved) resumed with
    workers: one worker runs its one stream, and the batches continue unchanged."""
    alone = train_iterator(demo_config(workers=0), seed=2, shards=shards)
    batches(alone, 3)
    state = alone.get_state()
    expected = batches(alone, 4)
    assert "streams" not in state["pipeline"]["positions"]["0"]
    iterator = train_iterator(demo_config(workers=2), seed=2, shards=shards)
    iterator.restore_states([state], 0, 1)
    assert_same(expected, batches(iterator, 4))
    iterator.close()


def test_a_killed_worker_is_a_one_line_error_naming_it(shards):
    iterator = train_iterator(demo_config(workers=2), seed=1, shards=shards)
    next(iterator)
    workers = multiprocessing.active_children()
    assert workers
    os.kill(workers[0].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(TrainingStopped, match=r"^data worker process \d of 2 \(pid \d+\) died"):
        for _ in range(200):
            next(iterator)
    assert time.monotonic() - start < 60
    iterator.close()
