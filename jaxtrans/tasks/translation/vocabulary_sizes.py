"""A translation run's vocabulary sizes without its data, for compiling its step ahead of
time (python -m jaxtrans.compile): the size a SentencePiece model is trained to, or the
pretrained tokenizer data.tokenizer names.

vocabulary_without_data  what the task's sizes come from, no data read or trained
"""

import tempfile
from dataclasses import dataclass
from typing import Any

from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer


@dataclass(frozen=True)
class VocabularySizes:
    """What resolve_config reads of a tokenizer, for a SentencePiece one not trained yet:
    each side has the pieces it is trained to."""

    vocab_size: int
    shared: bool

    @property
    def source_vocab_size(self) -> int:
        return self.vocab_size

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size


def vocabulary_without_data(data_config) -> Any:
    """A SentencePiece vocabulary of data.vocab_size pieces (the size it is trained to on
    enough text), or the pretrained tokenizer data.tokenizer names, read (its files are
    copied to a scratch directory, as a run copies them to its workdir)."""
    wanted = data_config.get("tokenizer", "sentencepiece") or "sentencepiece"
    if wanted == "sentencepiece":
        return VocabularySizes(int(data_config.vocab_size), bool(data_config.shared_vocab))
    with tempfile.TemporaryDirectory() as scratch:
        return load_or_train_tokenizer(data_config, scratch)
