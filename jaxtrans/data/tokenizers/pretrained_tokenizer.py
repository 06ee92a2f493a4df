"""A Hugging Face tokenizer (the ``tokenizers`` library) as a translation run's tokenizer.

``data.tokenizer`` names a ``tokenizer.json``, or a directory holding one (or holding only
a BERT ``vocab.txt``, with ``tokenizer_config.json``'s ``do_lower_case``): WordPiece,
BPE or Unigram. It serves both languages, unless ``data.target_tokenizer`` names another
for the target side. The files are copied into ``WORKDIR/tokenizer/huggingface/`` (and
``huggingface-target/``) so that the workdir alone can be evaluated.

The model, the pipeline and decoding use jaxtrans's fixed ids (pad 0, eos 1, bos 2). A
pretrained vocabulary puts its own special tokens elsewhere (bert-base-multilingual-cased:
[PAD] 0, [CLS] 101, [SEP] 102), so the ids are remapped at this boundary, a permutation
that swaps the vocabulary's pad / end / start tokens with the tokens at 0 / 1 / 2:

    pad  [PAD] or <pad>              (required)
    eos  [SEP], </s>, <eos>, ...     (required: it ends every sentence)
    bos  [CLS], <s>, <bos>, ...      (without one, an extra id after the vocabulary)

Remapping here rather than configuring the ids in the model keeps a single convention
for every pipeline, mask and decoder, and a trained model's embedding row i is simply
the vocabulary's token ``to_vocabulary[i]``.
"""

import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence

import numpy as np
import tokenizers
from tokenizers import decoders

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.errors import UserError, describe

HF_DIR = "huggingface"
HF_TARGET_DIR = "huggingface-target"
TOKENIZER_FILE = "tokenizer.json"
PAD_TOKENS = ("[PAD]", "<pad>", "<PAD>")
EOS_TOKENS = ("[SEP]", "</s>", "<eos>", "[EOS]", "<|endoftext|>")
BOS_TOKENS = ("[CLS]", "<s>", "<bos>", "[BOS]")
# A space between two Han characters or CJK / full-width punctuation marks: BERT's
# pre-tokenizer splits every one of them off, and its WordPiece decoder joins the words
# with spaces.
_CJK = "[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]"
_HAN_SPACE = re.compile(f"(?<={_CJK}) (?={_CJK})")


def _first_token(tokenizer: tokenizers.Tokenizer, candidates: Sequence[str]) -> str | None:
    return next((t for t in candidates if tokenizer.token_to_id(t) is not None), None)


def reserved_ids_permutation(size: int, pad: int, eos: int, bos: int | None) -> np.ndarray:
    """``to_model[vocabulary id]``: the permutation putting a vocabulary's pad / end / start
    ids (of ``size`` ids) on jaxtrans's reserved 0 / 1 / 2 and the tokens that held 0 / 1 / 2
    on the ids those left, in increasing order. ``bos`` None: the vocabulary has no start
    token and gets one extra id, ``size``, so the result has ``size + 1`` entries."""
    special = {pad: vocab.PAD_ID, eos: vocab.EOS_ID, size if bos is None else bos: vocab.BOS_ID}
    reserved = (vocab.PAD_ID, vocab.EOS_ID, vocab.BOS_ID)
    displaced = sorted(set(reserved) - set(special))  # vocabulary ids now taken
    vacated = sorted(set(special) - set(reserved))  # where they go instead
    to_model = np.arange(size + (bos is None))
    for vocabulary_id, model_id in special.items():
        to_model[vocabulary_id] = model_id
    to_model[displaced] = vacated
    return to_model


class PretrainedVocabulary:
    """One Hugging Face tokenizer with its special tokens on jaxtrans's reserved ids:
    ``to_model[vocabulary id]`` and ``to_vocabulary[model id]``."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, where: str):
        self._tokenizer = tokenizer
        pad = _first_token(tokenizer, PAD_TOKENS)
        eos = _first_token(tokenizer, EOS_TOKENS)
        bos = _first_token(tokenizer, BOS_TOKENS)
        for name, token, candidates in (("padding", pad, PAD_TOKENS), ("end", eos, EOS_TOKENS)):
            if token is None:
                raise UserError(
                    f"{where}: the tokenizer has no {name} token (one of "
                    f"{', '.join(candidates)}); add one to its vocabulary or use "
                    "--config.data.tokenizer=sentencepiece"
                )
        self.special_tokens = {"pad": pad, "eos": eos, "bos": bos}
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        extra_bos = bos is None  # a start token the vocabulary lacks: one more id
        self.vocab_size = size + extra_bos
        self.to_model = reserved_ids_permutation(
            size,
            tokenizer.token_to_id(pad),
            tokenizer.token_to_id(eos),
            None if extra_bos else tokenizer.token_to_id(bos),
        )
        self.to_vocabulary = np.argsort(self.to_model)
        self._join_han = isinstance(tokenizer.decoder, decoders.WordPiece)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> model ids, without special tokens (the pipeline adds EOS / BOS)."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [self.to_model[e.ids].tolist() for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        """Model ids -> text: stops at the first EOS, drops special tokens, joins WordPiece
        continuations (##) and the Han characters BERT's pre-tokenizer split apart."""
        content = []
        for i in ids:
            i = int(i)
            if i == vocab.EOS_ID:
                break
            if i not in (vocab.PAD_ID, vocab.BOS_ID):
                content.append(int(self.to_vocabulary[i]))
        text = self._tokenizer.decode(content, skip_special_tokens=True)
        return _HAN_SPACE.sub("", text) if self._join_han else text

    def save(self, path: str) -> None:
        self._tokenizer.save(path)


class PretrainedTokenizer:
    """The Tokenizer interface (jaxtrans.data.translation.tokenizer) over pretrained vocabularies:
    one for both sides (``target`` None: shared) or one each."""

    def __init__(self, source: PretrainedVocabulary, target: PretrainedVocabulary | None = None):
        self._source = source
        self._target = source if target is None else target

    @property
    def shared(self) -> bool:
        return self._source is self._target

    @property
    def source_vocab_size(self) -> int:
        return self._source.vocab_size

    @property
    def target_vocab_size(self) -> int:
        return self._target.vocab_size

    def encode_source_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._source.encode_batch(texts)

    def encode_target_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self._target.encode_batch(texts)

    def encode_source(self, text: str) -> list[int]:
        return self._source.encode_batch([text])[0]

    def encode_target(self, text: str) -> list[int]:
        return self._target.encode_batch([text])[0]

    def decode_source(self, ids: Iterable[int]) -> str:
        return self._source.decode(ids)

    def decode_target(self, ids: Iterable[int]) -> str:
        return self._target.decode(ids)

    def check_vocab_size(self, expected_source: int, expected_target: int | None = None) -> None:
        expected_target = expected_source if expected_target is None else expected_target
        actual = (self.source_vocab_size, self.target_vocab_size)
        if actual != (expected_source, expected_target):
            raise UserError(
                f"the workdir's tokenizer has vocabulary sizes source={actual[0]}, "
                f"target={actual[1]} but the checkpoint expects source={expected_source}, "
                f"target={expected_target}; use the workdir the checkpoint was trained in"
            )


def _wordpiece_from_vocab(directory: str) -> tokenizers.Tokenizer:
    """BERT's tokenizer from vocab.txt: its normaliser (lower-casing as
    tokenizer_config.json's do_lower_case says; Hugging Face's default, lower case, without
    one), pre-tokenizer, WordPiece model and decoder; bracketed tokens are special."""
    lowercase = True
    config_path = os.path.join(directory, "tokenizer_config.json")
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            lowercase = bool(json.load(f).get("do_lower_case", True))
    pieces = tokenizers.models.WordPiece.read_file(os.path.join(directory, "vocab.txt"))
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(pieces, unk_token="[UNK]"))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=lowercase)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    specials = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    tokenizer.add_special_tokens([t for t in specials if t in pieces])
    return tokenizer


def read_pretrained(path: str, flag: str = "tokenizer") -> tokenizers.Tokenizer:
    """The tokenizer of ``path`` (a tokenizer.json, or a directory with one or with a
    BERT vocab.txt); a WordPiece model without a decoder gets WordPiece's (## joining)."""
    where = f"--config.data.{flag}={path}"
    directory = path if os.path.isdir(path) else None
    if directory and os.path.isfile(os.path.join(directory, TOKENIZER_FILE)):
        path = os.path.join(directory, TOKENIZER_FILE)
    try:
        if directory and not os.path.isfile(path):
            if not os.path.isfile(os.path.join(directory, "vocab.txt")):
                raise UserError(
                    f"{where}: the directory has neither {TOKENIZER_FILE} nor vocab.txt; give a "
                    "Hugging Face tokenizer directory or file, or sentencepiece"
                )
            tokenizer = _wordpiece_from_vocab(directory)
        elif not os.path.isfile(path):
            raise UserError(
                f"{where}: no such file or directory; give a Hugging Face tokenizer "
                "directory or tokenizer.json, or sentencepiece"
            )
        else:
            tokenizer = tokenizers.Tokenizer.from_file(path)
    except UserError:
        raise
    except Exception as error:  # the tokenizers library raises its own exception types
        raise UserError(f"{where}: not a readable tokenizer ({describe(error)})") from error
    model = tokenizer.model
    if tokenizer.decoder is None and isinstance(model, tokenizers.models.WordPiece):
        tokenizer.decoder = decoders.WordPiece(prefix=model.continuing_subword_prefix)
    return tokenizer


def _copy_one(path: str, flag: str, target: str) -> PretrainedVocabulary:
    """Writes ``path``'s tokenizer as TARGET/tokenizer.json (with the vocab.txt and
    tokenizer configs beside it, if any); returns it."""
    vocabulary = PretrainedVocabulary(read_pretrained(path, flag), f"--config.data.{flag}={path}")
    os.makedirs(target)
    vocabulary.save(os.path.join(target, TOKENIZER_FILE))
    if os.path.isdir(path):
        for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.isfile(os.path.join(path, name)):
                shutil.copyfile(os.path.join(path, name), os.path.join(target, name))
    return vocabulary


def copy_pretrained(path: str, target_path: str, directory: str) -> dict:
    """Copies the tokenizer of ``path`` into DIRECTORY/huggingface/ and, when
    ``target_path`` is given, the target side's into DIRECTORY/huggingface-target/;
    returns their metadata."""
    source = _copy_one(path, "tokenizer", os.path.join(directory, HF_DIR))
    metadata = {"kind": "huggingface", "shared": not target_path}
    metadata["copied_from"] = os.path.abspath(path)
    metadata["special_tokens"] = source.special_tokens
    target = source
    if target_path:
        target = _copy_one(target_path, "target_tokenizer", os.path.join(directory, HF_TARGET_DIR))
        metadata["target_copied_from"] = os.path.abspath(target_path)
        metadata["target_special_tokens"] = target.special_tokens
    metadata.update(source_vocab_size=source.vocab_size, target_vocab_size=target.vocab_size)
    return metadata


def load_pretrained(directory: str, shared: bool = True) -> PretrainedTokenizer:
    """The tokenizer copied into ``directory`` (a workdir's tokenizer/) by copy_pretrained."""

    def load(name: str) -> PretrainedVocabulary:
        path = os.path.join(directory, name, TOKENIZER_FILE)
        return PretrainedVocabulary(tokenizers.Tokenizer.from_file(path), path)

    return PretrainedTokenizer(load(HF_DIR), None if shared else load(HF_TARGET_DIR))
