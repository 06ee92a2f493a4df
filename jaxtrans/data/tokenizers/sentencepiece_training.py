"""Training a SentencePiece model with jaxtrans's reserved ids (``jaxtrans.data.reserved_pieces``).

Both tokenizers train through here: the translation tokenizer (``data/translation/tokenizer.py``,
one model per language or one shared) and the BERT tokenizer
(``jaxtrans.data.tokenizers.bert_tokenizer``). Each reads a fixed uniform sample of its text
(``sample_indices``), so millions of sentences still train in a minute.
"""

import os
from collections.abc import Iterable, Iterator

import numpy as np
import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.errors import UserError

# The sample of the training text is the same on every run.
_SAMPLE_SEED = 0


def sample_indices(count: int, limit: int) -> np.ndarray:
    """At most ``limit`` of ``range(count)``: a uniform sample without replacement, fixed
    seed, sorted (files are read front to back); all of them when ``count <= limit``."""
    if count <= limit:
        return np.arange(count)
    rng = np.random.default_rng(_SAMPLE_SEED)
    return np.sort(rng.choice(count, size=limit, replace=False))


def train_sentencepiece(
    sentences: Iterable[str],
    model_file: str | os.PathLike,
    *,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    normalization: str = "nmt_nfkc",
) -> int:
    """Trains one model on ``sentences`` into ``model_file``; returns its vocabulary size.

    Ids 0..6 are pad, eos, bos, unk, [CLS], [SEP], [MASK]. A small corpus may give fewer
    than ``vocab_size`` pieces. ``normalization`` is a SentencePiece rule name
    ("identity" keeps the text as it is). A UserError raised while reading ``sentences``
    comes out as itself; a failed training as a UserError.
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
                # A small corpus may not support vocab_size pieces; take what it has.
                hard_vocab_limit=False,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as e:
            if read_errors:
                raise read_errors[0] from None
            raise UserError(f"SentencePiece training failed: {str(e).strip()}") from None
    return spm.SentencePieceProcessor(model_file=str(model_file)).get_piece_size()
