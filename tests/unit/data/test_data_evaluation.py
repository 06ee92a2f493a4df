"""Evaluation batches: every sentence once, in order, padding rows marked."""

import numpy as np
import pytest

from jaxtrans.data.records import TranslationPair
from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.evaluation import eval_batches
from jaxtrans.data.translation.sources import load_split
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer


def small_demo_config():
    data = get_data_config()
    data.update(dict(demo_train_size=1500, demo_dev_size=45, demo_test_size=30, vocab_size=300))
    return data


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_or_train_tokenizer(small_demo_config(), str(tmp_path_factory.mktemp("run")))


@pytest.mark.parametrize("split", ["dev", "test"])
def test_every_sentence_comes_once_in_split_order(tokenizer, split):
    pairs = load_split(small_demo_config(), split)
    batches = list(eval_batches(pairs, tokenizer, 8, 32, 32))
    indices = np.concatenate([b["index"] for b in batches])
    assert indices[indices >= 0].tolist() == list(range(len(pairs)))
    for batch in batches:
        for row, index in enumerate(batch["index"]):
            if index >= 0:
                assert tokenizer.decode_source(batch["source"][row]) == pairs[index].source
                assert tokenizer.decode_target(batch["target_out"][row]) == pairs[index].target


def test_rows_that_fill_the_last_batch_are_padding_with_index_minus_one(tokenizer):
    pairs = load_split(small_demo_config(), "dev")  # 45 pairs: 5 batches of 8, the last has 5
    last = list(eval_batches(pairs, tokenizer, 8, 32, 32))[-1]
    assert last["index"].tolist() == [40, 41, 42, 43, 44, -1, -1, -1]
    for key in ("source", "target_in", "target_out"):
        assert (last[key][5:] == PAD_ID).all()
        assert last[key].shape[0] == 8


def test_lengths_are_rounded_up_to_multiples_of_8_and_capped(tokenizer):
    pairs = [TranslationPair("kano ta dormi.", "The dog sleeps.")]
    batch = next(eval_batches(pairs, tokenizer, 4, 32, 12))
    assert batch["source"].shape == (4, 8)
    assert batch["target_in"].shape == (4, 8)
    long = [TranslationPair(" ".join(["kano ta dormi."] * 10), " ".join(["The dog sleeps."] * 10))]
    batch = next(eval_batches(long, tokenizer, 4, 32, 12))
    assert batch["source"].shape == (4, 32)
    assert batch["target_in"].shape == (4, 12)


def test_long_sentences_are_truncated_not_dropped(tokenizer):
    long = TranslationPair(" ".join(["kano ta dormi."] * 10), " ".join(["The dog sleeps."] * 10))
    pairs = [TranslationPair("kano ta dormi.", "The dog sleeps."), long]
    batch = next(eval_batches(pairs, tokenizer, 2, 16, 16))
    assert batch["index"].tolist() == [0, 1]
    source, target_in, target_out = (
        batch["source"][1],
        batch["target_in"][1],
        batch["target_out"][1],
    )
    assert source[-1] == EOS_ID and (source != PAD_ID).all()
    assert target_in[0] == BOS_ID and target_out[-1] == EOS_ID
    np.testing.assert_array_equal(target_out[:-1], target_in[1:])
    expected = tokenizer.encode_source(long.source)[:15]
    np.testing.assert_array_equal(source[:-1], expected)
