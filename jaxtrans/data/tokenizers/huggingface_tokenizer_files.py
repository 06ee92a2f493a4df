"""A BERT run's tokenizer (``WORKDIR/bert_tokenizer/``) as the tokenizer files of a
Hugging Face model directory, so that ``AutoTokenizer.from_pretrained`` gives the ids the
run was trained on.

- WordPiece (``vocab.txt``, from a Hugging Face checkpoint): ``vocab.txt`` and a
  ``tokenizer_config.json`` with the options the run used (``do_lower_case``,
  ``strip_accents``, ``tokenize_chinese_chars``): a ``BertTokenizer``. A run that started
  from a directory saved by transformers 5 holds that directory's ``tokenizer.json``
  instead of ``vocab.txt``; it is copied as it is, with the same ``tokenizer_config.json``
  (transformers takes the vocabulary from it and the options from the config, as it did
  when the run started).
- SentencePiece (``spm.model``, trained by jaxtrans) of the unigram or bpe kind: a
  ``tokenizer.json`` built with the ``tokenizers`` library from the model's pieces and
  scores (bpe: the merges they imply) and its normalizer (the model's NFKC character
  map; whitespace trimmed and runs of it collapsed; ``▁`` for spaces and before the
  text), with ``[CLS]``, ``[SEP]`` and ``[MASK]`` as special tokens at ids 4, 5, 6 and
  the ``[CLS] A [SEP] B [SEP]`` template.
  Text without those marks gets exactly ``SentencePieceBertTokenizer.encode``'s ids; a
  ``[MASK]`` in text splits it, as ``jaxtrans.tasks.bert.bert_predict.encode_with_masks`` does.
  Other SentencePiece kinds (char, word) are not converted: the caller is told which
  file is missing and why.
"""

import json
import shutil
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.tokenizers.bert_tokenizer import MODEL_FILE
from jaxtrans.data.tokenizers.wordpiece import (
    CLS_PIECE,
    MASK_PIECE,
    PAD_PIECE,
    SEP_PIECE,
    TOKENIZER_CONFIG_FILE,
    UNK_PIECE,
    WordPieceTokenizer,
    read_tokenizer_config,
)
from jaxtrans.errors import UserError, describe

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"


def write_huggingface_tokenizer(tokenizer_dir: Path, output: Path, max_length: int) -> list[str]:
    """Write the Hugging Face tokenizer files of the run tokenizer in ``tokenizer_dir``
    into the directory ``output``; ``max_length``: the model's longest input. Returns
    notes for the user (one line each): what could not be written, and why."""
    if (tokenizer_dir / MODEL_FILE).is_file():
        return _write_sentencepiece(tokenizer_dir / MODEL_FILE, output, max_length)
    for name in (VOCAB_FILE, TOKENIZER_FILE):
        if (tokenizer_dir / name).is_file():
            _write_wordpiece(tokenizer_dir, name, output, max_length)
            return []
    raise UserError(f"{tokenizer_dir} holds none of {VOCAB_FILE}, {TOKENIZER_FILE}, {MODEL_FILE}")


def _write_json(path: Path, contents: dict) -> None:
    path.write_text(json.dumps(contents, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_wordpiece(tokenizer_dir: Path, name: str, output: Path, max_length: int) -> None:
    """``name``: the run's vocabulary file (vocab.txt or tokenizer.json), copied as it is."""
    options = read_tokenizer_config(tokenizer_dir / TOKENIZER_CONFIG_FILE)
    WordPieceTokenizer(tokenizer_dir / name)  # a damaged file: UserError before writing
    shutil.copyfile(tokenizer_dir / name, output / name)
    _write_json(
        output / TOKENIZER_CONFIG_FILE,
        {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": options.get("do_lower_case", True),
            "strip_accents": options.get("strip_accents"),
            "tokenize_chinese_chars": options.get("tokenize_chinese_chars", True),
            "unk_token": UNK_PIECE,
            "sep_token": SEP_PIECE,
            "pad_token": PAD_PIECE,
            "cls_token": CLS_PIECE,
            "mask_token": MASK_PIECE,
            "model_max_length": max_length,
        },
    )


def _read_model_proto(model_file: Path):
    from sentencepiece import sentencepiece_model_pb2  # protobuf, only when exporting

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model_file.read_bytes())
    except Exception as error:  # protobuf's DecodeError, OSError
        raise UserError(
            f"{model_file} cannot be read as a SentencePiece model ({describe(error)})"
        ) from None
    return proto


def _bpe_merges(proto) -> list[tuple[str, str]]:
    """The merges of a BPE SentencePiece model, most important first. SentencePiece keeps
    only the pieces, each scored by when training made it (higher: earlier); a piece is
    the merge of every split of it into two ordinary pieces of the vocabulary, so the
    merges are those splits, ordered by the score of the piece they make."""
    normal = proto.SentencePiece.NORMAL
    ids = {piece.piece: i for i, piece in enumerate(proto.pieces) if piece.type == normal}
    merges = []
    for piece in proto.pieces:
        if piece.type != normal:
            continue
        text = piece.piece
        splits = [(text[:k], text[k:]) for k in range(1, len(text))]
        splits = sorted(
            ((a, b) for a, b in splits if a in ids and b in ids),
            key=lambda ab: (ids[ab[0]], ids[ab[1]]),
        )
        merges += [(piece.score, a, b) for a, b in splits]
    merges.sort(key=lambda merge: -merge[0])  # stable: ties keep the vocabulary's order
    return [(a, b) for _, a, b in merges]


def _write_sentencepiece(model_file: Path, output: Path, max_length: int) -> list[str]:
    proto = _read_model_proto(model_file)
    trainer = proto.trainer_spec
    unk = proto.pieces[trainer.unk_id].piece
    if trainer.model_type == trainer.UNIGRAM:
        pieces = [(piece.piece, piece.score) for piece in proto.pieces]
        model = models.Unigram(pieces, trainer.unk_id, trainer.byte_fallback)
    elif trainer.model_type == trainer.BPE:
        ids = {piece.piece: i for i, piece in enumerate(proto.pieces)}
        model = models.BPE(
            ids,
            _bpe_merges(proto),
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=trainer.byte_fallback,
        )
    else:
        kind = trainer.ModelType.Name(trainer.model_type).lower()
        return [
            f"{TOKENIZER_FILE} is not written: {model_file} is a {kind} SentencePiece model "
            "and only unigram and bpe models are converted; tokenize with sentencepiece and "
            "that file"
        ]
    tokenizer = Tokenizer(model)
    spec = proto.normalizer_spec
    steps = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [
            normalizers.Replace(Regex(r"\A +| +\z"), ""),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    tokenizer.normalizer = normalizers.Sequence(steps)
    prepend = "always" if spec.add_dummy_prefix else "never"
    # BPE pieces never hold a "▁" inside, so splitting at spaces changes nothing (and is
    # faster); unigram reads the whole text, as SentencePiece does.
    split = trainer.model_type == trainer.BPE
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace("▁", prepend_scheme=prepend, split=split)
    tokenizer.decoder = decoders.Metaspace("▁", prepend_scheme=prepend, split=False)
    tokenizer.add_special_tokens(
        [AddedToken(piece, special=True, normalized=False) for piece in vocab.USER_DEFINED_PIECES]
    )
    cls_piece, sep_piece, mask_piece = vocab.USER_DEFINED_PIECES
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls_piece} $A {sep_piece}",
        pair=f"{cls_piece} $A {sep_piece} $B:1 {sep_piece}:1",
        special_tokens=[(cls_piece, vocab.CLS_ID), (sep_piece, vocab.SEP_ID)],
    )
    tokenizer.save(str(output / TOKENIZER_FILE))
    _write_json(
        output / TOKENIZER_CONFIG_FILE,
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": vocab.UNK_PIECE,
            "pad_token": vocab.PAD_PIECE,
            "cls_token": cls_piece,
            "sep_token": sep_piece,
            "mask_token": mask_piece,
            "model_max_length": max_length,
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        },
    )
    return []
