"""Id shards: the training pairs tokenised once into the workdir, rewritten when the
tokenizer or the data change, and read by the pipeline into the same batches as text."""

import os
import pathlib

import numpy as np
import pytest

from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.id_shards import ID_SHARDS_DIR, IdShards, ensure_id_shards
from jaxtrans.data.translation.pipeline import BATCH_KEYS, train_iterator
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer, train_tokenizer
from jaxtrans.programs.prepare import prepare


def tsv_config(path, **overrides):
    data = get_data_config()
    data.update(train=str(path), vocab_size=60, batch_size=4, max_source_length=24)
    data.update(max_target_length=24, workers=0, skip_malformed=True)
    data.update(overrides)
    return data


def write_corpus(path, lines=60, extra=""):
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    rows = [
        f"{' '.join(words[(i + k) % 8] for k in range(1 + i % 7))}\t"
        f"{' '.join(words[(3 * i + k) % 8].upper() for k in range(1 + i % 5))}"
        for i in range(lines)
    ]
    rows.insert(5, "a line without a tab")  # malformed, skipped
    path.write_text("\n".join(rows) + "\n" + extra)
    return path


@pytest.fixture
def run(tmp_path):
    data = tsv_config(write_corpus(tmp_path / "train.tsv"))
    workdir = str(tmp_path / "run")
    return data, workdir, load_or_train_tokenizer(data, workdir)


def test_the_shards_hold_each_pairs_ids_and_mark_malformed_lines(run):
    data, workdir, tokenizer = run
    shards = ensure_id_shards(data, tokenizer, workdir, say=lambda line: None)
    lines = pathlib.Path(data.train).read_text(encoding="utf-8").splitlines()
    assert len(shards) == len(lines)
    for i, line in enumerate(lines):
        if "\t" not in line:
            assert shards.lengths[i].tolist() == [-1, -1]
            continue
        source, target = line.split("\t")
        assert shards.ids(0, i).tolist() == tokenizer.encode_source(source)
        assert shards.ids(1, i).tolist() == tokenizer.encode_target(target)


def test_a_changed_data_file_or_tokenizer_writes_the_shards_again(run, tmp_path):
    data, workdir, tokenizer = run
    said = []
    ensure_id_shards(data, tokenizer, workdir, say=said.append)
    ensure_id_shards(data, tokenizer, workdir, say=said.append)
    assert len(said) == 1  # written once, then up to date
    write_corpus(tmp_path / "train.tsv", extra="omega\tOMEGA\n")
    shards = ensure_id_shards(data, tokenizer, workdir, say=said.append)
    assert "training data changed" in said[1]
    assert shards.ids(0, len(shards) - 1).tolist() == tokenizer.encode_source("omega")
    # Another tokenizer in the workdir (a smaller vocabulary): the ids must be its own.
    data.vocab_size = 40
    for name in os.listdir(os.path.join(workdir, "tokenizer")):
        os.remove(os.path.join(workdir, "tokenizer", name))
    train_tokenizer(data, workdir)
    other = load_or_train_tokenizer(data, workdir)
    shards = ensure_id_shards(data, other, workdir, say=said.append)
    assert "tokenizer changed" in said[-2]
    assert shards.ids(1, 0).tolist() == other.encode_target(
        pathlib.Path(data.train).read_text().splitlines()[0].split("\t")[1]
    )


def test_batches_from_id_shards_equal_batches_from_text(run):
    data, workdir, tokenizer = run
    ensure_id_shards(data, tokenizer, workdir, say=lambda line: None)
    from_files = train_iterator(
        data, seed=3, shards=IdShards.open(os.path.join(workdir, ID_SHARDS_DIR))
    )
    from_text = train_iterator(data, tokenizer, seed=3)
    for _ in range(40):  # several epochs
        a, b = next(from_files), next(from_text)
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(a[key], b[key])


def reference_batches(data, tokenizer, seed, count):
    """The packed batches as the pipeline made them from text before id shards: each
    epoch's permutation, pairs tokenised one at a time, first-fit packed, rows built with
    lists (one stream, one process)."""
    lines = [
        line.split("\t")
        for line in pathlib.Path(data.train).read_text(encoding="utf-8").splitlines()
    ]
    rows = data.batch_size
    packer = FirstFitPacker(data.max_source_length, data.max_target_length, rows * 8)
    pairs, ready, batches, index = {}, [], [], 0
    while len(batches) < count:
        epoch, i = divmod(index, len(lines))
        line = lines[np.random.default_rng([seed, epoch]).permutation(len(lines))[i]]
        if len(line) == 2:
            source = tokenizer.encode_source(line[0]) + [EOS_ID]
            target = tokenizer.encode_target(line[1])
            # Kept when the ids, without EOS / BOS, are shorter than the limits.
            if len(source) - 1 < data.max_source_length and len(target) < data.max_target_length:
                pairs[index] = (source, target)
                ready += packer.add(index, len(source), len(target) + 1)
        index += 1
        while len(ready) >= rows:
            batch = {"source": [], "target_in": [], "target_out": []}
            for keys in ready[:rows]:
                batch["source"].append([t for k in keys for t in pairs[k][0]])
                batch["target_in"].append([t for k in keys for t in [BOS_ID, *pairs[k][1]]])
                batch["target_out"].append([t for k in keys for t in [*pairs[k][1], EOS_ID]])
            ready = ready[rows:]
            batches.append(batch)
    return batches[:count]


def test_batches_are_the_pairs_in_the_order_text_gave_them(run):
    data, workdir, tokenizer = run
    data.skip_malformed = True
    shards = ensure_id_shards(data, tokenizer, workdir, say=lambda line: None)
    iterator = train_iterator(data, seed=5, shards=shards)
    for expected in reference_batches(data, tokenizer, 5, 30):
        batch = next(iterator)
        for key, rows in expected.items():
            for r, row in enumerate(rows):
                assert batch[key][r, : len(row)].tolist() == row
                assert not batch[key][r, len(row) :].any()


def test_prepare_writes_the_shards_and_says_what_the_limits_keep(tmp_path):
    import ml_collections

    config = ml_collections.ConfigDict({"task": "translation"})
    config.data = tsv_config(write_corpus(tmp_path / "train.tsv"), max_source_length=4)
    line = prepare(config, str(tmp_path / "run"))
    shards = IdShards.open(str(tmp_path / "run" / ID_SHARDS_DIR))
    lengths = shards.lengths
    kept = np.count_nonzero((lengths[:, 0] >= 0) & (lengths[:, 0] < 4) & (lengths[:, 1] < 24))
    assert f"{len(shards)} pairs" in line
    assert f"{kept} usable" in line and "1 malformed" in line
