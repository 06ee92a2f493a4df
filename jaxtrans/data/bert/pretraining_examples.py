"""BERT pretraining examples: documents -> [CLS] A [SEP] B [SEP] with dynamic masking.

Input text is the usual format: one sentence a line, a blank line between documents.

    read_documents(paths)                      lists of sentences
    -> TokenizedCorpus.build(documents, tok)   flat int32 token array + offsets
    -> plan_chunks(corpus, options, seed)      each document cut into runs of >= 2
                                               consecutive sentences of a target length
    -> grain: chunks[process_index::process_count], a new permutation each epoch, forever
    -> make the example of a chunk with a per-example random generator (grain random_map,
       seeded by the pipeline seed and the example's index in the repeated stream):
         A = the chunk's first k sentences (k uniform in 1..n-1)
         B = with probability 1 - random_next_prob the rest of the chunk (label 0),
             else sentences from a random other document (label 1)
         truncate the longer of A / B, from the front or the back at random
         mask 15% of the A and B tokens: of those 80% [MASK], 10% a random token,
         10% unchanged (at most max_predictions_per_seq)
    -> batch -> prefetch in a thread

The chunking is fixed for a seed; the split point, the random B and the masking are drawn
afresh for every epoch, as dynamic masking (RoBERTa) does. Chunks are at least two
sentences long, so every chunk can yield a true continuation and the next-sentence labels
are exactly Bernoulli(random_next_prob). The number of masked tokens is the expected count
``masked_lm_prob * n`` rounded up or down at random (up with probability equal to its
fractional part), so exactly ``masked_lm_prob`` of the maskable tokens are masked on
average, without the spread of one coin per token.

Every batch is a dict of numpy int32 arrays of fixed shape:
``input_ids``, ``token_type_ids`` (0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding),
``attention_mask`` (1 real, 0 padding) [batch, max_seq_length];
``masked_positions``, ``masked_ids`` (the original tokens), ``masked_weights`` (1 for a
real prediction, 0 for padding) [batch, max_predictions_per_seq];
``next_sentence_label`` [batch] (0 = B follows A, 1 = B is random).
"""

import dataclasses
import gzip
from collections.abc import Sequence
from pathlib import Path

import grain
import grain.experimental
import numpy as np

from jaxtrans.data.iterators import CheckpointableIterator, ShuffledEpochs
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.errors import UserError

BATCH_KEYS = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "masked_positions",
    "masked_ids",
    "masked_weights",
    "next_sentence_label",
)


def read_documents(paths: Sequence[str | Path]) -> list[list[str]]:
    """Text files (optionally .gz) -> documents, each a list of non-empty sentences."""
    documents: list[list[str]] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"pretraining text {path} not found")
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            current: list[str] = []
            for line in f:
                line = line.strip()
                if line:
                    current.append(line)
                elif current:
                    documents.append(current)
                    current = []
            if current:  # a file ends a document
                documents.append(current)
    return documents


@dataclasses.dataclass(frozen=True)
class TokenizedCorpus:
    """All sentences' tokens in one array.

    tokens: int32 [total tokens]; sentence i is tokens[sentence_starts[i]:sentence_starts[i+1]].
    document_starts: document d holds sentences document_starts[d] .. document_starts[d+1]-1.
    """

    tokens: np.ndarray
    sentence_starts: np.ndarray
    document_starts: np.ndarray

    @classmethod
    def from_token_lists(cls, documents: Sequence[Sequence[Sequence[int]]]) -> "TokenizedCorpus":
        """Documents of sentences of token ids; empty sentences and documents are dropped."""
        sentences, document_sizes = [], []
        for doc in documents:
            kept = [s for s in doc if len(s)]
            if kept:
                sentences.extend(kept)
                document_sizes.append(len(kept))
        lengths = [len(s) for s in sentences]
        tokens = np.fromiter((t for s in sentences for t in s), np.int32, sum(lengths))
        return cls(
            tokens=tokens,
            sentence_starts=np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]),
            document_starts=np.concatenate([[0], np.cumsum(document_sizes, dtype=np.int64)]),
        )

    @classmethod
    def build(
        cls, documents: Sequence[Sequence[str]], tokenizer: BertTokenizer
    ) -> "TokenizedCorpus":
        """Tokenises every sentence of every document."""
        return cls.from_token_lists([tokenizer.encode_batch(list(doc)) for doc in documents])

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1

    def sentence_lengths(self) -> np.ndarray:
        return np.diff(self.sentence_starts)

    def span(self, first_sentence: int, end_sentence: int) -> np.ndarray:
        """Tokens of sentences first_sentence .. end_sentence-1, concatenated."""
        starts = self.sentence_starts
        return self.tokens[starts[first_sentence] : starts[end_sentence]]


@dataclasses.dataclass(frozen=True)
class PretrainingOptions:
    """How examples are cut and masked (defaults: BERT's create_pretraining_data)."""

    # Length of every example, [CLS] and both [SEP] included.
    max_seq_length: int = 128
    # Most masked positions per example (rows of masked_positions).
    max_predictions_per_seq: int = 20
    # Fraction of the A and B tokens chosen for prediction.
    masked_lm_prob: float = 0.15
    # Of the chosen tokens: fraction replaced by [MASK] ...
    mask_token_prob: float = 0.8
    # ... and fraction replaced by a random token (the rest stay unchanged).
    random_token_prob: float = 0.1
    # Probability that a chunk aims at a random shorter length (2 .. max) instead of max.
    short_seq_prob: float = 0.1
    # Probability that B is taken from another document (next_sentence_label 1).
    random_next_prob: float = 0.5

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise UserError(f"max_seq_length={self.max_seq_length} is too short; use at least 5")
        if self.max_predictions_per_seq < 1:
            raise UserError("max_predictions_per_seq must be at least 1")
        for name in ("masked_lm_prob", "short_seq_prob", "random_next_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UserError(f"{name}={getattr(self, name)} is not a probability")
        split = (self.mask_token_prob, self.random_token_prob)
        if min(split) < 0 or sum(split) > 1:
            raise UserError("mask_token_prob and random_token_prob must be >= 0 and sum to <= 1")

    @property
    def max_num_tokens(self) -> int:
        """Room for A and B: the sequence minus [CLS] and two [SEP]."""
        return self.max_seq_length - 3


def plan_chunks(corpus: TokenizedCorpus, options: PretrainingOptions, seed: int) -> np.ndarray:
    """Cuts each document into chunks of consecutive sentences -> int64 [num_chunks, 3].

    Row: (first sentence, end sentence, target length). A chunk collects sentences until
    it holds ``target`` tokens and at least two sentences; the target is max_num_tokens,
    or with probability short_seq_prob a random length in 2..max_num_tokens (so the model
    also sees short sequences). A left-over single sentence joins the previous chunk.
    Single-sentence documents give no chunk (they can still be a random B).
    """
    rng = np.random.default_rng(seed)
    lengths = corpus.sentence_lengths()
    longest = options.max_num_tokens

    def draw_target() -> int:
        if rng.random() < options.short_seq_prob:
            return int(rng.integers(2, longest + 1))
        return longest

    chunks: list[list[int]] = []
    for d in range(corpus.num_documents):
        first, end = int(corpus.document_starts[d]), int(corpus.document_starts[d + 1])
        if end - first < 2:
            continue
        start, total, target = first, 0, draw_target()
        for s in range(first, end):
            total += int(lengths[s])
            if total >= target and s + 1 - start >= 2:
                chunks.append([start, s + 1, target])
                start, total, target = s + 1, 0, draw_target()
        if start < end:
            if end - start >= 2 or not chunks or chunks[-1][1] != start:
                chunks.append([start, end, target])
            else:
                chunks[-1][1] = end
    if not chunks:
        raise UserError("no document has two sentences; BERT pretraining needs sentence pairs")
    if corpus.num_documents < 2:
        raise UserError("BERT pretraining needs at least two documents (for random next sentences)")
    return np.asarray(chunks, np.int64)


def truncate_pair(
    a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Drops tokens from the longer of a / b, at its front or back at random, until they fit."""
    a_cut, b_cut = [0, len(a)], [0, len(b)]
    while (a_cut[1] - a_cut[0]) + (b_cut[1] - b_cut[0]) > max_num_tokens:
        cut = a_cut if a_cut[1] - a_cut[0] > b_cut[1] - b_cut[0] else b_cut
        if rng.random() < 0.5:
            cut[0] += 1
        else:
            cut[1] -= 1
    return a[a_cut[0] : a_cut[1]], b[b_cut[0] : b_cut[1]]


def choose_masked_positions(
    candidates: np.ndarray, options: PretrainingOptions, rng: np.random.Generator
) -> np.ndarray:
    """A random sorted subset of the candidate positions: masked_lm_prob of them on average."""
    expected = options.masked_lm_prob * len(candidates)
    count = int(expected) + int(rng.random() < expected - int(expected))
    count = min(count, options.max_predictions_per_seq)
    return np.sort(rng.choice(candidates, size=count, replace=False))


class MakeExample:
    """A chunk row and a random generator -> one padded pretraining example (see module doc)."""

    def __init__(
        self, corpus: TokenizedCorpus, tokenizer: BertTokenizer, options: PretrainingOptions
    ):
        self.corpus = corpus
        self.options = options
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        self.mask_id, self.pad_id = tokenizer.mask_id, tokenizer.pad_id
        # Random replacements come from the ordinary tokens of the vocabulary.
        self.replacement_ids = np.setdiff1d(
            np.arange(tokenizer.vocab_size), np.fromiter(tokenizer.special_ids, np.int64)
        ).astype(np.int32)
        # Every sentence's document, to find where a random B may start.
        self.document_of = np.repeat(
            np.arange(corpus.num_documents), np.diff(corpus.document_starts)
        )

    def segments(
        self, chunk: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Token arrays A and B and the next-sentence label (0 = B follows A)."""
        corpus = self.corpus
        first, end, target = (int(x) for x in chunk)
        split = int(rng.integers(first + 1, end))  # A = sentences first .. split-1
        a = corpus.span(first, split)
        if rng.random() >= self.options.random_next_prob:
            return a, corpus.span(split, end), 0
        # B from another document: from a random sentence on, up to the rest of the target.
        this_document = self.document_of[first]
        other = int(rng.integers(corpus.num_documents - 1))
        other += other >= this_document
        doc_first, doc_end = corpus.document_starts[other], corpus.document_starts[other + 1]
        start = int(rng.integers(doc_first, doc_end))
        room = max(target - len(a), 1)
        lengths = np.cumsum(corpus.sentence_lengths()[start:doc_end])
        stop = start + min(int(np.searchsorted(lengths, room)) + 1, doc_end - start)
        return a, corpus.span(start, stop), 1

    def __call__(self, chunk: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        opts = self.options
        a, b, label = self.segments(chunk, rng)
        a, b = truncate_pair(a, b, opts.max_num_tokens, rng)
        tokens = np.concatenate([[self.cls_id], a, [self.sep_id], b, [self.sep_id]])
        types = np.concatenate([np.zeros(len(a) + 2, np.int32), np.ones(len(b) + 1, np.int32)])
        # Only A and B tokens may be chosen, never [CLS] or [SEP].
        candidates = np.concatenate(
            [np.arange(1, len(a) + 1), np.arange(len(a) + 2, len(a) + 2 + len(b))]
        )
        positions = choose_masked_positions(candidates, opts, rng)
        original = tokens[positions]
        action = rng.random(len(positions))
        inputs = tokens.copy()
        to_mask = action < opts.mask_token_prob
        to_random = ~to_mask & (action < opts.mask_token_prob + opts.random_token_prob)
        inputs[positions[to_mask]] = self.mask_id
        inputs[positions[to_random]] = rng.choice(self.replacement_ids, int(to_random.sum()))

        length, predictions = opts.max_seq_length, opts.max_predictions_per_seq
        example = {
            "input_ids": np.full(length, self.pad_id, np.int32),
            "token_type_ids": np.zeros(length, np.int32),
            "attention_mask": np.zeros(length, np.int32),
            "masked_positions": np.zeros(predictions, np.int32),
            "masked_ids": np.zeros(predictions, np.int32),
            "masked_weights": np.zeros(predictions, np.int32),
            "next_sentence_label": np.int32(label),
        }
        n, k = len(tokens), len(positions)
        example["input_ids"][:n] = inputs
        example["token_type_ids"][:n] = types
        example["attention_mask"][:n] = 1
        example["masked_positions"][:k] = positions
        example["masked_ids"][:k] = original
        example["masked_weights"][:k] = 1
        return example


class PretrainingIterator(CheckpointableIterator):
    """Infinite iterator over pretraining batches, checkpointable with get_state/set_state."""

    state_name = "BERT data-pipeline"
    resume_advice = "resume with the same data and settings"


def pretraining_iterator(
    corpus: TokenizedCorpus,
    tokenizer: BertTokenizer,
    options: PretrainingOptions,
    *,
    batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    read_threads: int = 2,
    prefetch_batches: int = 4,
) -> PretrainingIterator:
    """This process's batches of ``batch_size`` examples, forever, deterministic for a seed.

    ``batch_size`` is the LOCAL number of rows (the global batch / process_count).
    """
    seed = int(seed) % 2**32
    chunks = plan_chunks(corpus, options, seed)
    if len(chunks) < process_count:
        raise UserError(
            f"{len(chunks)} pretraining chunks cannot be shared by {process_count} processes"
        )
    dataset = grain.MapDataset.source(ShuffledEpochs(chunks[process_index::process_count], seed))
    # Each process draws its own examples: the per-example seed includes the process.
    example_seed = (seed * 1_000_003 + process_index + 1) % 2**32
    dataset = dataset.random_map(MakeExample(corpus, tokenizer, options), seed=example_seed)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = dataset.to_iter_dataset(
        grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=2)
    )
    if prefetch_batches > 0:
        dataset = grain.experimental.ThreadPrefetchIterDataset(
            dataset, prefetch_buffer_size=prefetch_batches
        )
    identity = {
        "seed": seed,
        "process_index": process_index,
        "process_count": process_count,
        "num_chunks": len(chunks),
    }
    return PretrainingIterator(iter(dataset), identity)
