"""A Hugging Face Marian (opus-mt) directory's tokenizer as a translation run's tokenizer,
cutting and numbering text exactly as ``transformers.MarianTokenizer`` does.

A Marian directory holds ``source.spm`` and ``target.spm`` (SentencePiece models used only
to cut text into pieces), ``vocab.json`` (piece -> the id the model uses: ``</s>`` 0,
``<unk>`` 1, ``<pad>`` last), ``tokenizer_config.json`` (``source_lang``, ``target_lang``,
``separate_vocabs``, ...) and, with ``separate_vocabs``, ``target_vocab.json`` for the
target side. ``data.tokenizer=DIR`` copies these files into ``WORKDIR/tokenizer/marian/``.

Encoding one side, as MarianTokenizer does (without its final ``</s>``: the pipeline adds
EOS): the text is split around the special tokens ``</s>``, ``<unk>``, ``<pad>`` written in
it (each kept as itself); a piece of text beginning ``>>`` and holding ``<<`` has that
language code (``>>fra<<``) cut off as one piece; the rest is cut by the side's
SentencePiece model into pieces, and each piece is numbered by the side's vocabulary (a
piece it lacks: ``<unk>``). Decoding drops ``</s>``, ``<unk>`` and ``<pad>``, joins the
pieces with the SentencePiece model and turns ``▁`` into spaces (MarianTokenizer's
``decode(ids, skip_special_tokens=True)``, which uses the *source* model for a shared
vocabulary and the target model for separate ones).

Marian has no start token (its decoder starts from ``<pad>``), so the ids are remapped as
every pretrained vocabulary is (``pretrained_tokenizer.reserved_ids_permutation``), with
the start token one extra id after the vocabulary. For a vocabulary of V pieces
(``</s>`` 0, ``<unk>`` 1, ``<pad>`` V-1) the model's vocabulary has V + 1 ids and

    Marian id   V-1 (<pad>)  0 (</s>)  V (decoder start)  1 (<unk>)  2     others i
    model id    0            1         2                  V-1        V     i

A literal ``<pad>`` in text with separate vocabularies is numbered by the side's own
vocabulary (MarianTokenizer uses the source one for both sides): the same id in a model
directory, whose vocabularies must hold ``<pad>`` and ``</s>`` at config.json's one
``pad_token_id`` and ``eos_token_id`` (checked where the model is loaded,
jaxtrans.tasks.translation.translation_init.check_token_ids).
"""

import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.tokenizers.pretrained_tokenizer import (
    PretrainedTokenizer,
    reserved_ids_permutation,
)
from jaxtrans.errors import UserError, describe, json_type

MARIAN_DIR = "marian"
SOURCE_SPM = "source.spm"
TARGET_SPM = "target.spm"
VOCAB_FILE = "vocab.json"
TARGET_VOCAB_FILE = "target_vocab.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
EOS_PIECE = "</s>"
UNK_PIECE = "<unk>"
PAD_PIECE = "<pad>"
SPECIAL_PIECES = (EOS_PIECE, UNK_PIECE, PAD_PIECE)
# MarianTokenizer splits text around its special tokens, longest match first.
_SPECIAL = re.compile("|".join(re.escape(p) for p in sorted(SPECIAL_PIECES, key=len, reverse=True)))
# clean_up_tokenization_spaces=True in tokenizer_config.json: transformers' replacements.
_CLEAN_UP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def split_language_code(text: str) -> tuple[list[str], str]:
    """``">>fra<< Bonjour"`` -> ``([">>fra<<"], " Bonjour")``; text without a leading code
    -> ``([], text)`` (MarianTokenizer.remove_language_code)."""
    if text.startswith(">>") and (end := text.find("<<")) != -1:
        return [text[: end + 2]], text[end + 2 :]
    return [], text


class MarianVocabulary:
    """One side of a Marian tokenizer: ``cutter`` cuts text into pieces, ``pieces``
    (vocab.json: piece -> Marian id) numbers them, ``joiner`` turns pieces back into text.
    ``to_model[Marian id]`` and ``to_vocabulary[model id]`` map between the two numberings
    (``vocab_size`` = len(pieces) + 1 model ids)."""

    def __init__(
        self,
        cutter: spm.SentencePieceProcessor,
        pieces: dict[str, int],
        joiner: spm.SentencePieceProcessor,
        clean_up_spaces: bool = False,
    ):
        self._cutter = cutter
        self._joiner = joiner
        self._clean_up_spaces = clean_up_spaces
        size = len(pieces)
        self.pieces = pieces
        self.to_model = reserved_ids_permutation(size, pieces[PAD_PIECE], pieces[EOS_PIECE], None)
        self.to_vocabulary = np.argsort(self.to_model)
        self.vocab_size = size + 1
        self._model_ids = {piece: int(self.to_model[i]) for piece, i in pieces.items()}
        self._unk = self._model_ids[UNK_PIECE]
        self._piece_of = [""] * self.vocab_size  # model id -> piece ("" for the start id)
        for piece, model_id in self._model_ids.items():
            self._piece_of[model_id] = piece
        self._dropped = {self._model_ids[p] for p in SPECIAL_PIECES} | {vocab.BOS_ID}

    def _segments(self, text: str) -> list[str | tuple[str]]:
        """Text -> its pieces of plain text (to cut) and, as 1-tuples, the pieces kept
        whole: special tokens and language codes, in order."""
        segments: list[str | tuple[str]] = []
        start = 0
        for match in [*_SPECIAL.finditer(text), None]:
            chunk = text[start : match.start() if match else len(text)]
            if chunk:
                code, chunk = split_language_code(chunk)
                segments.extend((c,) for c in code)
                if chunk:
                    segments.append(chunk)
            if match:
                segments.append((match.group(),))
                start = match.end()
        return segments

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Texts -> model ids, without the final ``</s>`` (the pipeline adds EOS)."""
        segmented = [self._segments(text) for text in texts]
        plain = [s for segments in segmented for s in segments if isinstance(s, str)]
        cut = iter(self._cutter.encode(plain, out_type=str) if plain else [])
        get, unk = self._model_ids.get, self._unk
        encoded = []
        for segments in segmented:
            ids = []
            for segment in segments:
                if isinstance(segment, tuple):
                    ids.append(get(segment[0], unk))
                else:
                    ids.extend(get(piece, unk) for piece in next(cut))
            encoded.append(ids)
        return encoded

    def decode(self, ids: Iterable[int]) -> str:
        """Model ids -> text: stops at the first EOS; drops padding, the start id, ``<unk>``
        and the other special tokens; joins the rest as MarianTokenizer.decode does."""
        pieces = []
        for i in ids:
            i = int(i)
            if i == vocab.EOS_ID:
                break
            if i not in self._dropped:
                pieces.append(self._piece_of[i])
        text = self._joiner.decode_pieces(pieces).replace("▁", " ").strip()
        if self._clean_up_spaces:
            for spaced, joined in _CLEAN_UP:
                text = text.replace(spaced, joined)
        return text


class MarianTokenizer(PretrainedTokenizer):
    """The Tokenizer interface (data/translation/tokenizer.py) over a Marian directory's files.
    ``shared`` means one vocabulary (one id space) for both sides, as ``separate_vocabs``
    False does; each side still cuts text with its own SentencePiece model."""

    def __init__(
        self, source: MarianVocabulary, target: MarianVocabulary, shared: bool, config: dict
    ):
        super().__init__(source, target)
        self._shared = shared
        self.config = config  # tokenizer_config.json as read (source_lang, target_lang, ...)

    @property
    def shared(self) -> bool:
        return self._shared

    @property
    def source_vocabulary(self) -> MarianVocabulary:
        return self._source

    @property
    def target_vocabulary(self) -> MarianVocabulary:
        return self._target


def _read_json(path: str, required: bool = True) -> object:
    if not os.path.isfile(path):
        if not required:
            return {}
        raise UserError(f"{path}: no such file; a Marian tokenizer directory needs it")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise UserError(
            f"{path}: not readable JSON ({describe(error)}); restore the file"
        ) from None


def _read_vocabulary(path: str) -> dict[str, int]:
    """vocab.json: an object of piece -> id, the ids 0..V-1 each once, with ``</s>``,
    ``<unk>`` and ``<pad>``."""
    pieces = _read_json(path)
    if not isinstance(pieces, dict):
        raise UserError(f"{path}: holds {json_type(pieces)}, not an object of piece -> id")
    bad = next((k for k, v in pieces.items() if type(v) is not int), None)
    if bad is not None:
        raise UserError(f"{path}: the id of {bad!r} is not an integer; restore the file")
    for piece in SPECIAL_PIECES:
        if piece not in pieces:
            raise UserError(
                f"{path}: has no {piece} (Marian vocabularies hold </s>, <unk> and <pad>); "
                "restore the file or use a Marian directory converted by transformers"
            )
    if sorted(pieces.values()) != list(range(len(pieces))):
        raise UserError(
            f"{path}: the ids are not 0..{len(pieces) - 1} each used once; restore the file"
        )
    if pieces[PAD_PIECE] <= vocab.BOS_ID:
        raise UserError(f"{path}: <pad> has id {pieces[PAD_PIECE]}, expected the last id")
    return pieces


def _read_sentencepiece(path: str) -> spm.SentencePieceProcessor:
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file; a Marian tokenizer directory needs it")
    try:
        return spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as error:
        raise UserError(f"{path}: not a SentencePiece model ({describe(error)})") from None


def _check_special_tokens(path: str, settings: object) -> None:
    """UserError if ``settings`` (tokenizer_config.json or special_tokens_map.json) names
    an end, unknown or padding token other than Marian's ``</s>``, ``<unk>``, ``<pad>``."""
    if not isinstance(settings, dict):
        return
    for key, piece in zip(("eos_token", "unk_token", "pad_token"), SPECIAL_PIECES, strict=True):
        given = settings.get(key, piece)
        given = given.get("content", piece) if isinstance(given, dict) else given
        if given != piece:
            raise UserError(f"{path}: {key} is {given!r}; only Marian's own {piece} is supported")


def _read_config(directory: str) -> dict:
    """tokenizer_config.json (none: transformers' defaults), with special_tokens_map.json
    checked for special tokens other than Marian's."""
    path = os.path.join(directory, CONFIG_FILE)
    config = _read_json(path, required=False)
    if not isinstance(config, dict):
        raise UserError(f"{path}: holds {json_type(config)}, not an object; restore the file")
    _check_special_tokens(path, config)
    special_path = os.path.join(directory, SPECIAL_TOKENS_FILE)
    _check_special_tokens(special_path, _read_json(special_path, required=False))
    return config


def is_marian_directory(path: str) -> bool:
    """Whether ``path`` is a directory laid out as a Marian tokenizer (it has source.spm or
    target.spm; read_marian says what else is missing)."""
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in (SOURCE_SPM, TARGET_SPM)
    )


def read_marian(directory: str) -> MarianTokenizer:
    """The tokenizer of a Marian directory; UserError (naming the file) if a file is
    missing or malformed."""
    config = _read_config(directory)
    separate = bool(config.get("separate_vocabs", False))
    clean_up = bool(config.get("clean_up_tokenization_spaces", False))
    source_spm = _read_sentencepiece(os.path.join(directory, SOURCE_SPM))
    target_spm = _read_sentencepiece(os.path.join(directory, TARGET_SPM))
    source_pieces = _read_vocabulary(os.path.join(directory, VOCAB_FILE))
    if not separate:
        # One vocabulary; MarianTokenizer decodes both sides with the source model.
        source = MarianVocabulary(source_spm, source_pieces, source_spm, clean_up)
        target = MarianVocabulary(target_spm, source_pieces, source_spm, clean_up)
        return MarianTokenizer(source, target, shared=True, config=config)
    target_path = os.path.join(directory, TARGET_VOCAB_FILE)
    if not os.path.isfile(target_path):
        raise UserError(
            f"{target_path}: no such file, but {CONFIG_FILE} says separate_vocabs; "
            "restore it or set separate_vocabs to false"
        )
    target_pieces = _read_vocabulary(target_path)
    source = MarianVocabulary(source_spm, source_pieces, source_spm, clean_up)
    target = MarianVocabulary(target_spm, target_pieces, target_spm, clean_up)
    return MarianTokenizer(source, target, shared=False, config=config)


def copy_marian(path: str, directory: str) -> dict:
    """Copies the tokenizer files of the Marian directory ``path`` into DIRECTORY/marian/
    (DIRECTORY: a workdir's tokenizer/ being written) after reading them; returns the
    metadata for DIRECTORY/tokenizer.json."""
    if not os.path.isdir(path):
        raise UserError(f"--config.data.tokenizer={path}: not a directory; give a Marian one")
    tokenizer = read_marian(path)
    target = os.path.join(directory, MARIAN_DIR)
    os.makedirs(target)
    names = (SOURCE_SPM, TARGET_SPM, VOCAB_FILE, CONFIG_FILE, SPECIAL_TOKENS_FILE)
    names += () if tokenizer.shared else (TARGET_VOCAB_FILE,)
    for name in names:
        if os.path.isfile(os.path.join(path, name)):
            shutil.copyfile(os.path.join(path, name), os.path.join(target, name))
    return {
        "kind": "marian",
        "shared": tokenizer.shared,
        "copied_from": os.path.abspath(path),
        "source_lang": tokenizer.config.get("source_lang"),
        "target_lang": tokenizer.config.get("target_lang"),
        "source_vocab_size": tokenizer.source_vocab_size,
        "target_vocab_size": tokenizer.target_vocab_size,
    }


def load_marian(directory: str) -> MarianTokenizer:
    """The tokenizer copied into ``directory`` (a workdir's tokenizer/) by copy_marian."""
    return read_marian(os.path.join(directory, MARIAN_DIR))
