"""WordPiece tokenisation with a Hugging Face checkpoint's ``vocab.txt`` or ``tokenizer.json``.

Fine-tuning released BERT weights needs the vocabulary they were trained with. This
wraps the ``tokenizers`` library's BERT pipeline (clean text, split CJK characters,
optional lower-casing and accent stripping, whitespace/punctuation split, greedy
longest-match-first WordPiece with ``##`` continuations), the same pipeline as
``transformers.BertTokenizerFast``.

A directory saved by transformers 5 holds ``tokenizer.json`` and no ``vocab.txt``; its
WordPiece vocabulary is ``model.vocab`` there. transformers itself takes only that
vocabulary (and the added tokens) from the file and rebuilds the rest of the pipeline from
``tokenizer_config.json`` (``do_lower_case`` and the others, BERT's defaults without one),
so the ``BertNormalizer`` options and ``continuing_subword_prefix`` written in
``tokenizer.json`` are ignored here too: the ids are transformers'.
"""

import json
from pathlib import Path

from tokenizers.implementations import BertWordPieceTokenizer

from jaxtrans.errors import UserError, json_type

CLS_PIECE, SEP_PIECE, MASK_PIECE, PAD_PIECE, UNK_PIECE = (
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "[PAD]",
    "[UNK]",
)


TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
# The tokenizer_config.json options we read, and the values each may take.
_OPTIONS = {
    "do_lower_case": (True, False),
    "strip_accents": (True, False, None),
    "tokenize_chinese_chars": (True, False),
}


def read_tokenizer_config(config_file: Path) -> dict:
    """The options of a tokenizer_config.json ({} when there is none); UserError naming
    the file when it is not a JSON object or an option has a value BERT does not know."""
    if not config_file.exists():
        return {}
    try:
        options = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(
            f"{config_file} is not valid JSON ({type(error).__name__}: {error}); restore it "
            "from the checkpoint it came with"
        ) from None
    if not isinstance(options, dict):
        raise UserError(f"{config_file} holds {json_type(options)}, not an object")
    for name, allowed in _OPTIONS.items():
        if name in options and not any(options[name] is value for value in allowed):
            raise UserError(
                f"{config_file} has {name}={options[name]!r}; use one of "
                f"{', '.join(json.dumps(v) for v in allowed)}"
            )
    return options


def read_vocab_txt(vocab_file: Path) -> list[str]:
    """The pieces of a vocab.txt, one a line, in id order."""
    if not vocab_file.exists():
        raise UserError(f"{vocab_file} not found; a WordPiece vocabulary needs vocab.txt")
    try:
        pieces = vocab_file.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise UserError(
            f"{vocab_file} is not UTF-8 text (byte {error.start}); a vocab.txt holds one "
            "piece a line"
        ) from None
    except OSError as error:
        raise UserError(f"{vocab_file} cannot be read ({error.strerror})") from None
    if pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def read_tokenizer_json(tokenizer_file: Path) -> list[str]:
    """The pieces of the WordPiece model of a ``tokenizers`` tokenizer.json, in id order.
    UserError naming the file when it is not JSON, not a WordPiece model, its ids are not
    0..N-1, or it adds tokens outside the vocabulary (which BERT's vocab.txt cannot hold)."""
    try:
        contents = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(
            f"{tokenizer_file} is not valid JSON ({type(error).__name__}: {error}); restore it "
            "from the checkpoint it came with"
        ) from None
    model = contents.get("model") if isinstance(contents, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise UserError(
            f"{tokenizer_file} holds no WordPiece model (model.type {kind!r}); a BERT "
            "checkpoint needs its WordPiece vocabulary (tokenizer.json or vocab.txt)"
        )
    vocab = model["vocab"]
    pieces = sorted(vocab, key=lambda piece: vocab[piece])
    if [vocab[piece] for piece in pieces] != list(range(len(pieces))):
        raise UserError(
            f"{tokenizer_file}: the ids of model.vocab are not 0..{len(pieces) - 1}, one each"
        )
    added = contents.get("added_tokens") or []
    outside = [
        token
        for token in added
        if not isinstance(token, dict)
        or not (
            0 <= token.get("id", -1) < len(pieces) and pieces[token["id"]] == token.get("content")
        )
    ]
    if outside:
        first = outside[0]
        raise UserError(
            f"{tokenizer_file} adds {len(outside)} token(s) outside its WordPiece vocabulary "
            f"(the first: {first!r}); BERT vocabularies without added tokens are supported"
        )
    return pieces


def vocabulary_file(directory: Path) -> Path:
    """A checkpoint directory's vocab.txt, else its tokenizer.json; UserError without both."""
    for name in (VOCAB_FILE, TOKENIZER_FILE):
        if (directory / name).is_file():
            return directory / name
    raise UserError(
        f"{directory} has neither {VOCAB_FILE} nor {TOKENIZER_FILE}; the WordPiece vocabulary "
        "must come with the checkpoint (save the tokenizer with save_pretrained too)"
    )


class WordPieceTokenizer:
    """Text -> WordPiece ids, with the BERT special ids (see ``bert_tokenizer.BertTokenizer``)."""

    def __init__(
        self,
        vocab_file: str | Path,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        handle_chinese_chars: bool = True,
    ):
        """``vocab_file``: a vocab.txt or a tokenizer.json (its WordPiece vocabulary).
        strip_accents=None strips accents exactly when lower-casing, as BERT does."""
        vocab_file = Path(vocab_file)
        if vocab_file.suffix == ".json":
            pieces = read_tokenizer_json(vocab_file)
        else:
            pieces = read_vocab_txt(vocab_file)
        self.pieces = pieces
        vocab = {piece: i for i, piece in enumerate(pieces)}
        missing = [
            p for p in (CLS_PIECE, SEP_PIECE, MASK_PIECE, PAD_PIECE, UNK_PIECE) if p not in vocab
        ]
        if missing:
            raise UserError(f"{vocab_file} lacks the BERT special tokens {missing}")
        self._tokenizer = BertWordPieceTokenizer(
            vocab,
            clean_text=True,
            handle_chinese_chars=handle_chinese_chars,
            strip_accents=strip_accents,
            lowercase=lowercase,
        )
        self.vocab_size = len(pieces)
        self.pad_id = vocab[PAD_PIECE]
        self.cls_id = vocab[CLS_PIECE]
        self.sep_id = vocab[SEP_PIECE]
        self.mask_id = vocab[MASK_PIECE]
        self.unk_id = vocab[UNK_PIECE]
        # "[PAD]", "[CLS]", "[unused17]", ...: never the replacement for a masked token.
        self.special_ids = frozenset(
            i for piece, i in vocab.items() if piece.startswith("[") and piece.endswith("]")
        )

    @classmethod
    def from_huggingface(cls, path: str | Path) -> "WordPieceTokenizer":
        """The tokenizer of a checkpoint directory: vocab.txt (else the vocabulary of
        tokenizer.json) and, when present, tokenizer_config.json (do_lower_case,
        strip_accents, tokenize_chinese_chars)."""
        directory = Path(path)
        options = read_tokenizer_config(directory / TOKENIZER_CONFIG_FILE)
        return cls(
            vocabulary_file(directory),
            lowercase=options.get("do_lower_case", True),
            strip_accents=options.get("strip_accents"),
            handle_chinese_chars=options.get("tokenize_chinese_chars", True),
        )

    def encode(self, text: str) -> list[int]:
        """One text -> its WordPiece ids, without [CLS] / [SEP]."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts at once (the library tokenises them in parallel)."""
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [e.ids for e in encodings]

    def decode(self, ids: list[int]) -> str:
        """Ids -> text, joining ``##`` continuations; special tokens are dropped."""
        return self._tokenizer.decode(ids)

    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary entry of one id, as written in vocab.txt (``##ing``, ``[SEP]``)."""
        return self._tokenizer.id_to_token(int(token_id))
