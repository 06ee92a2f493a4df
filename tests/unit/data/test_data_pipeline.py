"""The training input pipeline: packed batches, masks, resume, sharding, shuffling, counts."""

import json

import jax
import numpy as np
import pytest

from jaxtrans.data.packing import FirstFitPacker
from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.epochs import batches_per_epoch
from jaxtrans.data.translation.pipeline import BATCH_KEYS, train_iterator
from jaxtrans.data.translation.sources import training_pairs
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.nn.masks import segment_mask

NUMBERED = 103  # lines of the numbered file: odd, so two shards differ in size


def small_demo_config(**overrides):
    data = get_data_config()
    data.update(dict(demo_train_size=1500, demo_dev_size=50, demo_test_size=50, vocab_size=300))
    data.update(batch_size=8, max_source_length=32, max_target_length=32, workers=0)
    data.update(overrides)
    return data


@pytest.fixture(scope="module")
def demo_tokenizer(tmp_path_factory):
    return load_or_train_tokenizer(small_demo_config(), str(tmp_path_factory.mktemp("run")))


@pytest.fixture(scope="module")
def numbered(tmp_path_factory):
    """A TSV of NUMBERED distinct pairs "src N<TAB>tgt N", and a tokenizer trained on it."""
    directory = tmp_path_factory.mktemp("numbered")
    path = directory / "train.tsv"
    path.write_text("".join(f"src {i}\ttgt {i}\n" for i in range(NUMBERED)))
    data = small_demo_config(train=str(path), vocab_size=40, pack=False, batch_size=2)
    return data, load_or_train_tokenizer(data, str(directory / "run"))


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def segments_of(batch, row):
    """Per packed pair k of a row: (source ids, target_in ids, target_out ids, positions)."""
    out = []
    for k in range(1, batch["source_segments"][row].max() + 1):
        s = batch["source_segments"][row] == k
        t = batch["target_segments"][row] == k
        out.append(
            (
                batch["source"][row][s],
                batch["target_in"][row][t],
                batch["target_out"][row][t],
                batch["source_positions"][row][s],
                batch["target_positions"][row][t],
            )
        )
    return out


def pair_numbers(batches, tokenizer):
    """The N of "src N" in each row of unpacked batches, in order."""
    return [int(tokenizer.decode_source(row).split()[1]) for b in batches for row in b["source"]]


def test_batches_have_contract_keys_and_local_int32_shapes(demo_tokenizer):
    data = small_demo_config(max_source_length=24, max_target_length=40)
    iterator = train_iterator(data, demo_tokenizer, seed=0, process_index=1, process_count=2)
    batch = next(iterator)
    assert sorted(batch) == sorted(BATCH_KEYS)
    for key in BATCH_KEYS:
        length = 24 if key.startswith("source") else 40
        assert batch[key].shape == (4, length), key
        assert batch[key].dtype == np.int32


def test_packed_rows_hold_whole_pairs_with_eos_bos_and_restarting_positions(demo_tokenizer):
    data = small_demo_config()
    tokenised = {
        (
            tuple(demo_tokenizer.encode_source(p.source)),
            tuple(demo_tokenizer.encode_target(p.target)),
        )
        for p in training_pairs(data)
    }
    packed_rows = 0
    for batch in take(train_iterator(data, demo_tokenizer, seed=1), 5):
        for row in range(batch["source"].shape[0]):
            pairs = segments_of(batch, row)
            packed_rows += len(pairs) > 1
            for source, target_in, target_out, source_pos, target_pos in pairs:
                assert source[-1] == EOS_ID and EOS_ID not in source[:-1]
                assert target_in[0] == BOS_ID and target_out[-1] == EOS_ID
                np.testing.assert_array_equal(target_out[:-1], target_in[1:])
                assert (tuple(source[:-1]), tuple(target_out[:-1])) in tokenised
                np.testing.assert_array_equal(source_pos, np.arange(len(source)))
                np.testing.assert_array_equal(target_pos, np.arange(len(target_in)))
            for side in ("source", "target"):
                padding = batch[f"{side}_segments"][row] == 0
                tokens = batch["source" if side == "source" else "target_in"][row]
                assert (tokens[padding] == PAD_ID).all() and (tokens[~padding] != PAD_ID).all()
                assert (batch[f"{side}_positions"][row][padding] == 0).all()
    assert packed_rows > 0


def test_model_segment_masks_never_join_two_packed_pairs(demo_tokenizer):
    batch = next(train_iterator(small_demo_config(), demo_tokenizer, seed=2))
    source_segments, target_segments = batch["source_segments"], batch["target_segments"]
    for mask, q, k in (
        (segment_mask(source_segments), source_segments, source_segments),
        (segment_mask(target_segments), target_segments, target_segments),
        (segment_mask(target_segments, source_segments), target_segments, source_segments),
    ):
        allowed = np.asarray(mask)[:, 0]
        same_pair = (q[:, :, None] == k[:, None, :]) & (q[:, :, None] > 0)
        np.testing.assert_array_equal(allowed, same_pair)


@pytest.mark.slow
def test_transformer_on_a_packed_batch_equals_each_pair_alone(demo_tokenizer):
    batch = next(train_iterator(small_demo_config(), demo_tokenizer, seed=3))
    config = TransformerConfig(
        vocab_size=demo_tokenizer.source_vocab_size,
        d_model=32,
        num_heads=2,
        d_ff=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
        position="sinusoidal",
    )
    model = Transformer(config)
    variables = model.init(jax.random.key(0), batch["source"][:1], batch["target_in"][:1])
    apply = jax.jit(model.apply)
    packed = apply(
        variables,
        batch["source"],
        batch["target_in"],
        batch["source_segments"],
        batch["target_segments"],
        batch["source_positions"],
        batch["target_positions"],
    )
    for row in range(2):
        for k, (source, target_in, *_) in enumerate(segments_of(batch, row), start=1):
            # The pair alone in a row of its own, padded (plain padding masks, no segments).
            alone_source = np.zeros_like(batch["source"][:1])
            alone_source[0, : len(source)] = source
            alone_target = np.zeros_like(batch["target_in"][:1])
            alone_target[0, : len(target_in)] = target_in
            alone = apply(variables, alone_source, alone_target)[0, : len(target_in)]
            np.testing.assert_allclose(
                packed[row][batch["target_segments"][row] == k], alone, atol=1e-5, rtol=1e-5
            )


@pytest.mark.parametrize("pack", [True, False])
def test_restored_iterator_yields_the_batches_an_uninterrupted_run_yields(demo_tokenizer, pack):
    data = small_demo_config(pack=pack)
    iterator = train_iterator(data, demo_tokenizer, seed=4)
    take(iterator, 60)  # the next batches cross into the second epoch
    state = json.loads(json.dumps(iterator.get_state()))
    stats = iterator.stats()
    expected = take(iterator, 25)

    restored = train_iterator(data, demo_tokenizer, seed=4)
    restored.set_state(state)
    assert restored.stats()["pairs_read"] == stats["pairs_read"]
    for want, got in zip(expected, take(restored, 25), strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(want[key], got[key])
    iterator.close()
    restored.close()


def test_process_shards_are_disjoint_and_cover_the_data(numbered):
    data, tokenizer = numbered
    shards = []
    for process_index in range(2):
        iterator = train_iterator(
            data, tokenizer, seed=5, process_index=process_index, process_count=2
        )
        shard_size = (NUMBERED + 1 - process_index) // 2
        shards.append(pair_numbers(take(iterator, shard_size), tokenizer))
    assert not set(shards[0]) & set(shards[1])
    assert sorted(shards[0] + shards[1]) == list(range(NUMBERED))


def test_uneven_data_shards_end_their_epochs_at_different_steps_and_resume_so(numbered):
    """103 pairs in 2 data shards: shard 0 holds the 52 even ones, shard 1 the 51 odd ones
    (one row of each a step). Shard 1 starts its second epoch a step before shard 0, each
    epoch a new permutation of its own pairs; states saved between the two boundaries
    resume the same global batches on 1 process; the step count of an epoch is shard 0's."""
    data, tokenizer = numbered
    processes = [
        train_iterator(data, tokenizer, seed=11, process_index=p, process_count=2) for p in range(2)
    ]
    read = [pair_numbers(take(iterator, 52), tokenizer) for iterator in processes]
    evens, odds = list(range(0, NUMBERED, 2)), list(range(1, NUMBERED, 2))
    assert sorted(read[0]) == evens  # shard 0's first epoch takes all 52 steps
    assert sorted(read[1][:51]) == odds and read[1][51] in odds  # shard 1's ends at step 51
    assert [iterator.stats()["epoch"] for iterator in processes] == [1.0, 52 / 51]
    states = [json.loads(json.dumps(iterator.get_state())) for iterator in processes]
    expected = global_batches(processes, 60)  # across shard 0's boundary, into epoch 2
    second = [pair_numbers([b], tokenizer) for b in expected]
    assert sorted(n for n, _ in second[:52]) == evens  # shard 0's second epoch: 52 more steps
    assert sorted([read[1][51], *(m for _, m in second[:50])]) == odds
    assert [n for n, _ in second[:52]] != read[0]  # a new order

    alone = train_iterator(data, tokenizer, seed=11, process_index=0, process_count=1)
    alone.restore_states(states, 0, 1)
    for want, got in zip(expected, take(alone, 60), strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(want[key], got[key], err_msg=key)
    assert batches_per_epoch(data, tokenizer, seed=11, process_count=2) == (52, 52)
    for iterator in [*processes, alone]:
        iterator.close()


def test_each_epoch_is_a_new_permutation_and_unshuffled_reads_file_order(numbered):
    data, tokenizer = numbered
    data = data.copy_and_resolve_references()
    data.batch_size = 1
    numbers = pair_numbers(take(train_iterator(data, tokenizer, seed=6), 2 * NUMBERED), tokenizer)
    first, second = numbers[:NUMBERED], numbers[NUMBERED:]
    assert sorted(first) == sorted(second) == list(range(NUMBERED))
    assert first != second and first != sorted(first)

    data.shuffle = False
    in_order = pair_numbers(take(train_iterator(data, tokenizer, seed=6), NUMBERED), tokenizer)
    assert in_order == list(range(NUMBERED))


def test_seed_decides_the_order(demo_tokenizer):
    def first_batch(seed):
        return next(train_iterator(small_demo_config(), demo_tokenizer, seed=seed))["source"]

    np.testing.assert_array_equal(first_batch(7), first_batch(7))
    assert not np.array_equal(first_batch(7), first_batch(8))


def write_lengths_file(path):
    long_source = " ".join(f"w{i}" for i in range(40))
    lines = [f"short {i}\tkurz {i}" for i in range(7)] + [f"{long_source}\tlang"] * 3
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_too_long_pairs_are_dropped_and_counted(tmp_path):
    data = small_demo_config(
        train=write_lengths_file(tmp_path / "t.tsv"), vocab_size=60, pack=False, batch_size=1
    )
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    data.max_source_length = 16
    iterator = train_iterator(data, tokenizer, seed=0, process_count=1)
    batches = take(iterator, 7)  # one epoch: the seven short pairs
    assert iterator.stats()["pairs_dropped_too_long"] == 3
    assert iterator.stats()["pairs_read"] == 10
    assert all(tokenizer.decode_source(b["source"][0]).startswith("short") for b in batches)


def test_truncate_cuts_long_pairs_to_the_maximum_length(tmp_path):
    data = small_demo_config(
        train=write_lengths_file(tmp_path / "t.tsv"), vocab_size=60, pack=False, batch_size=1
    )
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    data.update(max_source_length=16, truncate=True, shuffle=False)
    iterator = train_iterator(data, tokenizer, seed=0)
    batches = take(iterator, 10)
    assert iterator.stats()["pairs_truncated"] == 3
    for batch in batches[7:]:
        source = batch["source"][0]
        assert source[-1] == EOS_ID and (source != PAD_ID).all()


def test_skipped_malformed_lines_are_counted(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_bytes(b"a b\tA B\nno tab\nc d\tC D\n\xff\tX\ne f\tE F\n")
    data = small_demo_config(
        train=str(path), vocab_size=30, pack=False, batch_size=1, skip_malformed=True, shuffle=False
    )
    tokenizer = load_or_train_tokenizer(data, str(tmp_path / "run"))
    iterator = train_iterator(data, tokenizer, seed=0)
    take(iterator, 3)
    assert iterator.stats()["pairs_malformed"] == 2


def test_reported_padding_fraction_counts_pad_tokens(demo_tokenizer):
    iterator = train_iterator(small_demo_config(), demo_tokenizer, seed=9)
    batch = next(iterator)
    pads = np.sum(batch["source"] == PAD_ID) + np.sum(batch["target_in"] == PAD_ID)
    total = batch["source"].size + batch["target_in"].size
    assert iterator.stats()["padding_fraction"] == pytest.approx(pads / total)


def test_unpacked_rows_are_one_pair_each(demo_tokenizer):
    batch = next(train_iterator(small_demo_config(pack=False), demo_tokenizer, seed=10))
    assert set(np.unique(batch["source_segments"])) == {0, 1}
    assert set(np.unique(batch["target_segments"])) == {0, 1}


def test_first_fit_packer_places_every_pair_once_within_row_capacity():
    rng = np.random.default_rng(0)
    lengths = {k: tuple(rng.integers(2, 17, size=2)) for k in range(2000)}
    packer = FirstFitPacker(max_source=32, max_target=24, pool_rows=16)
    rows = [row for k, (s, t) in lengths.items() for row in packer.add(k, s, t)]
    rows += packer.rows
    assert sorted(k for row in rows for k in row) == list(range(2000))
    for row in rows:
        assert sum(lengths[k][0] for k in row) <= 32
        assert sum(lengths[k][1] for k in row) <= 24


def test_batch_size_not_divisible_by_processes_is_a_user_error(demo_tokenizer):
    with pytest.raises(UserError, match="not divisible"):
        train_iterator(small_demo_config(batch_size=6), demo_tokenizer, seed=0, process_count=4)


def global_batches(iterators, n):
    """The next ``n`` global batches: the processes' batches one after another."""
    local = [take(iterator, n) for iterator in iterators]
    return [
        {key: np.concatenate([batches[i][key] for batches in local]) for key in BATCH_KEYS}
        for i in range(n)
    ]


@pytest.mark.parametrize("new_count", [1, 2, 4, 8])
def test_a_checkpoint_of_2_processes_resumes_the_same_global_batches_on_any_count(
    demo_tokenizer, new_count
):
    data = small_demo_config(batch_size=8)
    saving = [
        train_iterator(data, demo_tokenizer, seed=3, process_index=p, process_count=2)
        for p in range(2)
    ]
    take(saving[0], 30), take(saving[1], 30)  # into the second epoch of each data shard
    states = [json.loads(json.dumps(iterator.get_state())) for iterator in saving]
    expected = global_batches(saving, 12)

    resumed = []
    for p in range(new_count):
        iterator = train_iterator(
            data, demo_tokenizer, seed=3, process_index=p, process_count=new_count
        )
        note = iterator.restore_states(states, p, new_count)
        assert (note is None) == (new_count == 2)
        resumed.append(iterator)
    for want, got in zip(expected, global_batches(resumed, 12), strict=True):
        for key in BATCH_KEYS:
            np.testing.assert_array_equal(want[key], got[key], err_msg=key)
    for iterator in saving + resumed:
        iterator.close()


def test_resuming_on_another_count_says_how_the_data_shards_are_split(demo_tokenizer):
    data = small_demo_config(batch_size=8)
    states = [
        train_iterator(data, demo_tokenizer, seed=0, process_index=p, process_count=2).get_state()
        for p in range(2)
    ]
    iterator = train_iterator(data, demo_tokenizer, seed=0, process_count=1)
    assert iterator.restore_states(states, 0, 1) == (
        "data: the checkpoint was saved by 2 processes, this run has 1; its 2 data shards are "
        "split anew (process 0 runs 0, 1), so the global batches continue unchanged"
    )


def test_a_checkpoint_holding_one_process_state_of_two_is_a_user_error(demo_tokenizer):
    """Older versions saved process 0's state only: the other shard's position is lost."""
    data = small_demo_config()
    state = train_iterator(data, demo_tokenizer, seed=0, process_count=2).get_state()
    with pytest.raises(UserError, match="no saved data-pipeline position of data shard 1"):
        train_iterator(data, demo_tokenizer, seed=0, process_count=1).restore_states([state], 0, 1)


def test_a_state_made_with_another_batch_size_is_a_user_error(demo_tokenizer):
    state = train_iterator(small_demo_config(batch_size=4), demo_tokenizer, seed=0).get_state()
    with pytest.raises(UserError, match="batch_size=4, this run has batch_size=8"):
        train_iterator(small_demo_config(batch_size=8), demo_tokenizer, seed=0).set_state(state)


def test_a_worker_count_below_minus_one_is_a_user_error(demo_tokenizer):
    with pytest.raises(UserError, match=r"--config.data.workers=-2: use a whole number"):
        train_iterator(small_demo_config(workers=-2), demo_tokenizer, seed=0)
