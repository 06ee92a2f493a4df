"""The training pairs tokenised once: id shards that the training pipeline reads.

    WORKDIR/train_ids/
        manifest.json     format, tokenizer digest, data identity, pair and filtering counts
        lengths.npy       int32 [pairs, 2]  ids of each pair's source and target (no EOS/BOS);
                          -1, -1 for a malformed line skipped with data.skip_malformed
        source_ids.bin    int32, every pair's source ids one after another (pair order)
        target_ids.bin    int32, the same for the targets

Pair i's source ids are ``source_ids[o[i]:o[i + 1]]`` with ``o`` the running sum of the
source lengths (offsets are computed when the shards are opened, 8 bytes a pair). The id
files are memory-mapped: random access to a pair is one slice, and a batch's ids are
gathered with a few numpy calls, with nothing to decode (array_record would decode one
record at a time). The ids do not depend on the length limits, so a run may change
``max_source_length`` / ``max_target_length`` without preparing again.

``ensure_id_shards`` writes them when missing (``python -m jaxtrans.prepare``, or train.py
on its first start) and writes them again when the tokenizer (its digest) or the training
data (paths, sizes, modification times; TFDS name and size; demo corpus settings) differ
from the manifest's, saying so: the ids the pipeline reads are always those of this
tokenizer on this data. Files are read in order, and a TFDS split is read in order, in
chunks, once.
"""

import json
import os
import shutil
import time
from typing import Any

import numpy as np

from jaxtrans.data.records import PairSource
from jaxtrans.data.translation import text_files
from jaxtrans.data.translation.sources import source_kind, training_pairs
from jaxtrans.data.translation.tokenizer_digest import tokenizer_digest
from jaxtrans.errors import UserError

ID_SHARDS_DIR = "train_ids"
MANIFEST_FILE = "manifest.json"
# Version of the files' layout; bump it if it changes (older shards are then rewritten).
ID_SHARDS_FORMAT = 1
# Pairs read and tokenised at once while preparing.
PREPARE_CHUNK = 8192


class IdShards:
    """Tokenised training pairs: ``lengths`` [pairs, 2] int32 (-1 = malformed) and the ids.

    ``source(i)`` / ``target(i)`` are pair i's ids (int32 arrays); ``gather(side, pairs,
    limit)`` concatenates the ids of many pairs at once, each cut to ``limit``.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        source_ids: np.ndarray,
        target_ids: np.ndarray,
        directory: str | None = None,
    ):
        self.lengths = lengths
        self.directory = directory  # where they are mapped from (None: in memory)
        self._ids = (source_ids, target_ids)
        self._offsets = tuple(
            np.concatenate([[0], np.cumsum(np.maximum(lengths[:, side], 0), dtype=np.int64)])
            for side in (0, 1)
        )

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def from_pairs(cls, pairs: PairSource, tokenizer) -> "IdShards":
        """Tokenises ``pairs`` into memory (tests and benchmarks; training reads files)."""
        chunks = list(_tokenized_chunks(pairs, tokenizer))
        lengths = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros((0, 2), np.int32)
        ids = [
            np.concatenate([c[side] for c in chunks] or [np.zeros(0, np.int32)]) for side in (1, 2)
        ]
        return cls(lengths, *ids)

    @classmethod
    def open(cls, directory: str) -> "IdShards":
        """The shards written by ``write_id_shards`` in ``directory``, memory-mapped."""
        lengths = np.load(os.path.join(directory, "lengths.npy"), mmap_mode="r")

        def ids(name: str) -> np.ndarray:
            path = os.path.join(directory, name)
            if os.path.getsize(path) == 0:  # numpy cannot map an empty file
                return np.zeros(0, np.int32)
            return np.memmap(path, dtype=np.int32, mode="r")

        return cls(np.asarray(lengths), ids("source_ids.bin"), ids("target_ids.bin"), directory)

    def __reduce__(self):
        # A worker process maps the files itself rather than receiving a copy of the ids.
        if self.directory is not None:
            return IdShards.open, (self.directory,)
        return IdShards, (self.lengths, *self._ids)

    def ids(self, side: int, pair: int) -> np.ndarray:
        offsets = self._offsets[side]
        return self._ids[side][offsets[pair] : offsets[pair + 1]]

    def gather(self, side: int, pairs: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids of ``pairs`` one after another, each cut to ``limit``, int32; their lengths)."""
        starts = self._offsets[side][pairs]
        lengths = np.minimum(self.lengths[pairs, side], limit).astype(np.int64)
        ends = np.cumsum(lengths)
        # Index of every id to take: its pair's start plus its place within the pair.
        within = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - lengths, lengths)
        return self._ids[side][np.repeat(starts, lengths) + within], lengths


def _tokenized_chunks(pairs: PairSource, tokenizer):
    """(lengths [n, 2] int32, source ids, target ids) of ``pairs`` in order, a chunk a time."""
    read = getattr(pairs, "read_range", None)
    for start in range(0, len(pairs), PREPARE_CHUNK):
        stop = min(start + PREPARE_CHUNK, len(pairs))
        chunk = read(start, stop) if read else [pairs[i] for i in range(start, stop)]
        present = [p for p in chunk if p is not None]
        sources = tokenizer.encode_source_batch([p.source for p in present])
        targets = tokenizer.encode_target_batch([p.target for p in present])
        lengths = np.full((len(chunk), 2), -1, np.int32)
        where = np.array([p is not None for p in chunk], bool)
        lengths[where, 0] = [len(s) for s in sources]
        lengths[where, 1] = [len(t) for t in targets]
        yield (
            lengths,
            np.fromiter((i for s in sources for i in s), np.int32, int(lengths[where, 0].sum())),
            np.fromiter((i for t in targets for i in t), np.int32, int(lengths[where, 1].sum())),
        )


def data_identity(data_config) -> dict[str, Any]:
    """What decides the training pairs: their source and the settings that read them."""
    kind = source_kind(data_config)
    identity: dict[str, Any] = {"kind": kind, "reverse": bool(data_config.reverse)}
    if kind == "files":
        files = []
        for path in text_files.split_paths(data_config.train):
            if not os.path.isfile(path):
                raise UserError(f"{path}: no such data file; check --config.data paths")
            stat = os.stat(path)
            files.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
        identity |= {
            "files": files,
            "skip_malformed": bool(data_config.skip_malformed),
            "jsonl_fields": [data_config.jsonl_source_field, data_config.jsonl_target_field],
        }
    elif kind == "tfds":
        identity |= {
            "tfds_name": data_config.tfds_name,
            "tfds_data_dir": data_config.tfds_data_dir,
            "languages": [data_config.source_lang, data_config.target_lang],
        }
    else:
        identity |= {"demo_sizes": [data_config.demo_train_size, data_config.demo_dev_size,
                                    data_config.demo_test_size],
                     "demo_seed": data_config.demo_seed}  # fmt: skip
    return identity


def read_manifest(directory: str) -> dict[str, Any] | None:
    """The manifest of the shards in ``directory``, or None if none is complete there."""
    try:
        with open(os.path.join(directory, MANIFEST_FILE), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def stale_reason(manifest: dict[str, Any] | None, digest: str, identity: dict) -> str | None:
    """Why shards with ``manifest`` cannot serve this tokenizer and data (None: they can)."""
    if manifest is None:
        return "none yet"
    if manifest.get("format") != ID_SHARDS_FORMAT:
        return "written by another version"
    if manifest.get("tokenizer_digest") != digest:
        return "the tokenizer changed"
    if manifest.get("data") != identity:
        return "the training data changed"
    return None


def write_id_shards(directory: str, pairs: PairSource, tokenizer, manifest: dict) -> dict:
    """Tokenises ``pairs`` in order into ``directory`` (replaced whole, atomically);
    returns the manifest written, with the counts and the seconds taken."""
    start = time.perf_counter()
    scratch = f"{directory}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    chunks = []
    with (
        open(os.path.join(scratch, "source_ids.bin"), "wb") as source_file,
        open(os.path.join(scratch, "target_ids.bin"), "wb") as target_file,
    ):
        for lengths, source, target in _tokenized_chunks(pairs, tokenizer):
            chunks.append(lengths)
            source_file.write(source.tobytes())
            target_file.write(target.tobytes())
    lengths = np.concatenate(chunks) if chunks else np.zeros((0, 2), np.int32)
    np.save(os.path.join(scratch, "lengths.npy"), lengths)
    malformed = int(np.count_nonzero(lengths[:, 0] < 0))
    manifest = {
        **manifest,
        "format": ID_SHARDS_FORMAT,
        "pairs": len(lengths),
        "malformed": malformed,
        "source_ids": int(lengths[:, 0][lengths[:, 0] > 0].sum()),
        "target_ids": int(lengths[:, 1][lengths[:, 1] > 0].sum()),
        "seconds": round(time.perf_counter() - start, 2),
    }
    with open(os.path.join(scratch, MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(scratch, directory)
    return manifest


def filtering_counts(lengths: np.ndarray, data_config) -> dict[str, int]:
    """Pairs kept, too long (dropped or truncated) and malformed at the config's limits."""
    present = lengths[:, 0] >= 0
    too_long = present & (
        (lengths[:, 0] >= data_config.max_source_length)
        | (lengths[:, 1] >= data_config.max_target_length)
    )
    return {
        "usable": int(np.count_nonzero(present & (~too_long | bool(data_config.truncate)))),
        "too_long": int(np.count_nonzero(too_long)),
        "malformed": int(np.count_nonzero(~present)),
    }


def ensure_id_shards(data_config, tokenizer, workdir: str, say=print) -> IdShards:
    """The workdir's id shards, written first if missing or stale (``say`` tells why)."""
    directory = os.path.join(workdir, ID_SHARDS_DIR)
    digest = tokenizer_digest(workdir)
    identity = data_identity(data_config)
    reason = stale_reason(read_manifest(directory), digest, identity)
    if reason is not None:
        pairs = training_pairs(data_config)
        if reason != "none yet":
            say(
                f"data: the id shards in {directory} are out of date ({reason}); writing them again"
            )
        manifest = write_id_shards(
            directory, pairs, tokenizer, {"tokenizer_digest": digest, "data": identity}
        )
        say(
            f"data: tokenised {manifest['pairs']} training pairs into {directory} in "
            f"{manifest['seconds']:.1f} s ({manifest['malformed']} malformed lines skipped)"
        )
    return IdShards.open(directory)
