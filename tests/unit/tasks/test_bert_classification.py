"""Classification data for fine-tuning: file formats, encoding equal to Hugging Face's
pair encoding (layout, token types, longest-first truncation), batching and resuming."""

import gzip
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference tokenizer loads from a local file

import numpy as np
import pytest
import transformers

from jaxtrans.data.bert.classification import (
    EncodeExample,
    LabelledText,
    evaluation_batches,
    label_names,
    pad_example,
    read_labelled_texts,
    training_batches,
)
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError

VOCAB = "[PAD] [UNK] [CLS] [SEP] [MASK] the a quick brown fox dog jumps over lazy cat sat on mat"
EXAMPLES = [
    LabelledText("pos", "the quick brown fox jumps over the lazy dog"),
    LabelledText("neg", "a cat sat", "on the mat"),
    LabelledText("pos", "the dog", "jumps over a lazy brown cat on the mat the end"),
    LabelledText("neutral", "fox", "cat"),
    LabelledText("neg", "the cat sat on the mat", "the dog sat on the mat"),
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("classification_vocab")
    (directory / "vocab.txt").write_text("\n".join(VOCAB.split()) + "\n")
    return directory


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
    return WordPieceTokenizer.from_huggingface(vocab_dir)


@pytest.mark.parametrize("max_seq_length", [32, 12, 9, 6])
def test_encoding_equals_huggingface_pair_encoding(vocab_dir, tokenizer, max_seq_length):
    reference = transformers.BertTokenizerFast.from_pretrained(vocab_dir)
    labels = label_names(EXAMPLES)
    encode = EncodeExample(tokenizer, labels, max_seq_length)
    for example in EXAMPLES:
        row = pad_example(encode(example), max_seq_length, tokenizer.pad_id)
        expected = reference(
            example.text,
            example.text_b,
            truncation="longest_first",
            max_length=max_seq_length,
            padding="max_length",
        )
        assert row["input_ids"].tolist() == expected["input_ids"], example
        assert row["token_type_ids"].tolist() == expected["token_type_ids"], example
        assert row["attention_mask"].tolist() == expected["attention_mask"], example
        assert labels[int(row["label"])] == example.label


def test_tsv_and_jsonl_files_read_the_same(tmp_path):
    tsv_lines = [f"{e.label}\t{e.text}" + (f"\t{e.text_b}" if e.text_b else "") for e in EXAMPLES]
    (tmp_path / "train.tsv").write_text("\n".join(tsv_lines) + "\n\n")
    with gzip.open(tmp_path / "train.jsonl.gz", "wt") as f:
        for e in EXAMPLES:
            record = {"label": e.label, "text": e.text}
            if e.text_b:
                record["text_b"] = e.text_b
            f.write(json.dumps(record) + "\n")
    assert read_labelled_texts(tmp_path / "train.tsv") == EXAMPLES
    assert read_labelled_texts(tmp_path / "train.jsonl.gz") == EXAMPLES
    assert label_names(EXAMPLES) == ["neg", "neutral", "pos"]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.tsv", "pos\tfine\nno tab here\n", r"bad.tsv:2: expected label<TAB>text"),
        ("bad.jsonl", '{"label": "a", "text": "x"}\n{"text": "y"}\n', r"bad.jsonl:2:"),
        ("bad.jsonl", '{"label": "a", "text": "x"\n', r"bad.jsonl:1:"),
        ("data.csv", "a,b\n", "must end in .tsv or .jsonl"),
        ("empty.tsv", "\n\n", "holds no examples"),
    ],
)
def test_malformed_files_are_user_errors_naming_the_line(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(UserError, match=message):
        read_labelled_texts(tmp_path / name)


def test_unknown_label_is_a_user_error(tokenizer):
    encode = EncodeExample(tokenizer, ["neg", "pos"], 16)
    with pytest.raises(UserError, match="'neutral'"):
        encode(EXAMPLES[3])


def test_training_batches_cover_an_epoch_and_resume_exactly(tokenizer):
    labels = label_names(EXAMPLES)

    def make():
        return training_batches(
            EXAMPLES, tokenizer, labels, max_seq_length=16, batch_size=5, seed=1
        )

    it = make()
    first = next(it)  # one batch = one epoch here
    assert sorted(first["label"].tolist()) == sorted(labels.index(e.label) for e in EXAMPLES)
    assert first["input_ids"].shape == (5, 16) and first["input_ids"].dtype == np.int32
    assert np.all(first["weight"] == 1)
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(3)]
    resumed = make()
    resumed.set_state(state)
    for x, y in zip(expected, [next(resumed) for _ in range(3)], strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    assert any(not np.array_equal(first["label"], b["label"]) for b in expected)  # reshuffled


def test_training_state_is_the_position_fine_tuning_checkpoints_hold_and_stats_are_empty(
    tokenizer,
):
    it = training_batches(
        EXAMPLES, tokenizer, label_names(EXAMPLES), max_seq_length=16, batch_size=2, seed=1
    )
    next(it), next(it)
    assert it.get_state() == {"next_index": 2}
    assert it.stats() == {}


def test_evaluation_batches_keep_order_and_pad_the_last_batch(tokenizer):
    labels = label_names(EXAMPLES)
    batches = list(evaluation_batches(EXAMPLES, tokenizer, labels, max_seq_length=16, batch_size=2))
    assert [b["input_ids"].shape for b in batches] == [(2, 16)] * 3
    weights = np.concatenate([b["weight"] for b in batches])
    assert weights.tolist() == [1, 1, 1, 1, 1, 0]
    got = np.concatenate([b["label"] for b in batches])[:5]
    assert got.tolist() == [labels.index(e.label) for e in EXAMPLES]
