"""The tokenizers BERT data can use, behind one small interface.

- ``SentencePieceBertTokenizer``: a SentencePiece model trained by us on the pretraining
  text, with jaxtrans's reserved ids (pad 0, eos 1, bos 2, unk 3, [CLS] 4, [SEP] 5,
  [MASK] 6; see ``jaxtrans.data.reserved_pieces``).
- ``WordPieceTokenizer`` (``jaxtrans.data.tokenizers.wordpiece``): the ``vocab.txt`` of a Hugging
  Face checkpoint, so fine-tuning released weights uses their vocabulary.

``load_or_train_bert_tokenizer`` picks one from the data config: the checkpoint's
WordPiece vocabulary when ``hf_checkpoint`` is set, else a SentencePiece model trained on
first use into ``WORKDIR/bert_tokenizer/`` and reused on restart.
"""

import os
from collections.abc import Sequence
from typing import Protocol

import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.tokenizers.sentencepiece_training import sample_indices, train_sentencepiece
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError, describe
from jaxtrans.workdirs.workdir import new_directory

TOKENIZER_DIR = "bert_tokenizer"
MODEL_FILE = "spm.model"


class BertTokenizer(Protocol):
    """What the BERT data pipelines need from a tokenizer."""

    vocab_size: int
    pad_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    unk_id: int
    # Ids that are never a masked token's random replacement ([PAD], [CLS], [unused7]...).
    special_ids: frozenset[int]

    def encode(self, text: str) -> list[int]:
        """One text -> ids, without [CLS] / [SEP]."""
        ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, ids: list[int]) -> str: ...

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary entry of one id (e.g. ``##ing``, ``▁the``, ``[SEP]``)."""
        ...


class SentencePieceBertTokenizer:
    """A SentencePiece model with the reserved BERT ids of ``jaxtrans.data.reserved_pieces``."""

    def __init__(self, model_file: str | os.PathLike):
        if not os.path.isfile(model_file):
            raise UserError(f"{model_file} not found; train the BERT tokenizer first")
        try:
            self._model = spm.SentencePieceProcessor(model_file=str(model_file))
        except (OSError, RuntimeError) as error:
            raise UserError(
                f"{model_file} cannot be read as a SentencePiece model ({describe(error)}); "
                "restore it from a copy of the workdir"
            ) from None
        reserved = [self._model.id_to_piece(i) for i in range(vocab.NUM_RESERVED_IDS)]
        expected = [vocab.PAD_PIECE, vocab.EOS_PIECE, vocab.BOS_PIECE, vocab.UNK_PIECE]
        if reserved != [*expected, *vocab.USER_DEFINED_PIECES]:
            raise UserError(
                f"{model_file} does not use jaxtrans's reserved ids (pad 0, eos 1, bos 2, "
                "unk 3, [CLS] 4, [SEP] 5, [MASK] 6); delete it to retrain"
            )
        self.vocab_size = self._model.get_piece_size()
        self.pad_id = vocab.PAD_ID
        self.cls_id = vocab.CLS_ID
        self.sep_id = vocab.SEP_ID
        self.mask_id = vocab.MASK_ID
        self.unk_id = vocab.UNK_ID
        self.special_ids = frozenset(range(vocab.NUM_RESERVED_IDS))

    def encode(self, text: str) -> list[int]:
        return self._model.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._model.encode(list(texts))

    def decode(self, ids: list[int]) -> str:
        return self._model.decode([int(i) for i in ids if int(i) not in self.special_ids])

    def id_to_piece(self, token_id: int) -> str:
        return self._model.id_to_piece(int(token_id))


def _sample(documents: Sequence[Sequence[str]], max_sentences: int) -> list[str]:
    """At most ``max_sentences`` sentences, a fixed uniform sample (document order kept)."""
    sentences = [s for doc in documents for s in doc]
    return [sentences[i] for i in sample_indices(len(sentences), max_sentences)]


def load_or_train_bert_tokenizer(
    data_config, workdir: str, documents: Sequence[Sequence[str]]
) -> BertTokenizer:
    """The tokenizer of a BERT run (see module doc).

    ``documents`` (lists of sentences) train the SentencePiece model on first use.
    With several processes sharing a workdir, let process 0 call this first.
    """
    if data_config.hf_checkpoint:
        return WordPieceTokenizer.from_huggingface(data_config.hf_checkpoint)
    model_file = os.path.join(workdir, TOKENIZER_DIR, MODEL_FILE)
    if os.path.isfile(model_file):
        return SentencePieceBertTokenizer(model_file)
    complete = lambda path: os.path.isfile(os.path.join(path, MODEL_FILE))  # noqa: E731
    with new_directory(workdir, TOKENIZER_DIR, complete) as scratch:
        train_sentencepiece(
            _sample(documents, data_config.spm_max_sentences),
            os.path.join(scratch, MODEL_FILE),
            vocab_size=data_config.vocab_size,
            model_type=data_config.spm_model_type,
            character_coverage=data_config.character_coverage,
        )
    return SentencePieceBertTokenizer(model_file)
