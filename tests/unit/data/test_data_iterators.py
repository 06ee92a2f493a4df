"""The checkpointable iterator every training pipeline returns: its state, the check of
the settings a state was made with, stats, and states saved by the 0996837 version."""

import json
import pathlib
import subprocess
import sys

import grain
import ml_collections
import numpy as np
import pytest
from paths import FIXTURES, HELPERS, REPO

from jaxtrans.data.bert import bert_pipeline
from jaxtrans.data.data_shards import as_data_shards
from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs, local_batch_size
from jaxtrans.data.tokenizers.bert_tokenizer import (
    MODEL_FILE,
    TOKENIZER_DIR,
    SentencePieceBertTokenizer,
)
from jaxtrans.data.translation.pipeline import train_iterator
from jaxtrans.data.translation.tokenizer import load_tokenizer
from jaxtrans.errors import UserError

OLD_WORKDIRS = pathlib.Path(FIXTURES) / "workdirs_0996837"
IDENTITY = {"seed": 3, "process_index": 0, "process_count": 2, "rows": 4}


def numbers(identity=None) -> CheckpointableIterator:
    """Batches of two of 0, 1, 2, ... in a fresh order each epoch of ten."""
    dataset = grain.MapDataset.source(ShuffledEpochs(np.arange(10), seed=3))
    return CheckpointableIterator(iter(dataset.batch(2).to_iter_dataset()), identity)


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_state_holds_the_format_the_settings_and_the_pipeline_position():
    iterator = numbers(IDENTITY)
    take(iterator, 3)
    assert iterator.get_state() == {"format": 1, **IDENTITY, "pipeline": {"next_index": 3}}


def test_state_without_settings_is_the_pipeline_position_alone():
    iterator = numbers()
    take(iterator, 3)
    assert iterator.get_state() == {"next_index": 3}


@pytest.mark.parametrize("identity", [IDENTITY, None])
def test_restored_iterator_yields_what_the_saved_one_yields_next(identity):
    iterator = numbers(identity)
    take(iterator, 4)
    state = json.loads(json.dumps(iterator.get_state()))
    expected = take(iterator, 12)  # crosses two epochs
    restored = numbers(identity)
    restored.set_state(state)
    np.testing.assert_array_equal(np.stack(take(restored, 12)), np.stack(expected))


@pytest.mark.parametrize("key", list(IDENTITY))
def test_state_made_with_other_settings_is_one_line_naming_the_setting(key):
    state = numbers(IDENTITY).get_state()
    changed = {**IDENTITY, key: IDENTITY[key] + 1}
    with pytest.raises(UserError) as error:
        numbers(changed).set_state(state)
    message = str(error.value)
    assert message == (
        f"the saved data-pipeline state was made with {key}={IDENTITY[key]}, "
        f"this run has {key}={IDENTITY[key] + 1}; resume with the same settings"
    )


def test_state_of_an_unknown_format_is_a_user_error():
    state = {**numbers(IDENTITY).get_state(), "format": 2}
    with pytest.raises(UserError, match="unknown format"):
        numbers(IDENTITY).set_state(state)


def test_a_state_is_a_copy_that_later_batches_do_not_change():
    iterator = numbers(IDENTITY)
    state = iterator.get_state()
    take(iterator, 2)
    assert state["pipeline"] == {"next_index": 0}


def test_base_iterator_has_no_stats():
    assert numbers(IDENTITY).stats() == {}


def test_each_epoch_is_a_new_permutation_and_unshuffled_is_table_order():
    rows = np.arange(100, 107)
    shuffled = ShuffledEpochs(rows, seed=5)
    epochs = [[int(shuffled[e * 7 + i]) for i in range(7)] for e in range(3)]
    for e, epoch in enumerate(epochs):
        expected = rows[np.random.default_rng([5, e]).permutation(7)]
        assert epoch == expected.tolist()
    assert epochs[0] != epochs[1] and sorted(epochs[0]) == rows.tolist()
    in_order = ShuffledEpochs(rows, seed=5, shuffle=False)
    assert [int(in_order[i]) for i in range(14)] == rows.tolist() * 2


def test_local_batch_size_splits_the_global_batch_evenly():
    assert local_batch_size(32, 4) == 8
    with pytest.raises(UserError, match="batch_size=30 is not divisible by the 4 processes"):
        local_batch_size(30, 4)


# ---------------------------------------------------------------------------------------
# The training pipelines, with the states the 0996837 version saved in its checkpoints.


def old_run(name: str) -> tuple[ml_collections.ConfigDict, dict]:
    """The run config of an old workdir and the data state of its checkpoint 4."""
    workdir = OLD_WORKDIRS / name
    config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text()))
    meta = json.loads((workdir / "checkpoints" / "4" / "meta" / "metadata").read_text())
    return config, meta["data"]


def translation_iterator(config):
    tokenizer = load_tokenizer(str(OLD_WORKDIRS / "translation"))
    return train_iterator(config.data, tokenizer, seed=config.seed)


def bert_iterator(config):
    model = OLD_WORKDIRS / "bert_pretraining" / TOKENIZER_DIR / MODEL_FILE
    documents = bert_pipeline.pretraining_documents(config.data, "train")
    return bert_pipeline.pretraining_train_iterator(
        config.data, SentencePieceBertTokenizer(model), documents, seed=config.seed
    )


PIPELINES = {"translation": translation_iterator, "bert_pretraining": bert_iterator}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_four_batches_leave_the_state_the_old_version_saved_after_four_steps(name):
    """The same position; the translation state has the data-shard layout (format 2) now."""
    config, saved = old_run(name)
    iterator = PIPELINES[name](config)
    take(iterator, 4)
    if name == "translation":
        saved = json.loads(json.dumps(as_data_shards(saved), sort_keys=True))
        assert json.loads(json.dumps(iterator.get_state(), sort_keys=True)) == saved
    else:
        assert json.dumps(iterator.get_state()) == json.dumps(saved)  # keys, order and values
    iterator.close()


@pytest.mark.parametrize("name", list(PIPELINES))
def test_a_state_saved_by_the_old_version_resumes_the_uninterrupted_stream(name):
    config, saved = old_run(name)
    uninterrupted = PIPELINES[name](config)
    take(uninterrupted, 4)
    resumed = PIPELINES[name](config)
    assert resumed.restore_states([saved], 0, 1) is None
    if name == "translation":
        saved = as_data_shards(saved)
    assert json.loads(json.dumps(resumed.get_state())) == json.loads(json.dumps(saved))
    for want, got in zip(take(uninterrupted, 3), take(resumed, 3), strict=True):
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(want[key], got[key])
    uninterrupted.close()
    resumed.close()


def test_bert_state_made_with_another_process_layout_names_it():
    config, saved = old_run("bert_pretraining")
    with pytest.raises(UserError) as error:
        bert_iterator(config).set_state({**saved, "process_count": 2})
    assert str(error.value) == (
        "the saved BERT data-pipeline state was made with process_count=2, "
        "this run has process_count=1; resume with the same data and settings"
    )


def test_every_training_iterator_has_stats():
    translation = translation_iterator(old_run("translation")[0])
    bert = bert_iterator(old_run("bert_pretraining")[0])
    next(translation), next(bert)
    stats = translation.stats()
    assert stats["pairs_read"] > 0 and 0 < stats["padding_fraction"] < 1
    assert all(isinstance(float(value), float) for value in stats.values())
    assert bert.stats() == {}


def test_a_bert_iterator_left_open_exits_without_errors_from_its_threads():
    # Its reader and prefetch threads are stopped before interpreter teardown.
    program = (
        f"import json, sys; sys.path[:0] = [{HELPERS!r}, {str(pathlib.Path(__file__).parent)!r}]\n"
        "from test_data_iterators import bert_iterator, old_run\n"
        "iterator = bert_iterator(old_run('bert_pretraining')[0]); next(iterator)\n"
    )
    root = pathlib.Path(REPO)
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
