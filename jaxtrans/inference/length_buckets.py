"""Decoding batches of a few fixed shapes, so that a handful of compiled programs serve any
list of sentences.

Every static shape of a batch is a program XLA compiles (seconds each); a padded position
costs only its share of the step. So lengths are padded up a fixed ladder rather than to
the longest sentence:

    lengths:  m, 2m, ..., 8m, 10m, 12m, 14m, 16m, 20m, 24m, ...   (m = length_multiple,
              by default 8 on CPU and 16 elsewhere, decode_plan.length_multiple; four
              rungs an octave past 8m, each at most 1.25x the one below), cut at the
              model's position limit; sources start at 2m (SHORTEST_SOURCE)
    rows:     the batch size; a last, shorter batch the next power of two below it
    output:   source bucket + max_extra_length + prefix bucket, cut at the position limit

so a call makes at most one program a (source bucket, prefix bucket) pair and one for its
last batch, whatever the sentences. Results do not depend on the shapes: padding rows
and positions are masked out and every sentence keeps its own maximum output length.
The ladder is as fine as multiples of m up to 8m: a coarser one (2m, 3m, 4m, 6m, ...,
padding up to 1.5x) made warm greedy decoding of sentences of up to 100 tokens 13% slower.
Its first rung is not one for sources: a batch of sentences of at most m tokens (the
shortest batch of a long input, sorted) takes the 2m program, which the batches above it
have already loaded. A program costs a fresh process more than that padding costs a warm
one (on an accelerator a padded position costs less, a program more). 1,000 demo
sentences, 2 of their 10 batches at most 8 tokens (unpinned, 2026-12-05): a process's
first call with a warm compilation cache 1.01 -> 0.85 s greedy, 3.95 -> 3.80 s beam 4
(one program fewer to read, lower and link); warm calls greedy 0.329 -> 0.342 s, beam 4
level (3.35 / 3.38 s medians); the same translations.
"""

import collections
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from jaxtrans.inference import decode_plan
from jaxtrans.inference.ensemble import ModelConfig, member_configs
from jaxtrans.vocab import PAD_ID

# Sources are padded to at least this many length multiples (the module's docstring).
SHORTEST_SOURCE = 2


def bucket_length(length: int, multiple: int, limit: int | None = None) -> int:
    """The ladder's smallest rung holding ``length`` tokens, at most ``limit`` (None: none):
    multiple times 1, 2, ..., 8, then four rungs an octave (10, 12, 14, 16, 20, 24, 28,
    32, 40, ...), each at most 1.25 times the rung below."""
    units = max(1, -(-length // multiple))
    step = 1 << max(0, (units - 1).bit_length() - 3)  # a quarter of the octave's start
    return min(multiple * -(-units // step) * step, limit or math.inf)


def bucket_ladder(longest: int, multiple: int, limit: int | None = None) -> list[int]:
    """Every bucket a length of 1 to ``longest`` tokens may land in, shortest first."""
    return sorted({bucket_length(n, multiple, limit) for n in range(1, longest + 1)})


def batch_rows(count: int, batch_size: int, row_multiple: int = 1) -> int:
    """Static row count for ``count`` sentences: the batch size, or the next power of two
    below it; rounded up to a multiple of ``row_multiple`` (rows split over devices)."""
    rows = min(batch_size, 1 << max(0, math.ceil(math.log2(count))))
    return -(-rows // row_multiple) * row_multiple


def position_limit(config: ModelConfig) -> int | None:
    """The longest sequence every model places: the shortest position limit among the
    members (a learned table's max_len); None when none has one."""
    limits = [c.position_encoding.max_length() for c in member_configs(config)]
    return min((limit for limit in limits if limit is not None), default=None)


@dataclasses.dataclass(frozen=True)
class LengthBatch:
    """Sentences of similar lengths padded to static shapes, for one compiled decoder."""

    # The input index of each sentence; row r holds sentence indices[r], later rows are dummies.
    indices: list[int]
    # Source ids [rows, src_len] int32, PAD after the end.
    source: np.ndarray
    # Tokens each row may produce [rows] int32, EOS and prefix included; 0: a dummy row.
    max_lengths: np.ndarray
    # Forced target ids [rows, prefix_len] int32, PAD after each row's end; None: no prefix.
    prefix: np.ndarray | None
    # The static output length.
    max_len: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(rows, src_len, max_len, prefix_len): what decides the compiled program."""
        prefix_len = 0 if self.prefix is None else self.prefix.shape[1]
        return (*self.source.shape, self.max_len, prefix_len)


def length_batches(
    config: ModelConfig,
    sources: Sequence[Sequence[int]],
    prefixes: Sequence[Sequence[int]] | None,
    *,
    batch_size: int,
    max_extra_length: int,
    length_multiple: int | None = None,
    pad_id: int = PAD_ID,
    row_multiple: int = 1,
) -> Iterator[LengthBatch]:
    """The sentences in batches, longest first, padded to the ladder's shapes. A sentence
    may produce len(source) + max_extra_length + len(prefix) tokens; learned positions
    exist only up to config.max_len, so there longer sources are cut and outputs capped
    (a prefix's tokens past the cap are never emitted). A batch whose sentences have no
    prefix tokens gets prefix None. length_multiple None: the platform's
    (decode_plan.length_multiple: 8 on CPU, 16 elsewhere). row_multiple: every batch's
    rows a multiple of it (batch_rows), for batches split over that many devices."""
    if length_multiple is None:
        length_multiple = decode_plan.length_multiple()
    limit = position_limit(config)
    sources = [list(s)[:limit] for s in sources]
    prefixes = prefixes or [[] for _ in sources]
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))  # longest first
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        rows = batch_rows(len(chunk), batch_size, row_multiple)
        longest = max(SHORTEST_SOURCE * length_multiple, *(len(sources[i]) for i in chunk))
        src_len = bucket_length(longest, length_multiple, limit)
        longest_prefix = max(len(prefixes[i]) for i in chunk)
        prefix_len = bucket_length(longest_prefix, length_multiple, limit) if longest_prefix else 0
        max_len = min(src_len + max_extra_length + prefix_len, limit or math.inf)
        source = np.full((rows, src_len), pad_id, np.int32)
        prefix = np.full((rows, prefix_len), pad_id, np.int32)
        max_lengths = np.zeros((rows,), np.int32)  # 0: a dummy row, finished at once
        for row, i in enumerate(chunk):
            source[row, : len(sources[i])] = sources[i]
            forced = list(prefixes[i])[:prefix_len]
            prefix[row, : len(forced)] = forced
            max_lengths[row] = len(sources[i]) + max_extra_length + len(prefixes[i])
        yield LengthBatch(chunk, source, max_lengths, prefix if prefix_len else None, int(max_len))


# Batches dispatched ahead of the one read back (decoded_batches).
IN_FLIGHT = 2


def decoded_batches(
    batches: Iterable[LengthBatch],
    decode: Callable[[LengthBatch], Any],
    in_flight: int = IN_FLIGHT,
    read: Callable[[jax.Array], np.ndarray] = np.asarray,
) -> Iterator[tuple[LengthBatch, Any]]:
    """(batch, decode(batch) read back as NumPy arrays by ``read``) for each batch, in
    order, with up to ``in_flight`` batches dispatched ahead of the one being read back. A
    jitted call returns before its computation ends, so the next batches' host work
    (padding, tracing, and in a fresh process compiling or reading the compilation cache)
    overlaps this one's decoding instead of waiting for it. ``read``: np.asarray, or for
    outputs split over several processes one that gathers them (the whole on each)."""
    pending: collections.deque[tuple[LengthBatch, Any]] = collections.deque()
    for batch in batches:
        pending.append((batch, decode(batch)))
        if len(pending) > in_flight:
            batch, outputs = pending.popleft()
            yield batch, jax.tree.map(read, outputs)
    while pending:
        batch, outputs = pending.popleft()
        yield batch, jax.tree.map(read, outputs)
