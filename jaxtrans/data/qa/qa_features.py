"""Question-answering examples -> model windows with answer positions, and back to text.

A context is cut into words with character offsets (``jaxtrans.data.tokenizers.words``) and each
word into pieces, so every piece knows the characters of its word. A question longer
than ``max_query_length`` pieces is cut; a context longer than the room left in
``max_seq_length`` is read in windows, each starting ``doc_stride`` pieces after the last
(as BERT's ``run_squad.py``), so every window shares pieces with its neighbours::

    [CLS] question [SEP] context window [SEP]     token types 0 ... 0 1 ... 1

The target of a window is the answer's first and last piece: the first piece of the
first word the answer's characters touch and the last piece of the last one. A window
that does not hold the whole answer, and every window of an unanswerable question,
points at [CLS] (position 0), as in BERT and Hugging Face. A predicted span maps back to
the context's characters from the start of its first word to the end of its last, so the
answer text is exact, whatever the tokenizer did to the text (lower case, accents).

Training uses the first answer; one whose text is not found at its ``answer_start`` is
left out and counted (``EncodedExamples.skipped``), as BERT's reference code does.

Batches are dicts of numpy int32 arrays: ``input_ids``, ``token_type_ids``,
``attention_mask`` [batch, max_seq_length]; ``start_positions``, ``end_positions``,
``weight`` [batch] (weight 0 marks rows that pad the last evaluation batch).
"""

import dataclasses
from collections.abc import Sequence

import grain
import numpy as np

from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs
from jaxtrans.data.qa.squad import Answer, QAExample
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.data.tokenizers.words import Word, encode_words, split_words
from jaxtrans.errors import UserError


@dataclasses.dataclass(frozen=True)
class EncodedContext:
    """A context's words and pieces: ``piece_ids`` [pieces] and ``word_of_piece`` [pieces]
    (the index into ``words`` of each piece; non-decreasing, every word has a piece)."""

    words: tuple[Word, ...]
    piece_ids: np.ndarray
    word_of_piece: np.ndarray


@dataclasses.dataclass(frozen=True)
class Window:
    """One model input: example ``example``'s question and context pieces
    ``[context_start, context_start + context_length)``, which sit at positions
    ``[context_offset, context_offset + context_length)`` of ``input_ids`` (unpadded).
    ``start_position`` / ``end_position``: the answer's pieces, or 0 ([CLS])."""

    example: int
    input_ids: np.ndarray
    context_offset: int
    context_start: int
    context_length: int
    start_position: int = 0
    end_position: int = 0

    @property
    def context_positions(self) -> tuple[int, int]:
        return self.context_offset, self.context_offset + self.context_length


@dataclasses.dataclass(frozen=True)
class EncodedExamples:
    """Examples with their encoded contexts (one per example) and their windows in order."""

    examples: list[QAExample]
    contexts: list[EncodedContext]
    windows: list[Window]
    # Training answers left out because their text is not at their answer_start.
    skipped: int = 0


def encode_context(tokenizer: BertTokenizer, context: str) -> EncodedContext:
    words = split_words(context)
    ids, word_index = encode_words(tokenizer, [w.text for w in words])
    return EncodedContext(tuple(words), np.asarray(ids, np.int32), np.asarray(word_index, np.int32))


def answer_pieces(context: str, encoded: EncodedContext, answer: Answer) -> tuple[int, int] | None:
    """The first and last piece (inclusive) of the words that ``answer``'s characters
    touch; None when its text is not at its offset or it covers no word."""
    end = answer.start + len(answer.text)
    if not answer.text or context[answer.start : end] != answer.text:
        return None
    touched = [i for i, w in enumerate(encoded.words) if w.end > answer.start and w.start < end]
    if not touched:
        return None
    first = int(np.searchsorted(encoded.word_of_piece, touched[0], side="left"))
    last = int(np.searchsorted(encoded.word_of_piece, touched[-1], side="right")) - 1
    return first, last


def window_starts(pieces: int, room: int, doc_stride: int) -> list[int]:
    """Where each window starts: 0, then ``doc_stride`` further on until one reaches the
    end (BERT's ``run_squad.py``; a context of no pieces has one, empty, window)."""
    starts = [0]
    while starts[-1] + room < pieces:
        starts.append(starts[-1] + min(room, doc_stride))
    return starts


class QAEncoder:
    """Examples -> windows for one tokenizer and the window settings of the data config."""

    def __init__(
        self,
        tokenizer: BertTokenizer,
        *,
        max_seq_length: int,
        doc_stride: int,
        max_query_length: int,
    ):
        if max_query_length < 1 or doc_stride < 1:
            raise UserError(
                f"--config.data.max_query_length={max_query_length} and doc_stride="
                f"{doc_stride} must be at least 1"
            )
        if max_seq_length - max_query_length - 3 < 1:
            raise UserError(
                f"--config.data.max_seq_length={max_seq_length} leaves no room for the context "
                f"after a question of max_query_length={max_query_length} pieces; make it at "
                f"least {max_query_length + 4}"
            )
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length

    def encode(self, examples: Sequence[QAExample], *, training: bool) -> EncodedExamples:
        """Every window of every example. ``training``: an example whose first answer is
        not found in its context is left out (counted in ``skipped``); otherwise such an
        example keeps its windows, pointed at [CLS]."""
        tok = self.tokenizer
        cache: dict[str, EncodedContext] = {}
        kept: list[QAExample] = []
        contexts: list[EncodedContext] = []
        windows: list[Window] = []
        skipped = 0
        for example in examples:
            if example.context not in cache:
                cache[example.context] = encode_context(tok, example.context)
            encoded = cache[example.context]
            target = None
            if example.answers and not example.is_impossible:
                target = answer_pieces(example.context, encoded, example.answers[0])
                if target is None and training:
                    skipped += 1
                    continue
            question = tok.encode(example.question)[: self.max_query_length]
            head = [tok.cls_id, *question, tok.sep_id]
            room = self.max_seq_length - len(head) - 1
            pieces = len(encoded.piece_ids)
            index = len(kept)
            for start in window_starts(pieces, room, self.doc_stride):
                length = min(room, pieces - start)
                ids = [*head, *encoded.piece_ids[start : start + length].tolist(), tok.sep_id]
                positions = (0, 0)
                if target is not None and start <= target[0] and target[1] < start + length:
                    positions = (target[0] - start + len(head), target[1] - start + len(head))
                windows.append(
                    Window(index, np.asarray(ids, np.int32), len(head), start, length, *positions)
                )
            kept.append(example)
            contexts.append(encoded)
        return EncodedExamples(kept, contexts, windows, skipped)


def span_text(
    context: str, encoded: EncodedContext, window: Window, start: int, end: int
) -> tuple[str, int, int]:
    """The answer of window positions ``start..end`` (inclusive, inside the context part):
    (text, first character, character after the last) in the context."""
    first = encoded.word_of_piece[window.context_start + start - window.context_offset]
    last = encoded.word_of_piece[window.context_start + end - window.context_offset]
    begin, stop = encoded.words[first].start, encoded.words[last].end
    return context[begin:stop], begin, stop


def pad_window(window: Window, max_seq_length: int, pad_id: int) -> dict[str, np.ndarray]:
    """One window as a padded batch row with weight 1."""
    n = len(window.input_ids)
    row = {
        "input_ids": np.full(max_seq_length, pad_id, np.int32),
        "token_type_ids": np.zeros(max_seq_length, np.int32),
        "attention_mask": np.zeros(max_seq_length, np.int32),
        "start_positions": np.int32(window.start_position),
        "end_positions": np.int32(window.end_position),
        "weight": np.int32(1),
    }
    row["input_ids"][:n] = window.input_ids
    row["token_type_ids"][window.context_offset : n] = 1
    row["attention_mask"][:n] = 1
    return row


def training_batches(
    windows: Sequence[Window],
    *,
    pad_id: int,
    max_seq_length: int,
    batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
) -> CheckpointableIterator:
    """Shuffled windows (a new order each epoch), forever; this process's ``batch_size``
    rows a step. State: grain's ``{"next_index": N}``."""
    if not windows:
        raise UserError("the training data gives no windows; check --config.data.qa_train")
    shard = list(windows)[process_index::process_count]
    dataset = grain.MapDataset.source(ShuffledEpochs(shard, int(seed) % 2**32))
    dataset = dataset.map(lambda w: pad_window(w, max_seq_length, pad_id))
    batches = dataset.batch(batch_size, drop_remainder=True).to_iter_dataset()
    return CheckpointableIterator(iter(batches))


def evaluation_batches(
    windows: Sequence[Window], *, pad_id: int, max_seq_length: int, batch_size: int
) -> list[dict[str, np.ndarray]]:
    """Every window once, in order; the last batch filled with weight-0 rows."""
    rows = [pad_window(w, max_seq_length, pad_id) for w in windows]
    batches = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        chunk += [{**chunk[0], "weight": np.int32(0)}] * (batch_size - len(chunk))
        batches.append({key: np.stack([row[key] for row in chunk]) for key in chunk[0]})
    return batches
