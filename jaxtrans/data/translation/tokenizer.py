"""SentencePiece tokenizers trained from the training data and kept in the workdir (or,
with ``data.tokenizer`` a path, a Hugging Face tokenizer copied into it: see
data/tokenizers/pretrained_tokenizer.py, and for a Marian directory marian_tokenizer.py).

``load_or_train_tokenizer`` trains on first use into ``WORKDIR/tokenizer/`` and reuses it on
restart and in evaluation. One model serves both languages (``shared_vocab``, needed for
shared embeddings) or each side has its own. Every model reserves the ids of
``jaxtrans.data.reserved_pieces`` (pad 0, eos 1, bos 2, unk 3, [CLS] 4, [SEP] 5, [MASK] 6).

Training reads at most ``spm_max_sentences`` sentences per model, sampled uniformly from the
training pairs (fixed sample seed), so millions of pairs still train in a minute.
"""

import json
import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.records import PairSource
from jaxtrans.data.tokenizers.marian_tokenizer import copy_marian, is_marian_directory, load_marian
from jaxtrans.data.tokenizers.pretrained_tokenizer import (
    PretrainedTokenizer,
    copy_pretrained,
    load_pretrained,
)
from jaxtrans.data.tokenizers.sentencepiece_training import sample_indices, train_sentencepiece
from jaxtrans.data.translation.sources import source_kind, training_pairs
from jaxtrans.errors import UserError, describe, json_type
from jaxtrans.workdirs.workdir import new_directory

TOKENIZER_DIR = "tokenizer"
METADATA_FILE = "tokenizer.json"
SHARED_MODEL = "shared.model"
SOURCE_MODEL = "source.model"
TARGET_MODEL = "target.model"


class Tokenizer:
    """Source and target SentencePiece models (the same object when the vocabulary is shared)."""

    def __init__(self, source: spm.SentencePieceProcessor, target: spm.SentencePieceProcessor):
        for model in (source, target):
            if model.piece_to_id("[MASK]") != vocab.MASK_ID or model.eos_id() != vocab.EOS_ID:
                raise UserError(
                    "tokenizer model does not use jaxtrans's reserved ids (pad 0, eos 1, bos 2, "
                    "unk 3, [CLS] 4, [SEP] 5, [MASK] 6); delete WORKDIR/tokenizer to retrain"
                )
        self._source = source
        self._target = target

    @property
    def shared(self) -> bool:
        return self._source is self._target

    @property
    def source_vocab_size(self) -> int:
        return self._source.get_piece_size()

    @property
    def target_vocab_size(self) -> int:
        return self._target.get_piece_size()

    def sentencepiece_model(self, side: str) -> spm.SentencePieceProcessor:
        """The SentencePiece model of ``side`` ("source" or "target"), for an export."""
        return {"source": self._source, "target": self._target}[side]

    def encode_source(self, text: str) -> list[int]:
        """Source text -> piece ids, without EOS."""
        return self._source.encode(text)

    def encode_target(self, text: str) -> list[int]:
        """Target text -> piece ids, without BOS/EOS."""
        return self._target.encode(text)

    def encode_source_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._source.encode(list(texts))

    def encode_target_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._target.encode(list(texts))

    def decode_target(self, ids: Iterable[int]) -> str:
        """Target ids -> text: stops at the first EOS, drops PAD and BOS."""
        return self._target.decode(_content_ids(ids))

    def decode_source(self, ids: Iterable[int]) -> str:
        """Source ids -> text, with the same rules as ``decode_target``."""
        return self._source.decode(_content_ids(ids))

    def check_vocab_size(self, expected_source: int, expected_target: int | None = None) -> None:
        """Raises UserError unless the vocabularies have the sizes a checkpoint was built for."""
        expected_target = expected_source if expected_target is None else expected_target
        actual = (self.source_vocab_size, self.target_vocab_size)
        if actual != (expected_source, expected_target):
            raise UserError(
                f"the workdir's tokenizer has vocabulary sizes source={actual[0]}, "
                f"target={actual[1]} but the checkpoint expects source={expected_source}, "
                f"target={expected_target}; use the workdir the checkpoint was trained in"
            )


def _content_ids(ids: Iterable[int]) -> list[int]:
    """Ids before the first EOS, without PAD and BOS."""
    content = []
    for i in ids:
        i = int(i)
        if i == vocab.EOS_ID:
            break
        if i not in (vocab.PAD_ID, vocab.BOS_ID):
            content.append(i)
    return content


def tokenizer_dir(workdir: str) -> str:
    return os.path.join(workdir, TOKENIZER_DIR)


def load_tokenizer(workdir: str) -> "Tokenizer | PretrainedTokenizer":
    """The tokenizer saved in ``workdir`` (SentencePiece, or a Hugging Face tokenizer
    copied in by data/tokenizers/pretrained_tokenizer.py or marian_tokenizer.py); UserError if
    is none."""
    directory = tokenizer_dir(workdir)
    metadata_path = os.path.join(directory, METADATA_FILE)
    if not os.path.isfile(metadata_path):
        raise UserError(f"no tokenizer in {directory}; train in this workdir first")

    def load(name: str) -> spm.SentencePieceProcessor:
        return spm.SentencePieceProcessor(model_file=os.path.join(directory, name))

    try:
        with open(metadata_path, encoding="utf-8") as f:
            metadata = json.load(f)
        if not isinstance(metadata, dict):
            raise ValueError(f"{METADATA_FILE} holds {json_type(metadata)}, not an object")
        if metadata.get("kind") == "huggingface":
            return load_pretrained(directory, shared=metadata["shared"])
        if metadata.get("kind") == "marian":
            return load_marian(directory)
        if metadata["shared"]:
            model = load(SHARED_MODEL)
            return Tokenizer(model, model)
        return Tokenizer(load(SOURCE_MODEL), load(TARGET_MODEL))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, RecursionError) as error:
        raise UserError(
            f"the tokenizer in {directory} cannot be read ({describe(error)}); restore it from "
            "a copy of the workdir (checkpoints need the tokenizer they were trained with)"
        ) from error


def load_or_train_tokenizer(data_config, workdir: str) -> Tokenizer:
    """The workdir's tokenizer, trained from the training data on first use.

    Call it on every process; with several processes sharing a workdir, let process 0
    call it first so that only one trains.
    """
    wanted = data_config.get("tokenizer", "sentencepiece") or "sentencepiece"
    if wanted == "sentencepiece" and data_config.get("target_tokenizer"):
        raise UserError(
            f"--config.data.target_tokenizer={data_config.target_tokenizer} is the target side "
            "of a Hugging Face pair: set --config.data.tokenizer to the source side's"
        )
    metadata_path = os.path.join(tokenizer_dir(workdir), METADATA_FILE)
    if not os.path.isfile(metadata_path):
        if wanted == "sentencepiece":
            train_tokenizer(data_config, workdir)
        else:
            complete = lambda path: os.path.isfile(os.path.join(path, METADATA_FILE))  # noqa: E731
            with new_directory(workdir, TOKENIZER_DIR, complete) as scratch:
                target = data_config.get("target_tokenizer", "")
                if is_marian_directory(wanted):
                    if target:
                        raise UserError(
                            f"--config.data.tokenizer={wanted} is a Marian directory, which "
                            "holds both sides: leave --config.data.target_tokenizer empty"
                        )
                    metadata = copy_marian(wanted, scratch)
                else:
                    metadata = copy_pretrained(wanted, target, scratch)
                with open(os.path.join(scratch, METADATA_FILE), "w") as f:
                    json.dump(metadata, f, indent=2)
    tokenizer = load_tokenizer(workdir)
    has = "sentencepiece" if isinstance(tokenizer, Tokenizer) else "a Hugging Face tokenizer"
    if (wanted == "sentencepiece") != isinstance(tokenizer, Tokenizer):
        raise UserError(
            f"{tokenizer_dir(workdir)} holds {has} but --config.data.tokenizer={wanted}; "
            "resume with the tokenizer the run began with, or use a new --workdir"
        )
    return tokenizer


def _sentences(
    pairs: PairSource, indices: np.ndarray, sides: tuple[int, ...], used: list[int]
) -> Iterator[str]:
    """The sides of the sampled pairs; ``used[0]`` counts the pairs that are not None."""
    for i in indices:
        pair = pairs[int(i)]
        if pair is not None:
            used[0] += 1
            for side in sides:
                yield pair[side]


def _train_model(
    pairs: PairSource, indices: np.ndarray, sides: tuple[int, ...], path: str, data_config
) -> int:
    """Trains one SentencePiece model on ``sides`` of the sampled pairs into ``path``;
    returns its vocabulary size."""
    used = [0]
    try:
        return train_sentencepiece(
            _sentences(pairs, indices, sides, used),
            path,
            vocab_size=data_config.vocab_size,
            model_type=data_config.spm_model_type,
            character_coverage=data_config.character_coverage,
            normalization=data_config.spm_normalization,
        )
    except UserError:
        if used[0] or not len(indices):
            raise
        # Every sampled line was malformed and skipped: say so, not SentencePiece's
        # "!sentences_.empty()".
        where = (
            f"--config.data.train={data_config.train}"
            if source_kind(data_config) == "files"
            else "the training data"
        )
        raise UserError(
            f"{where}: all {len(indices)} lines read to train the tokenizer are malformed "
            "(skipped with --config.data.skip_malformed=True); fix the data files"
        ) from None


def train_tokenizer(data_config, workdir: str) -> None:
    """Trains the tokenizer(s) into ``WORKDIR/tokenizer/`` (written whole or not at all)."""
    pairs = training_pairs(data_config)
    complete = lambda path: os.path.isfile(os.path.join(path, METADATA_FILE))  # noqa: E731
    with new_directory(workdir, TOKENIZER_DIR, complete) as scratch:
        metadata = {
            "shared": bool(data_config.shared_vocab),
            "model_type": data_config.spm_model_type,
            "requested_vocab_size": data_config.vocab_size,
            "character_coverage": data_config.character_coverage,
            "normalization": data_config.spm_normalization,
        }
        if data_config.shared_vocab:
            indices = sample_indices(len(pairs), max(1, data_config.spm_max_sentences // 2))
            path = os.path.join(scratch, SHARED_MODEL)
            size = _train_model(pairs, indices, (0, 1), path, data_config)
            metadata.update(source_vocab_size=size, target_vocab_size=size)
        else:
            indices = sample_indices(len(pairs), data_config.spm_max_sentences)
            for side, name in ((0, SOURCE_MODEL), (1, TARGET_MODEL)):
                path = os.path.join(scratch, name)
                size = _train_model(pairs, indices, (side,), path, data_config)
                metadata[f"{('source', 'target')[side]}_vocab_size"] = size
        metadata["sampled_pairs"] = len(indices)
        with open(os.path.join(scratch, METADATA_FILE), "w") as f:
            json.dump(metadata, f, indent=2)
