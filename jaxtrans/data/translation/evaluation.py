"""Evaluation batches: every sentence of a split exactly once, in order, one per row.

Shapes are "static-ish" so that jit compiles a handful of programs, not one per batch: each
batch is padded to ``batch_size`` rows and its lengths are rounded up to a multiple of 8
(capped at the maximum lengths). Long sources are truncated, never dropped.
"""

from collections.abc import Iterator, Sequence

import numpy as np

from jaxtrans.data import reserved_pieces as vocab
from jaxtrans.data.records import TranslationPair
from jaxtrans.data.translation.tokenizer import Tokenizer

LENGTH_MULTIPLE = 8


def _padded_length(longest: int, maximum: int) -> int:
    return min(-(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE, maximum)


def eval_batches(
    pairs: Sequence[TranslationPair],
    tokenizer: Tokenizer,
    batch_size: int,
    max_source_length: int,
    max_target_length: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Yields {source [B, S], target_in [B, T], target_out [B, T], index [B]} int32 arrays.

    Row i of a batch holds pair ``index[i]`` of ``pairs``: source = ids + [EOS] (cut to
    ``max_source_length``), target_in = [BOS] + ids, target_out = ids + [EOS] (cut to
    ``max_target_length``). Rows that only fill the last batch are all PAD with index -1;
    metrics must ignore them. B = batch_size always.
    """
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        sources = [
            tokenizer.encode_source(p.source)[: max_source_length - 1] + [vocab.EOS_ID]
            for p in chunk
        ]
        targets = [tokenizer.encode_target(p.target)[: max_target_length - 1] for p in chunk]
        source_length = _padded_length(max(map(len, sources)), max_source_length)
        target_length = _padded_length(max(len(t) + 1 for t in targets), max_target_length)
        batch = {
            "source": np.full((batch_size, source_length), vocab.PAD_ID, np.int32),
            "target_in": np.full((batch_size, target_length), vocab.PAD_ID, np.int32),
            "target_out": np.full((batch_size, target_length), vocab.PAD_ID, np.int32),
            "index": np.full((batch_size,), -1, np.int32),
        }
        for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
            batch["source"][row, : len(source)] = source
            batch["target_in"][row, : len(target) + 1] = [vocab.BOS_ID, *target]
            batch["target_out"][row, : len(target) + 1] = [*target, vocab.EOS_ID]
            batch["index"][row] = start + row
        yield batch
