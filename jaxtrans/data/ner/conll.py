"""CoNLL-style entity-tagged files: one word a line, a blank line between sentences.

    -DOCSTART- -X- -X- O

    EU NNP B-NP B-ORG
    rejects VBZ B-VP O
    German JJ B-NP B-MISC

The word is the first whitespace-separated column and its tag the last (the columns
between, e.g. part of speech and chunk, are ignored); ``-DOCSTART-`` lines are skipped.
Files are UTF-8, optionally .gz. Chinese corpora put one character on each line.

Tags are ``O`` or ``PREFIX-TYPE``; ``scheme`` says which prefixes a file may use: B and I
for ``bio`` (IOB2) and ``iob1``, B, I, E and S for ``iobes``. The scheme's meaning (where
entities start and end) is read by ``jaxtrans.inference.entities``; here each tag is only
checked, and a bad line is a one-line error naming ``file:line``.
"""

import dataclasses
import gzip
from pathlib import Path

from jaxtrans.errors import UserError

SCHEME_PREFIXES = {"bio": ("B", "I"), "iob1": ("B", "I"), "iobes": ("B", "I", "E", "S")}
DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    """One sentence: its words, their tags as written, and where it was read."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    # The file and the line of the first word (the others follow it line by line), for
    # errors about a tag found later (e.g. a type the model does not know).
    path: str = ""
    line: int = 0

    def location(self, index: int) -> str:
        """Where word ``index`` was read: FILE:LINE (or "word N" for a generated one)."""
        return f"{self.path}:{self.line + index}" if self.path else f"word {index + 1}"


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEME_PREFIXES:
        raise UserError(
            f"--config.data.tag_scheme={scheme!r}: use one of {', '.join(SCHEME_PREFIXES)}"
        )
    return scheme


def check_tag(tag: str, scheme: str) -> str | None:
    """Why ``tag`` is not a tag of ``scheme``; None when it is."""
    if tag == "O":
        return None
    prefix, dash, type_ = tag.partition("-")
    prefixes = SCHEME_PREFIXES[scheme]
    if not dash or not type_ or prefix not in prefixes:
        written = ", ".join(f"{p}-TYPE" for p in prefixes)
        return f"tag {tag!r} is not O, {written} (--config.data.tag_scheme={scheme})"
    if "," in type_:
        return f"entity type {type_!r} contains a comma (labels are stored comma-joined)"
    return None


def _lines(path: Path):
    """(number, text) of each line of a UTF-8 file, optionally gzip-compressed."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    yield number, raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise UserError(
                        f"{path}:{number}: not UTF-8 text (byte {e.start}); save it as UTF-8"
                    ) from None
    except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
        raise UserError(f"{path}: cannot be read ({error}); check the file") from None


def read_conll(path: str | Path, scheme: str = "bio") -> list[TaggedSentence]:
    """The sentences of a CoNLL file whose tags use ``scheme`` (see module doc)."""
    path = Path(path).expanduser()
    check_scheme(scheme)
    if not path.is_file():
        raise UserError(f"entity-tagged file {path} not found")
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first_line = 0

    def close() -> None:
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags), str(path), first_line))
            words.clear()
            tags.clear()

    for number, line in _lines(path):
        columns = line.split()
        if not columns:
            close()
            continue
        if columns[0] == DOCSTART:
            close()
            continue
        if len(columns) < 2:
            raise UserError(
                f"{path}:{number}: one column {line.strip()!r}; a line holds a word and, "
                "in its last column, the tag (a blank line ends a sentence)"
            )
        problem = check_tag(columns[-1], scheme)
        if problem:
            raise UserError(f"{path}:{number}: {problem}")
        if not words:
            first_line = number
        words.append(columns[0])
        tags.append(columns[-1])
    close()
    if not sentences:
        raise UserError(f"{path} holds no tagged sentences")
    return sentences


def entity_types(sentences: list[TaggedSentence]) -> list[str]:
    """The sorted distinct entity types of the sentences' tags."""
    return sorted({tag.partition("-")[2] for s in sentences for tag in s.tags if tag != "O"})


def write_conll(sentences: list[TaggedSentence], path: str | Path) -> None:
    """Write sentences as a two-column CoNLL file (word, tag), UTF-8."""
    with open(path, "w", encoding="utf-8") as f:
        for sentence in sentences:
            f.writelines(f"{w} {t}\n" for w, t in zip(sentence.words, sentence.tags, strict=True))
            f.write("\n")
