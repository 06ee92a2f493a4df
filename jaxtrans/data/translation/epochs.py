"""How many training steps one pass over the translation data takes: an exact count.

The pipeline packs several pairs into each row, so the number of batches in an epoch
depends on the lengths of the tokenised pairs and on the order they are packed in. It is
counted, not estimated: one pass reads the lengths of this process's shard in epoch 0's
order (the permutation ``train_iterator`` reads first) from the id shards, drops the
pairs it drops, and packs them in each packing stream with the pipeline's own
``FirstFitPacker``; the rows they close plus those still open at the end are the rows of
one epoch, and

    steps per epoch = ceil(rows of one epoch / rows per process per step)

Later epochs are shuffled differently and pack to within a row or two of the same count;
the training loop shows the exact data position (``pairs_read / pairs``) as the epoch.
"""

import math

import numpy as np

from jaxtrans.data.iterators import ShuffledEpochs, local_batch_size
from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.translation.id_shards import IdShards
from jaxtrans.data.translation.packed_rows import OK, TRUNCATED, Limits, pair_status
from jaxtrans.data.translation.pipeline import resolved_workers
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.errors import UserError


def batches_per_epoch(
    data_config,
    tokenizer=None,
    *,
    seed: int,
    process_count: int = 1,
    streams: int | None = None,
    shards: IdShards | None = None,
) -> tuple[int, int]:
    """(batches of one epoch, usable pairs of it) for process 0's shard, which every
    process counts alike so that all agree on the number of steps. Packs the lengths of
    the whole shard once, in each of the ``streams`` packing streams (None: those of
    ``data.workers``), from the id shards (or the pairs tokenised with ``tokenizer``)."""
    if streams is None:
        streams = max(resolved_workers(data_config), 1)
    rows = local_batch_size(data_config.batch_size, process_count)
    max_source, max_target = data_config.max_source_length, data_config.max_target_length
    if shards is None:
        shards = IdShards.from_pairs(training_pairs(data_config), tokenizer)
    shard_rows = range(0, len(shards), process_count)
    order = ShuffledEpochs(shard_rows, int(seed) % 2**32, shuffle=bool(data_config.shuffle))
    shard = len(order.rows)
    status, packed = pair_status(
        shards.lengths[order.take(np.arange(shard))],
        Limits(max_source, max_target, bool(data_config.truncate)),
    )
    closed = open_rows = 0
    for stream in range(streams):
        if data_config.pack:
            packer = FirstFitPacker(max_source, max_target, rows * data_config.pack_pool_batches)
        else:
            packer = FirstFitPacker(max_source, max_target, 1, max_pairs_per_row=1)
        for key in range(stream, shard, streams):
            if status[key] == OK or status[key] == TRUNCATED:
                closed += len(packer.add(key, int(packed[key, 0]), int(packed[key, 1])))
        open_rows += len(packer.rows)
    usable = int(np.count_nonzero((status == OK) | (status == TRUNCATED)))
    if not usable:
        raise UserError(
            f"none of the {shard} training pairs fits max_source_length={max_source} / "
            f"max_target_length={max_target}, so an epoch has no steps; raise the limits or "
            "set --config.data.truncate=True"
        )
    return math.ceil((closed + open_rows) / rows), usable
