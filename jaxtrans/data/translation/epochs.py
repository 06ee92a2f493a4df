"""How many training steps one pass over the translation data takes: an exact count.

The pipeline packs several pairs into each row, so the number of batches in an epoch
depends on the lengths of the tokenised pairs and on the order they are packed in. It is
counted, not estimated: one pass tokenises this process's shard in epoch 0's order
(the permutation ``train_iterator`` reads first), drops the pairs it drops, and packs them
with the pipeline's own ``FirstFitPacker``; the rows it closes plus those still open at
the end are the rows of one epoch, and

    steps per epoch = ceil(rows of one epoch / rows per process per step)

Later epochs are shuffled differently and pack to within a row or two of the same count;
the training loop shows the exact data position (``pairs_read / pairs``) as the epoch.
"""

import math

from jaxtrans.data.iterators import ShuffledEpochs, local_batch_size
from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.translation.pipeline import CHUNK_PAIRS, OK, TRUNCATED, PairTokenizer
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import Tokenizer
from jaxtrans.errors import UserError


def batches_per_epoch(
    data_config, tokenizer: Tokenizer, *, seed: int, process_count: int = 1
) -> tuple[int, int]:
    """(batches of one epoch, usable pairs of it) for process 0's shard, which every
    process counts alike so that all agree on the number of steps. Tokenises the whole
    shard once (minutes for millions of pairs)."""
    rows = local_batch_size(data_config.batch_size, process_count)
    max_source, max_target = data_config.max_source_length, data_config.max_target_length
    pairs = training_pairs(data_config)
    shard_rows = range(0, len(pairs), process_count)
    order = ShuffledEpochs(shard_rows, int(seed) % 2**32, shuffle=bool(data_config.shuffle))
    tokenize = PairTokenizer(tokenizer, max_source, max_target, data_config.truncate)
    if data_config.pack:
        packer = FirstFitPacker(max_source, max_target, rows * data_config.pack_pool_batches)
    else:
        packer = FirstFitPacker(max_source, max_target, 1, max_pairs_per_row=1)
    closed = usable = 0
    shard = len(order.rows)
    for start in range(0, shard, CHUNK_PAIRS):
        chunk = [pairs[int(order[i])] for i in range(start, min(start + CHUNK_PAIRS, shard))]
        for key, pair in enumerate(tokenize(chunk), start=start):
            if pair.status in (OK, TRUNCATED):
                usable += 1
                closed += len(packer.add(key, len(pair.source), len(pair.target) + 1))
    if not usable:
        raise UserError(
            f"none of the {shard} training pairs fits max_source_length={max_source} / "
            f"max_target_length={max_target}, so an epoch has no steps; raise the limits or "
            "set --config.data.truncate=True"
        )
    return math.ceil((closed + len(packer.rows)) / rows), usable
