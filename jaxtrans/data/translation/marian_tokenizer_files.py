"""A translation run's tokenizer (``WORKDIR/tokenizer/``) as the tokenizer files of a
Hugging Face Marian directory, so that ``transformers.MarianTokenizer.from_pretrained``
gives the run's ids (through the permutation of jaxtrans.data.tokenizers.marian_tokenizer).

- SentencePiece (trained by jaxtrans, N pieces with pad 0, eos 1, bos 2, unk 3, ...):
  the model becomes ``source.spm`` and ``target.spm`` (the same model when shared; with
  one model per side, each its own and ``target_vocab.json`` beside ``vocab.json``).
  ``vocab.json`` numbers V = N - 1 pieces so that reading the directory back gives the
  run's ids: Marian id m holds the piece of model id ``to_model[m]``, where ``to_model``
  is the permutation every Marian vocabulary of V pieces gets (``</s>`` 0, ``<pad>``
  V-1, the decoder start the extra id V). So ``</s>`` is 0, the run's last two pieces
  are 1 and 2, ``<unk>`` stays 3, ``<pad>`` is V-1, and ``<s>`` (model id 2) is not in
  the file: it is the decoder start, Marian id V. Marian has one pad id for both sides:
  with one model per side of different sizes, ``<pad>`` is at P, the smaller vocabulary's
  last id, in both files (the larger one's pieces P and V then take Marian ids 1 and 2).
- Marian (copied in from a Marian directory): its files, copied back.

The model's side of the export takes its token tables' rows with ``huggingface_rows``:
Hugging Face row m (m < V) of an embedding, of ``final_logits_bias`` and of an untied
output is the run's row ``to_model[m]``, except ``<pad>`` (V-1 or P), Marian's decoder start,
which takes the run's start row (BOS, 2); the run's padding row is left out. This is the
inverse of jaxtrans.models.marian.from_huggingface, which copies ``<pad>``'s row into the start row:
config.json says ``vocab_size`` V, ``eos_token_id`` 0 and ``pad_token_id`` =
``decoder_start_token_id`` = V-1, and generation forbids V-1 (``bad_words_ids`` [[V-1]],
as opus-mt's do). Text holding the strings ``</s>``, ``<unk>``, ``<pad>`` or starting with
a ``>>xx<<`` language code is cut by MarianTokenizer around them, which the run's
SentencePiece model does not do; other text gets exactly the run's ids.
"""

import json
import os
import shutil

import numpy as np
import sentencepiece as spm

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.tokenizers.marian_tokenizer import (
    CONFIG_FILE,
    EOS_PIECE,
    MARIAN_DIR,
    PAD_PIECE,
    SOURCE_SPM,
    SPECIAL_TOKENS_FILE,
    TARGET_SPM,
    TARGET_VOCAB_FILE,
    UNK_PIECE,
    VOCAB_FILE,
    MarianTokenizer,
    MarianVocabulary,
    read_marian,
)
from jaxtrans.data.tokenizers.pretrained_tokenizer import reserved_ids_permutation
from jaxtrans.data.translation.tokenizer import (
    METADATA_FILE,
    SHARED_MODEL,
    SOURCE_MODEL,
    TARGET_MODEL,
)
from jaxtrans.errors import UserError, describe


def marian_pieces(model: spm.SentencePieceProcessor, pad_id: int | None = None) -> dict[str, int]:
    """vocab.json for a SentencePiece model with jaxtrans's reserved ids: piece -> Marian id,
    one fewer than the model's pieces (``<s>`` becomes the extra decoder-start id), with
    ``<pad>`` at ``pad_id`` (None: the last id)."""
    size = model.get_piece_size() - 1
    to_model = reserved_ids_permutation(size, size - 1 if pad_id is None else pad_id, 0, None)
    return {model.id_to_piece(int(to_model[m])): m for m in range(size)}


def huggingface_rows(vocabulary: MarianVocabulary) -> np.ndarray:
    """int [V]: the model id whose row is Hugging Face row m of a token table, for the V
    Marian ids of ``vocabulary``; the decoder start ``<pad>`` takes the start row (BOS)."""
    size = vocabulary.vocab_size - 1
    rows = vocabulary.to_model[:size].copy()
    rows[vocabulary.pieces[PAD_PIECE]] = vocab.BOS_ID
    return rows


def _write_json(path: str, contents: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(contents, indent=2, ensure_ascii=False) + "\n")


def _read_model(path: str) -> spm.SentencePieceProcessor:
    try:
        model = spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as error:
        raise UserError(f"{path}: not a SentencePiece model ({describe(error)})") from None
    reserved = (vocab.PAD_ID, vocab.EOS_ID, vocab.BOS_ID, vocab.UNK_ID)
    if [model.id_to_piece(i) for i in reserved] != ["<pad>", EOS_PIECE, "<s>", UNK_PIECE]:
        raise UserError(
            f"{path}: not a jaxtrans model (pad 0, eos 1, bos 2, unk 3); train the run again"
        )
    return model


def _write_sentencepiece(
    directory: str, metadata: dict, output: str, source_lang: str, target_lang: str
) -> None:
    shared = bool(metadata.get("shared"))
    source = os.path.join(directory, SHARED_MODEL if shared else SOURCE_MODEL)
    target = source if shared else os.path.join(directory, TARGET_MODEL)
    models = {path: _read_model(path) for path in (source, target)}
    # Marian's one pad id: the last of the smaller vocabulary (one fewer id than pieces).
    pad_id = min(model.get_piece_size() for model in models.values()) - 2
    for model_file, spm_file, vocab_file in (
        (source, SOURCE_SPM, VOCAB_FILE),
        (target, TARGET_SPM, TARGET_VOCAB_FILE),
    ):
        pieces = marian_pieces(models[model_file], pad_id)
        shutil.copyfile(model_file, os.path.join(output, spm_file))
        if vocab_file == VOCAB_FILE or not shared:
            _write_json(os.path.join(output, vocab_file), pieces)
    specials = {"eos_token": EOS_PIECE, "unk_token": UNK_PIECE, "pad_token": PAD_PIECE}
    config = {
        "source_lang": source_lang,
        "target_lang": target_lang,
        "separate_vocabs": not shared,
        "model_max_length": 512,
        "tokenizer_class": "MarianTokenizer",
        **specials,
    }
    _write_json(os.path.join(output, CONFIG_FILE), config)
    _write_json(os.path.join(output, SPECIAL_TOKENS_FILE), specials)


def write_marian_tokenizer(
    tokenizer_dir: str, output: str, source_lang: str, target_lang: str
) -> MarianTokenizer:
    """Writes the Marian tokenizer files of the run tokenizer in ``tokenizer_dir`` (a
    workdir's tokenizer/) into the existing directory ``output``; ``source_lang`` and
    ``target_lang`` go into tokenizer_config.json (a Marian tokenizer keeps its own).
    Returns the files read back (``huggingface_rows`` of its ``source_vocabulary`` and
    ``target_vocabulary``: the rows the model's export takes)."""
    metadata_path = os.path.join(tokenizer_dir, METADATA_FILE)
    try:
        with open(metadata_path, encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, ValueError) as error:
        raise UserError(
            f"{metadata_path}: cannot be read ({describe(error)}); export a trained workdir"
        ) from None
    kind = metadata.get("kind", "sentencepiece")
    if kind == "marian":
        copied = os.path.join(tokenizer_dir, MARIAN_DIR)
        for name in sorted(os.listdir(copied)):
            shutil.copyfile(os.path.join(copied, name), os.path.join(output, name))
    elif kind == "sentencepiece":
        _write_sentencepiece(tokenizer_dir, metadata, output, source_lang, target_lang)
    else:
        raise UserError(
            f"{metadata_path}: the run's tokenizer is a {kind} one, which has no Marian "
            "form; export a run with a SentencePiece or Marian tokenizer"
        )
    return read_marian(output)
