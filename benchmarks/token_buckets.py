"""Batches of about ``max_tokens`` padded tokens, pairs of like length together, as
fairseq's ``--max-tokens`` makes them.

Every epoch: the pairs in a random order, sorted by length within windows of
``window`` pairs, cut into batches while rows x the longest side of the batch (source
with its EOS, target with its BOS or EOS) stays within ``max_tokens``, and the batches
shuffled. Pairs whose source is longer than ``max_source`` (EOS included) or whose target
is not shorter than ``max_target`` are left out, as in input_pipeline's padded batches.
"""

import numpy as np
from input_padding import pad_batch

from jaxtrans.data.reserved_pieces import EOS_ID


def encode_pairs(pairs, tokenizer, max_source: int, max_target: int):
    """(sources ending in EOS, targets) of the pairs that fit, token ids."""
    sources, targets = [], []
    for pair in pairs:
        source = tokenizer.encode_source(pair.source) + [EOS_ID]
        target = tokenizer.encode_target(pair.target)
        if len(source) <= max_source and len(target) < max_target:
            sources.append(source)
            targets.append(target)
    return sources, targets


def bucket_rows(lengths: np.ndarray, max_tokens: int, window: int, rng) -> list[np.ndarray]:
    """The row indices of one epoch's batches, in the order to train on them."""
    order = rng.permutation(len(lengths))
    batches = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        begin, longest = 0, 0
        for end, i in enumerate(part):
            longest = max(longest, int(lengths[i]))
            if longest * (end + 1 - begin) > max_tokens:
                batches.append(part[begin:end])
                begin, longest = end, int(lengths[i])
        batches.append(part[begin:])
    return [batches[i] for i in rng.permutation(len(batches))]


def max_tokens_batches(
    pairs, tokenizer, max_tokens: int, max_source: int, max_target: int,
    window: int = 16_384, seed: int = 0,
):  # fmt: skip
    """Endless batches (input_padding.pad_batch's arrays), epoch after epoch."""
    sources, targets = encode_pairs(pairs, tokenizer, max_source, max_target)
    lengths = np.array([max(len(s), len(t) + 1) for s, t in zip(sources, targets, strict=True)])
    rng = np.random.default_rng(seed)
    while True:
        for rows in bucket_rows(lengths, max_tokens, window, rng):
            yield pad_batch([sources[i] for i in rows], [targets[i] for i in rows])
