"""The data counts of a training log record (training.metrics.log_window): the pairs read
and those dropped, cut or skipped as malformed reach metrics.jsonl as the training
iterator's stats() gives them."""

import json

import numpy as np

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.pipeline import train_iterator
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.training.metrics import DATA_COUNTS, MetricsWriter, log_window

# One train step's metrics, as the step returns them (on the host here).
STEP = {
    "loss": np.float32(2.0),
    "tokens": np.float32(10),
    "lr": np.float32(1e-3),
    "nonfinite": np.bool_(False),
}


def logged(workdir, data_stats: dict) -> dict:
    """The record log_window makes of one step and ``data_stats``, as metrics.jsonl holds it."""
    writer = MetricsWriter(str(workdir))
    writer.write(1, log_window([STEP], 1.0, 1, None, None, data_stats))
    writer.close()
    (record,) = [json.loads(line) for line in (workdir / "metrics.jsonl").open()]
    return record


def test_skipped_malformed_training_lines_are_counted_in_metrics_jsonl(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"a b\tA B\nno tab\nc d\tC D\n\xff\tX\ne f\tE F\n")  # lines 2, 4 malformed
    data = get_data_config()
    data.update(train=str(path), vocab_size=30, pack=False, batch_size=1, shuffle=False)
    data.update(skip_malformed=True, max_source_length=32, max_target_length=32)
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    iterator = train_iterator(data, tokenizer, seed=0)
    for _ in range(3):  # the three good lines: the file read once
        next(iterator)
    record = logged(tmp_path, iterator.stats())
    assert (record["pairs_read"], record["pairs_malformed"]) == (5, 2)
    assert (record["pairs_dropped_too_long"], record["pairs_truncated"]) == (0, 0)


def test_a_record_holds_the_counts_its_data_gives_and_no_others(tmp_path):
    counts = {"pairs_read": 7, "pairs_malformed": 1}  # an iterator with two of the counters
    record = logged(tmp_path, {**counts, "mean_padding_fraction": 0.25})
    assert {key: record[key] for key in DATA_COUNTS if key in record} == counts
    assert record["padding_fraction"] == 0.25
