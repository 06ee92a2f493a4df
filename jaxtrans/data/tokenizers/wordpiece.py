"""WordPiece tokenisation with a Hugging Face checkpoint's ``vocab.txt``.

Fine-tuning released BERT weights needs the vocabulary they were trained with. This
wraps the ``tokenizers`` library's BERT pipeline (clean text, split CJK characters,
optional lower-casing and accent stripping, whitespace/punctuation split, greedy
longest-match-first WordPiece with ``##`` continuations), the same pipeline as
``transformers.BertTokenizerFast``.
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


class WordPieceTokenizer:
    """Text -> WordPiece ids, with the BERT special ids (see ``bert_tokenizer.BertTokenizer``)."""

    def __init__(
        self,
        vocab_file: str | Path,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        handle_chinese_chars: bool = True,
    ):
        """strip_accents=None strips accents exactly when lower-casing, as BERT does."""
        vocab_file = Path(vocab_file)
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
        """The tokenizer of a checkpoint directory: vocab.txt and, when present,
        tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars)."""
        directory = Path(path)
        options = read_tokenizer_config(directory / TOKENIZER_CONFIG_FILE)
        return cls(
            directory / "vocab.txt",
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
