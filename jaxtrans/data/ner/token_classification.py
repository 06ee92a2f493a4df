"""Word-tagged sentences -> BERT rows for token classification (entity tags).

``TaggedData`` reads a run's sentences by split (CoNLL files, ``jaxtrans.data.ner.conll``, or
the generated demo corpus, ``jaxtrans.data.ner.demo``); ``model_labels`` names the tags.

Each word is encoded on its own (``jaxtrans.data.tokenizers.words.encode_words``) and its tag is
learned and predicted at its FIRST word piece; the other pieces of the word, [CLS],
[SEP] and padding have label weight 0 and never enter the loss or the metrics.

A sentence whose pieces do not fit in ``max_seq_length`` (with [CLS] and [SEP]) is split
into windows of whole words, one row each, so that every word is labelled exactly once
and no label is lost; the windows do not overlap, so the words next to a cut see less
context. (A single word longer than a whole row keeps only its first pieces, which is
where its label is.) Rows remember their sentence and first word, so predictions are
put back together word by word.

A row is a dict of int32 numpy arrays of length ``max_seq_length``: ``input_ids``,
``token_type_ids`` (all 0), ``attention_mask``, ``labels`` (the tag id at each word's
first piece, 0 elsewhere) and ``label_weights`` (1 at first pieces of labelled words).
Batches stack rows: [batch, max_seq_length] each.
"""

import dataclasses
from collections.abc import Sequence

import grain
import ml_collections
import numpy as np

from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs
from jaxtrans.data.ner import conll
from jaxtrans.data.ner import demo as ner_demo
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.data.tokenizers.words import encode_words
from jaxtrans.errors import UserError


class TaggedData:
    """The tagged sentences of a run by split: the CoNLL files ``data.ner_{split}`` in
    ``data.tag_scheme``, or the demo corpus (``jaxtrans.data.ner.demo``) when ``ner_train``
    is empty and ``ner_demo_train_size`` is above 0."""

    def __init__(self, data_config: ml_collections.ConfigDict):
        self.config = data_config
        self.scheme = conll.check_scheme(data_config.get("tag_scheme", "bio"))
        self.demo = not data_config.get("ner_train", "") and (
            data_config.get("ner_demo_train_size", 0) > 0
        )

    def sentences(self, split: str) -> list[conll.TaggedSentence] | None:
        """The split's sentences; None when the config names no source for it."""
        path = self.config.get(f"ner_{split}", "")
        if path:
            return conll.read_conll(path, self.scheme)
        if self.demo:
            size = self.config[f"ner_demo_{'train' if split == 'train' else 'eval'}_size"]
            return ner_demo.demo_sentences(split, size, self.config.get("demo_seed", 0))
        if split == "train":
            raise UserError(
                "entity tagging needs tagged data: set --config.data.ner_train (and "
                "ner_dev) to CoNLL files, one word and its tag a line"
            )
        return None


def model_labels(data_config: ml_collections.ConfigDict, train) -> list[str]:
    """``data.labels`` when set, else the BIO labels of the training sentences' entity
    types: O, then B-T and I-T for each type T in sorted order."""
    if data_config.get("labels", ""):
        return [label.strip() for label in data_config.labels.split(",")]
    types = conll.entity_types(train)
    return ["O", *(f"{p}-{t}" for t in types for p in ("B", "I"))]


@dataclasses.dataclass(frozen=True)
class Window:
    """A run of whole words of one sentence, as one model row.

    input_ids: [CLS] pieces [SEP], unpadded.
    word_starts: [num_words] the position in the row of each word's first piece.
    labels: [num_words] each word's tag id; None for unlabelled text (prediction).
    """

    sentence: int
    first_word: int
    input_ids: np.ndarray
    word_starts: np.ndarray
    labels: np.ndarray | None = None


def sentence_windows(
    tokenizer: BertTokenizer,
    sentences: Sequence[Sequence[str]],
    max_seq_length: int,
    labels: Sequence[Sequence[int]] | None = None,
) -> tuple[list[Window], int]:
    """Rows of every sentence (lists of words), in order, and how many sentences were
    split into more than one window. ``labels``: each word's tag id (None: unlabelled).
    A sentence without words has no row."""
    if max_seq_length < 3:
        raise UserError(f"max_seq_length={max_seq_length} is too short; use at least 3")
    room = max_seq_length - 2
    windows: list[Window] = []
    split = 0
    for index, words in enumerate(sentences):
        ids, word_index = encode_words(tokenizer, words)
        pieces: list[list[int]] = [[] for _ in words]
        for piece, word in zip(ids, word_index, strict=True):
            pieces[word].append(piece)
        start, count = 0, len(windows)
        while start < len(words):
            end, used = start, 0
            while end < len(words) and (end == start or used + len(pieces[end]) <= room):
                used += len(pieces[end])
                end += 1
            row = [tokenizer.cls_id]
            starts = []
            for word in range(start, end):
                starts.append(len(row))
                row.extend(pieces[word][: room - (len(row) - 1)])
            row.append(tokenizer.sep_id)
            tags = None if labels is None else np.asarray(labels[index][start:end], np.int32)
            windows.append(
                Window(index, start, np.asarray(row, np.int32), np.asarray(starts, np.int32), tags)
            )
            start = end
        split += len(windows) - count > 1
    return windows, split


def pad_window(window: Window, max_seq_length: int, pad_id: int) -> dict[str, np.ndarray]:
    """One window as a padded row (see module doc)."""
    n = len(window.input_ids)
    row = {
        "input_ids": np.full(max_seq_length, pad_id, np.int32),
        "token_type_ids": np.zeros(max_seq_length, np.int32),
        "attention_mask": np.zeros(max_seq_length, np.int32),
        "labels": np.zeros(max_seq_length, np.int32),
        "label_weights": np.zeros(max_seq_length, np.int32),
    }
    row["input_ids"][:n] = window.input_ids
    row["attention_mask"][:n] = 1
    if window.labels is not None:
        row["labels"][window.word_starts] = window.labels
        row["label_weights"][window.word_starts] = 1
    return row


def training_batches(
    windows: Sequence[Window],
    *,
    max_seq_length: int,
    pad_id: int,
    batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
) -> CheckpointableIterator:
    """Shuffled batches of labelled windows (a new permutation each epoch), forever.
    ``batch_size``: rows of this process. The state is grain's (``{"next_index": N}``),
    as for sequence classification."""
    shard = list(windows)[process_index::process_count]
    if not shard:
        raise UserError("no training sentences for this process; use more data")
    dataset = grain.MapDataset.source(ShuffledEpochs(shard, int(seed) % 2**32))
    dataset = dataset.map(lambda w: pad_window(w, max_seq_length, pad_id))
    batches = dataset.batch(batch_size, drop_remainder=True).to_iter_dataset()
    return CheckpointableIterator(iter(batches))


def evaluation_batches(
    windows: Sequence[Window], *, max_seq_length: int, pad_id: int, batch_size: int
) -> list[dict[str, np.ndarray]]:
    """Every window once, in order, ``batch_size`` rows a batch; the last batch is filled
    with rows of label weight 0, so that all batches have one shape."""
    rows = [pad_window(w, max_seq_length, pad_id) for w in windows]
    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        filler = {**chunk[0], "label_weights": np.zeros(max_seq_length, np.int32)}
        chunk = chunk + [filler] * (batch_size - len(chunk))
        batches.append({key: np.stack([row[key] for row in chunk]) for key in chunk[0]})
    return batches


def word_predictions(
    windows: Sequence[Window], values: np.ndarray, num_words: Sequence[int]
) -> list[np.ndarray]:
    """Per-position values of the rows (``values`` [rows, max_seq_length, ...], row i
    being ``windows[i]``; extra rows are ignored) -> each sentence's values at its words'
    first pieces ([num_words[s], ...] for sentence s)."""
    out = [np.zeros((n, *values.shape[2:]), values.dtype) for n in num_words]
    for row, window in enumerate(windows):
        words = slice(window.first_word, window.first_word + len(window.word_starts))
        out[window.sentence][words] = values[row, window.word_starts]
    return out
