"""What the BERT tasks' ``predict`` (evaluate.py --input) shares: input lines -> texts,
encoded rows -> batches of one static shape, a jitted forward pass over them, and one
JSON object a line.

An input line is ``text`` or ``text<TAB>text_b`` (a sentence pair: segments A and B, as
in the classification TSV files, without the label). Each line becomes
``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` with token types 0 / 1.
"""

import json
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.errors import UserError

# What marks a token to predict in the text of a line.
MASK_TEXT = "[MASK]"
# Rows of a batch are padded to a power of two at least this long (few shapes to compile).
MIN_LENGTH = 8


def input_texts(line: str, number: int) -> tuple[str, str | None]:
    """``text`` or ``text<TAB>text_b`` -> (text, text_b or None); ``number`` names the line."""
    fields = line.split("\t")
    if len(fields) > 2:
        raise UserError(
            f"--input line {number} has {len(fields) - 1} TABs; give text, or text<TAB>text_b "
            "for a sentence pair"
        )
    return fields[0], fields[1] if len(fields) == 2 else None


def encode_with_masks(tokenizer: BertTokenizer, text: str) -> list[int]:
    """The ids of ``text`` with each literal ``[MASK]`` as the mask id, the text between
    masks encoded on its own: as Hugging Face tokenizers treat a special token (for
    WordPiece the same ids as encoding the whole text), and so that a SentencePiece model
    puts no word-boundary piece ``▁`` of its own before a mask."""
    parts = text.split(MASK_TEXT)
    ids = tokenizer.encode(parts[0])
    for part in parts[1:]:
        ids = [*ids, tokenizer.mask_id, *tokenizer.encode(part)]
    return ids


def encode_pair(
    tokenizer: BertTokenizer, text: str, text_b: str | None, masks: bool = False
) -> dict[str, np.ndarray]:
    """``[CLS] text [SEP] (text_b [SEP])``, untruncated: input_ids, token_type_ids and
    attention_mask (all ones), each int32 [tokens]. ``masks``: encode with
    ``encode_with_masks``."""
    encode = (lambda t: encode_with_masks(tokenizer, t)) if masks else tokenizer.encode
    ids = [tokenizer.cls_id, *encode(text), tokenizer.sep_id]
    types = [0] * len(ids)
    if text_b is not None:
        b = [*encode(text_b), tokenizer.sep_id]
        ids += b
        types += [1] * len(b)
    return {
        "input_ids": np.asarray(ids, np.int32),
        "token_type_ids": np.asarray(types, np.int32),
        "attention_mask": np.ones(len(ids), np.int32),
    }


def batch_size(run_config: ml_collections.ConfigDict, options: dict[str, Any] | None) -> int:
    """evaluate.py --batch_size when given, else the run config's eval.batch_size."""
    given = (options or {}).get("batch_size")
    size = run_config.eval.batch_size if given is None else given
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UserError(f"--batch_size {size}: use a whole number >= 1")
    return size


def padded_length(longest: int, limit: int) -> int:
    """The power of two >= ``longest`` (at least MIN_LENGTH), at most ``limit``."""
    length = MIN_LENGTH
    while length < longest:
        length *= 2
    return max(min(length, limit), longest)


def stack_rows(
    rows: Sequence[dict[str, np.ndarray]], widths: dict[str, int], pad_values: dict[str, int]
) -> dict[str, np.ndarray]:
    """Rows of 1-D int arrays -> {key: int32 [len(rows), widths[key]]}, each row padded on
    the right with ``pad_values[key]`` (default 0)."""
    batch = {}
    for key, width in widths.items():
        array = np.full((len(rows), width), pad_values.get(key, 0), np.int32)
        for i, row in enumerate(rows):
            array[i, : len(row[key])] = row[key]
        batch[key] = array
    return batch


def run_batches(
    forward: Callable[[Any, dict[str, np.ndarray]], Any],
    params: Any,
    rows: Sequence[dict[str, np.ndarray]],
    size: int,
    widths: dict[str, int],
    pad_values: dict[str, int],
) -> Any:
    """``forward(params, batch)`` (jitted) over ``rows`` in batches of ``size`` rows; the
    last batch is filled with padding rows, so every call has one shape. Returns the
    outputs (a pytree of arrays [batch, ...]) concatenated, one entry per row."""
    size = min(size, len(rows))  # no batch of filler rows only (a huge --batch_size)
    outputs = []
    for start in range(0, len(rows), size):
        chunk = list(rows[start : start + size])
        filler = {key: np.zeros(0, np.int32) for key in widths}
        batch = stack_rows(chunk + [filler] * (size - len(chunk)), widths, pad_values)
        result = jax.device_get(forward(params, batch))
        count = len(chunk)
        outputs.append(jax.tree.map(lambda x: np.asarray(x)[:count], result))  # noqa: B023
    return jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)


def probability(value: float) -> float:
    """A probability as printed: six significant digits."""
    return float(f"{float(value):.6g}")


def json_line(record: dict[str, Any]) -> str:
    """One output line: the record as JSON, non-ASCII text kept as it is."""
    return json.dumps(record, ensure_ascii=False)


def text_fields(text: str, text_b: str | None) -> dict[str, str]:
    """``{"text": ...}`` and ``"text_b"`` for a pair, as the classification JSONL files."""
    return {"text": text} if text_b is None else {"text": text, "text_b": text_b}
