"""Training a SentencePiece model with jaxtrans's reserved ids (``jaxtrans.data.reserved_pieces``).

Both tokenizers train through here: the translation tokenizer (``data/translation/tokenizer.py``,
one model per language or one shared) and the BERT tokenizer
(``jaxtrans.data.tokenizers.bert_tokenizer``). Each reads a fixed uniform sample of its text
(``sample_indices``), so millions of sentences still train in a minute.
"""

import os
import re
from collections.abc import Iterable, Iterator

import numpy as np
import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.errors import UserError

# The sample of the training text is the same on every run.
_SAMPLE_SEED = 0
# SentencePiece's own words for the failures a config change cures (sentencepiece 0.2).
_REQUIRED_CHARS = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_COVERAGE = re.compile(r"character_coverage\(\) >= ([\d.]+) && \S+ <= ([\d.]+)")
VOCAB_SIZE_KEY = "--config.data.vocab_size"
COVERAGE_KEY = "--config.data.character_coverage"


def training_error(message: str, vocab_size: int, character_coverage: float) -> UserError:
    """A failed SentencePiece training (its RuntimeError's text) as a one-line UserError
    that names the config keys to change and the numbers to change them to."""
    failed = "SentencePiece training failed: "
    if match := _REQUIRED_CHARS.search(message):
        needed = int(match.group(2))
        return UserError(
            f"{failed}{VOCAB_SIZE_KEY}={vocab_size} is too small for this text: at "
            f"{COVERAGE_KEY}={character_coverage} it has {needed - vocab.NUM_RESERVED_IDS} "
            f"characters that each need a piece, {needed} pieces with the "
            f"{vocab.NUM_RESERVED_IDS} reserved ones; set {VOCAB_SIZE_KEY}={needed} or more, "
            f"or lower {COVERAGE_KEY} (SentencePiece takes 0.98 at least)"
        )
    if match := _TOO_HIGH.search(message):
        largest = int(match.group(2))
        return UserError(
            f"{failed}{VOCAB_SIZE_KEY}={vocab_size} is more pieces than the training text "
            f"gives; the largest vocabulary it allows is {largest}: set "
            f"{VOCAB_SIZE_KEY}={largest} or less, or train on more text"
        )
    if match := _COVERAGE.search(message):
        low, high = match.groups()
        return UserError(
            f"{failed}{COVERAGE_KEY}={character_coverage} is out of range: SentencePiece takes "
            f"{low} to {high}; set {COVERAGE_KEY}=0.9995 for Chinese or Japanese text, "
            f"{COVERAGE_KEY}=1.0 for others"
        )
    return UserError(failed + " ".join(message.split()))


def sample_indices(count: int, limit: int) -> np.ndarray:
    """At most ``limit`` of ``range(count)``: a uniform sample without replacement, fixed
    seed, sorted (files are read front to back); all of them when ``count <= limit``."""
    if count <= limit:
        return np.arange(count)
    rng = np.random.default_rng(_SAMPLE_SEED)
    return np.sort(rng.choice(count, size=limit, replace=False))


# SentencePiece's unigram training splits the sentences among its threads and sums their
# expected counts in thread order, so the pieces' scores (which decide how text is cut)
# depend on the thread count: with os.cpu_count() threads, the same recipe gave another
# tokenizer on a machine of another size (1, 2 and 16 threads: three sets of scores, the
# same pieces). A fixed count gives the same model file on every machine; threads beyond
# the cores share them (tests/unit/data/test_sentencepiece_threads.py). Two: the count the
# tokenizers of earlier versions were trained with on the 2-core machines that made the
# old workdirs of tests/fixtures, so an old recipe still trains the same file (a one-time
# cost of training on a large host: benchmarks/sentencepiece_threads.py).
TRAINING_THREADS = 2


def train_sentencepiece(
    sentences: Iterable[str],
    model_file: str | os.PathLike,
    *,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    normalization: str = "nmt_nfkc",
    hard_vocab_limit: bool = False,
) -> int:
    """Trains one model on ``sentences`` into ``model_file``; returns its vocabulary size.

    Ids 0..6 are pad, eos, bos, unk, [CLS], [SEP], [MASK]. A small corpus may give fewer
    than ``vocab_size`` pieces. ``normalization`` is a SentencePiece rule name
    ("identity" keeps the text as it is); ``hard_vocab_limit``: exactly ``vocab_size``
    pieces or an error. A UserError raised while reading ``sentences`` comes out as
    itself; a failed training as a one-line UserError, naming the config key to change
    where SentencePiece says what is wrong (``training_error``).
    """
    read_errors: list[UserError] = []

    def reported(sentences: Iterable[str]) -> Iterator[str]:
        # SentencePiece wraps errors of the iterator in its own; keep ours to re-raise.
        try:
            yield from sentences
        except UserError as error:
            read_errors.append(error)
            raise

    with open(model_file, "wb") as writer:
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=reported(sentences),
                model_writer=writer,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                normalization_rule_name=normalization,
                pad_id=vocab.PAD_ID,
                eos_id=vocab.EOS_ID,
                bos_id=vocab.BOS_ID,
                unk_id=vocab.UNK_ID,
                pad_piece=vocab.PAD_PIECE,
                eos_piece=vocab.EOS_PIECE,
                bos_piece=vocab.BOS_PIECE,
                unk_piece=vocab.UNK_PIECE,
                user_defined_symbols=list(vocab.USER_DEFINED_PIECES),
                # By default a small corpus that does not support vocab_size pieces gives
                # what it has.
                hard_vocab_limit=hard_vocab_limit,
                num_threads=TRAINING_THREADS,
                minloglevel=2,
            )
        except RuntimeError as e:
            if read_errors:
                raise read_errors[0] from None
            raise training_error(str(e), vocab_size, character_coverage) from None
    return spm.SentencePieceProcessor(model_file=str(model_file)).get_piece_size()
