"""Text -> words with character offsets, and words -> word pieces, for the tasks that
label or point at parts of a text (entity tags, answer spans).

Words are cut as BERT's basic tokenizer cuts them before WordPiece: at whitespace, with
every punctuation mark and every CJK character a word of its own, and control characters
dropped. Each word keeps its ``[start, end)`` character offsets into the original text, so
a prediction over word pieces maps back to the exact characters it covers (the input is
never lower-cased or normalised for the offsets). A word is then encoded on its own, so
each piece knows its word; with a WordPiece vocabulary this gives the same pieces as
encoding the whole text.

    words = split_words("Jobs founded Apple in 1976.")
    # [Word("Jobs", 0, 4), Word("founded", 5, 12), ..., Word(".", 26, 27)]
    ids, word_index = encode_words(tokenizer, [w.text for w in words])
"""

import dataclasses
import unicodedata
from collections.abc import Sequence

from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer


@dataclasses.dataclass(frozen=True)
class Word:
    text: str
    # Character offsets into the text it was cut from: text[start:end] is the word, with
    # any dropped (control or format) characters inside it.
    start: int
    end: int


def is_cjk(char: str) -> bool:
    """A CJK ideograph (the Unicode blocks BERT's tokenizer splits one by one)."""
    cp = ord(char)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def is_punctuation(char: str) -> bool:
    """BERT's punctuation: every non-alphanumeric ASCII symbol, and Unicode category P*."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_dropped(char: str) -> bool:
    """NUL, the replacement character and control/format characters other than spaces."""
    if char in "\t\n\r":
        return False
    return ord(char) in (0, 0xFFFD) or unicodedata.category(char) in ("Cc", "Cf")


def split_words(text: str) -> list[Word]:
    """The words of ``text`` with their character offsets (see module doc). Dropped
    characters are removed from a word without ending it, as BERT removes them before
    splitting ("a\u200bb" is the word "ab" at [0, 3))."""
    words: list[Word] = []
    chars: list[str] = []  # the word being read
    start = end = 0

    def close() -> None:
        if chars:
            words.append(Word("".join(chars), start, end))
            chars.clear()

    for i, char in enumerate(text):
        if _is_dropped(char):
            continue
        if char.isspace():
            close()
        elif is_punctuation(char) or is_cjk(char):
            close()
            words.append(Word(char, i, i + 1))
        else:
            if not chars:
                start = i
            chars.append(char)
            end = i + 1
    close()
    return words


def encode_words(tokenizer: BertTokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Words -> (piece ids, the index of each piece's word). A word the tokenizer maps to
    no piece at all (e.g. an accent alone, stripped) becomes [UNK], so that every word
    has at least one piece to be labelled or pointed at."""
    ids: list[int] = []
    word_index: list[int] = []
    for i, pieces in enumerate(tokenizer.encode_batch(list(words)) if words else []):
        pieces = pieces or [tokenizer.unk_id]
        ids.extend(pieces)
        word_index.extend([i] * len(pieces))
    return ids, word_index
