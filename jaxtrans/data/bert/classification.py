"""Sequence-classification data for BERT fine-tuning: labelled texts -> padded batches.

Two file formats, one example a line (UTF-8, optionally .gz):

- TSV:   ``label<TAB>text`` or ``label<TAB>text<TAB>text_b`` (sentence pairs);
- JSONL: ``{"label": ..., "text": ..., "text_b": ...}`` (``text_b`` optional).

Each example becomes ``[CLS] text [SEP]`` or ``[CLS] text [SEP] text_b [SEP]`` with token
types 0 / 1; over-long examples lose tokens from the end of the longer text first. Labels
are strings, numbered in the order of ``labels`` (by default the sorted distinct labels
of the training file).

Batches are dicts of numpy int32 arrays: ``input_ids``, ``token_type_ids``,
``attention_mask`` [batch, max_seq_length]; ``label`` and ``weight`` [batch] (weight 0
marks the rows that pad the last evaluation batch).
"""

import dataclasses
import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import grain
import numpy as np

from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.errors import UserError


@dataclasses.dataclass(frozen=True)
class LabelledText:
    label: str
    text: str
    text_b: str | None = None


def _parse_tsv(line: str) -> LabelledText:
    fields = line.split("\t")
    if len(fields) not in (2, 3) or not all(fields):
        raise ValueError("expected label<TAB>text or label<TAB>text<TAB>text_b")
    return LabelledText(*fields)


def _parse_jsonl(line: str) -> LabelledText:
    record = json.loads(line)
    if not isinstance(record, dict) or "label" not in record or "text" not in record:
        raise ValueError('expected an object with "label" and "text"')
    return LabelledText(str(record["label"]), record["text"], record.get("text_b"))


def read_labelled_texts(path: str | Path) -> list[LabelledText]:
    """A .tsv or .jsonl file (optionally .gz) -> its examples; UserError names a bad line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"classification file {path} not found")
    suffixes = [s for s in path.suffixes if s != ".gz"]
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".tsv", ".jsonl"):
        raise UserError(f"{path}: classification files must end in .tsv or .jsonl (or .gz)")
    parse = _parse_tsv if kind == ".tsv" else _parse_jsonl
    opener = gzip.open if path.suffix == ".gz" else open
    examples = []
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{path}:{number}: not UTF-8 text (byte {e.start}); save the file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                examples.append(parse(line))
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                raise UserError(f"{path}:{number}: {e}") from None
    if not examples:
        raise UserError(f"{path} holds no examples")
    return examples


def label_names(examples: Sequence[LabelledText]) -> list[str]:
    """The sorted distinct labels: label i of the model is ``label_names(...)[i]``."""
    return sorted({e.label for e in examples})


class EncodeExample:
    """LabelledText -> unpadded ids, token types and the label's number."""

    def __init__(self, tokenizer: BertTokenizer, labels: Sequence[str], max_seq_length: int):
        if max_seq_length < 4:
            raise UserError(f"max_seq_length={max_seq_length} is too short; use at least 4")
        self.tokenizer = tokenizer
        self.label_ids = {label: i for i, label in enumerate(labels)}
        self.max_seq_length = max_seq_length

    def __call__(self, example: LabelledText) -> dict[str, np.ndarray]:
        tok = self.tokenizer
        if example.label not in self.label_ids:
            raise UserError(
                f"label {example.label!r} is not one of the model's labels {list(self.label_ids)}"
            )
        a = tok.encode(example.text)
        b = tok.encode(example.text_b) if example.text_b is not None else None
        room = self.max_seq_length - (3 if b is not None else 2)
        if b is None:
            a = a[:room]
        else:
            while len(a) + len(b) > room:  # longest first, from the end
                if len(a) >= len(b):
                    a = a[:-1]
                else:
                    b = b[:-1]
        ids = [tok.cls_id, *a, tok.sep_id]
        types = [0] * len(ids)
        if b is not None:
            ids += [*b, tok.sep_id]
            types += [1] * (len(b) + 1)
        return {
            "input_ids": np.asarray(ids, np.int32),
            "token_type_ids": np.asarray(types, np.int32),
            "label": np.int32(self.label_ids[example.label]),
        }


def pad_example(
    example: dict[str, np.ndarray], max_seq_length: int, pad_id: int
) -> dict[str, np.ndarray]:
    """Pads one encoded example to max_seq_length and gives it weight 1."""
    n = len(example["input_ids"])
    row = {
        "input_ids": np.full(max_seq_length, pad_id, np.int32),
        "token_type_ids": np.zeros(max_seq_length, np.int32),
        "attention_mask": np.zeros(max_seq_length, np.int32),
        "label": example["label"],
        "weight": np.int32(1),
    }
    row["input_ids"][:n] = example["input_ids"]
    row["token_type_ids"][:n] = example["token_type_ids"]
    row["attention_mask"][:n] = 1
    return row


def training_batches(
    examples: Sequence[LabelledText],
    tokenizer: BertTokenizer,
    labels: Sequence[str],
    *,
    max_seq_length: int,
    batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
) -> CheckpointableIterator:
    """Shuffled batches (a new permutation each epoch), forever.

    The iterator's ``get_state`` / ``set_state`` take JSON-serialisable dicts: grain's own
    state (``{"next_index": N}``, what fine-tuning checkpoints have always held), with no
    settings to check. ``stats()`` is empty. ``batch_size`` is the number of rows of this
    process.
    """
    encode = EncodeExample(tokenizer, labels, max_seq_length)
    shard = list(examples)[process_index::process_count]
    dataset = grain.MapDataset.source(ShuffledEpochs(shard, int(seed) % 2**32))
    dataset = dataset.map(lambda e: pad_example(encode(e), max_seq_length, tokenizer.pad_id))
    batches = dataset.batch(batch_size, drop_remainder=True).to_iter_dataset()
    return CheckpointableIterator(iter(batches))


def evaluation_batches(
    examples: Sequence[LabelledText],
    tokenizer: BertTokenizer,
    labels: Sequence[str],
    *,
    max_seq_length: int,
    batch_size: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Every example once, in file order; the last batch is filled with weight-0 rows so
    that all batches have one shape."""
    encode = EncodeExample(tokenizer, labels, max_seq_length)
    rows = [pad_example(encode(e), max_seq_length, tokenizer.pad_id) for e in examples]
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        filler = {**chunk[0], "weight": np.int32(0)}
        chunk = chunk + [filler] * (batch_size - len(chunk))
        yield {key: np.stack([row[key] for row in chunk]) for key in chunk[0]}
