"""Sentence pairs from local files: ``.tsv`` (SOURCE<TAB>TARGET) and JSON lines, maybe ``.gz``.

Training reads files by random access, so that shuffling, per-process sharding and resuming
are exact without holding the text in memory: one streamed pass records where each line
starts (8 bytes a line), then ``pairs[i]`` reads line i with one ``os.pread``. A gzipped
file is first decompressed, streamed, into an unnamed temporary file (deleted when the
source is closed), because gzip cannot seek. Evaluation streams files top to bottom.

Malformed lines (no tab, bad JSON, missing field, invalid UTF-8, empty side) raise a
``UserError`` naming file and line, or read as None when ``skip_malformed`` is set; the
readers count the Nones (training: ``pairs_malformed``; dev/test: ``lines_skipped``).
"""

import dataclasses
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np

from jaxtrans.data.records import TranslationPair, swapped
from jaxtrans.errors import UserError

_CHUNK_BYTES = 1 << 24


@dataclasses.dataclass(frozen=True)
class LineFormat:
    """How to turn one line into a pair."""

    # "tsv" or "jsonl", from the file name.
    kind: str
    # JSONL fields of the source and the target sentence.
    source_field: str = "source"
    target_field: str = "target"
    # Swap source and target after reading.
    reverse: bool = False
    # Read malformed lines as None instead of raising.
    skip_malformed: bool = False


def line_format_for(path: str, data_config) -> LineFormat:
    """The format of ``path`` from its extension (``.gz`` stripped), with the config's fields."""
    name = path[: -len(".gz")] if path.endswith(".gz") else path
    if name.endswith(".tsv"):
        kind = "tsv"
    elif name.endswith((".jsonl", ".json")):
        kind = "jsonl"
    else:
        raise UserError(
            f"{path}: unknown data file type; use .tsv (SOURCE<TAB>TARGET) or .jsonl "
            "(one JSON object a line), optionally gzipped (.gz)"
        )
    return LineFormat(
        kind=kind,
        source_field=data_config.jsonl_source_field,
        target_field=data_config.jsonl_target_field,
        reverse=data_config.reverse,
        skip_malformed=data_config.skip_malformed,
    )


class MalformedLine(ValueError):
    """A line that is not a pair; the reader adds file and line number."""


def parse_line(raw: bytes, fmt: LineFormat) -> TranslationPair:
    """One line (bytes, newline optional) -> pair; raises MalformedLine with the reason."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedLine(f"invalid UTF-8 at byte {e.start}") from None
    text = text.rstrip("\r\n")
    if fmt.kind == "tsv":
        columns = text.split("\t")
        if len(columns) != 2:
            raise MalformedLine(
                f"expected SOURCE<TAB>TARGET, found {len(columns)} tab-separated column(s)"
            )
        source, target = columns
    else:
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            raise MalformedLine(f"bad JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise MalformedLine("bad JSON (nested too deeply)") from None
        if not isinstance(record, dict):
            raise MalformedLine("expected one JSON object a line")
        for field in (fmt.source_field, fmt.target_field):
            if not isinstance(record.get(field), str):
                raise MalformedLine(
                    f"no string field {field!r} (fields: {', '.join(map(str, record)) or 'none'}); "
                    "set --config.data.jsonl_source_field / jsonl_target_field"
                )
        source, target = record[fmt.source_field], record[fmt.target_field]
    source, target = source.strip(), target.strip()
    for text in (source, target):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MalformedLine(
                f"a lone surrogate \\u{ord(text[e.start]):04x} in a string"
            ) from None
    if not source or not target:
        raise MalformedLine("empty source or target")
    pair = TranslationPair(source, target)
    return swapped(pair) if fmt.reverse else pair


def _malformed_error(path: str, line_number: int, reason: str) -> UserError:
    return UserError(
        f"{path}:{line_number}: malformed line: {reason}; fix it or set "
        "--config.data.skip_malformed=True to skip and count such lines"
    )


def _open_binary(path: str):
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such data file; check --config.data paths")
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_pairs(path: str, fmt: LineFormat) -> Iterator[TranslationPair | None]:
    """Streams a file in order: one pair per line (None for a skipped malformed line)."""
    for line_number, raw in enumerate(_lines(path), start=1):
        try:
            yield parse_line(raw, fmt)
        except MalformedLine as e:
            if not fmt.skip_malformed:
                raise _malformed_error(path, line_number, str(e)) from None
            yield None


def _lines(path: str) -> Iterator[bytes]:
    with _open_binary(path) as f:
        try:
            yield from f
        except (OSError, EOFError) as e:  # a corrupt or truncated gzip stream
            raise UserError(f"{path}: cannot read: {e}") from None


def _line_starts(fd: int) -> np.ndarray:
    """Byte offsets [num_lines + 1] of each line start, plus the end of the file."""
    starts = [np.zeros(1, np.int64)]
    offset = 0
    while chunk := os.pread(fd, _CHUNK_BYTES, offset):
        newlines = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
        starts.append(newlines.astype(np.int64) + offset + 1)
        offset += len(chunk)
    starts = np.concatenate(starts)
    if starts[-1] != offset:  # last line without a final newline
        starts = np.append(starts, offset)
    return starts


class IndexedTextFile(Sequence):
    """Random access to the pairs of one file: ``file[i]`` parses line i + 1."""

    def __init__(self, path: str, fmt: LineFormat):
        self.path = path
        self.format = fmt
        if not os.path.isfile(path):
            raise UserError(f"{path}: no such data file; check --config.data paths")
        if path.endswith(".gz"):
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for pread)
            try:
                with gzip.open(path, "rb") as compressed:
                    shutil.copyfileobj(compressed, self._file, _CHUNK_BYTES)
            except (OSError, EOFError) as e:
                raise UserError(f"{path}: cannot decompress: {e}") from None
            self._file.flush()
        else:
            self._file = open(path, "rb")  # noqa: SIM115 (kept open for pread)
        self._starts = _line_starts(self._file.fileno())

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, index: int) -> TranslationPair | None:
        if not 0 <= index < len(self):
            raise IndexError(index)
        start, end = int(self._starts[index]), int(self._starts[index + 1])
        raw = os.pread(self._file.fileno(), end - start, start)
        try:
            return parse_line(raw, self.format)
        except MalformedLine as e:
            if not self.format.skip_malformed:
                raise _malformed_error(self.path, index + 1, str(e)) from None
            return None

    def close(self) -> None:
        self._file.close()


class ConcatenatedFiles(Sequence):
    """Several indexed files read as one sequence of pairs, in the order given."""

    def __init__(self, files: Sequence[IndexedTextFile]):
        self.files = list(files)
        self._ends = np.cumsum([len(f) for f in self.files])

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, index: int) -> TranslationPair | None:
        if not 0 <= index < len(self):
            raise IndexError(index)
        which = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[which - 1]) if which else 0
        return self.files[which][index - start]


def split_paths(paths: str) -> list[str]:
    """``"a.tsv, b.tsv.gz"`` -> ``["a.tsv", "b.tsv.gz"]``."""
    return [p.strip() for p in paths.split(",") if p.strip()]


def indexed_files(paths: str, data_config) -> ConcatenatedFiles:
    """Random-access training pairs from comma-separated ``paths``."""
    files = [IndexedTextFile(p, line_format_for(p, data_config)) for p in split_paths(paths)]
    return ConcatenatedFiles(files)
