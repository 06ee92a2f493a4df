"""train.num_epochs: the steps of one epoch counted from the data, the epoch in the logs,
and a resumed run that continues the epoch count."""

import json
import os

import pytest
from tiny_configs import tiny_translation_config

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.epochs import batches_per_epoch
from jaxtrans.data.translation.pipeline import train_iterator
from jaxtrans.errors import UserError
from jaxtrans.tasks import train_and_evaluate
from jaxtrans.training.loop import check_run_settings, run_length
from jaxtrans.training.optimizer import make_optimizer


class WordCountTokenizer:
    """Each word is the id 10: a pair's length in tokens is its number of words."""

    def encode_source_batch(self, texts):
        return [[10] * len(t.split()) for t in texts]

    encode_target_batch = encode_source_batch


def numbered_pairs(tmp_path, n: int) -> str:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"w{i} x\ty{i} z\n" for i in range(n)), encoding="utf-8")
    return str(path)


def data_config(train: str, **changes):
    data = get_data_config()
    data.update(dict(train=train, batch_size=4, prefetch_batches=0, pack_pool_batches=1))
    data.update({"max_source_length": 12, "max_target_length": 12, **changes})
    return data


def epochs_after(iterator, batches: int) -> float:
    for _ in range(batches):
        next(iterator)
    return iterator.stats()["epoch"]


def test_steps_of_an_unpacked_epoch_are_its_pairs_over_the_rows(tmp_path):
    data = data_config(numbered_pairs(tmp_path, 48), pack=False)
    steps, usable = batches_per_epoch(data, WordCountTokenizer(), seed=0)
    assert (steps, usable) == (12, 48)
    iterator = train_iterator(data, WordCountTokenizer(), seed=0)
    assert epochs_after(iterator, 12) == 1.0


def test_steps_of_a_packed_epoch_equal_the_batches_that_read_it(tmp_path):
    # Pairs of 2+EOS source and 2+BOS/EOS target tokens: 4 to a row of 12, 50 pairs ->
    # 13 rows -> 4 batches of 4 rows, the last one part epoch 0 and part epoch 1.
    data = data_config(numbered_pairs(tmp_path, 50))
    steps, _ = batches_per_epoch(data, WordCountTokenizer(), seed=3)
    assert steps == 4
    iterator = train_iterator(data, WordCountTokenizer(), seed=3)
    assert epochs_after(iterator, 3) < 1.0 <= epochs_after(iterator, 1)


def test_pairs_too_long_for_any_row_leave_an_epoch_without_steps(tmp_path):
    data = data_config(numbered_pairs(tmp_path, 5), max_source_length=2)
    with pytest.raises(UserError, match="epoch has no steps"):
        batches_per_epoch(data, WordCountTokenizer(), seed=0)


@pytest.mark.parametrize("steps, epochs", [(10, 2), (-1, 0), (0, -2)])
def test_num_steps_and_num_epochs_are_not_both_set_nor_negative(steps, epochs):
    config = tiny_translation_config(steps, **{"train.num_epochs": epochs})
    with pytest.raises(UserError, match="num_"):
        check_run_settings(config, mesh=_OneDevice())


class _OneDevice:
    shape = {"data": 1, "fsdp": 1, "tensor": 1}


def test_a_task_that_cannot_count_epochs_says_num_epochs_is_for_translation():
    class Uncounted:
        def steps_per_epoch(self, seed, process_count):
            return None

    config = tiny_translation_config(0, **{"train.num_epochs": 2, "task": "bert_pretraining"})
    with pytest.raises(UserError, match="num_epochs is for translation runs"):
        run_length(config, Uncounted(), is_main=False)


def test_a_linear_decay_ends_at_the_counted_length_of_the_run(capsys):
    class Counted:
        def steps_per_epoch(self, seed, process_count):
            return 5, "counted"

    config = tiny_translation_config(0, **{"train.num_epochs": 3})
    config.optimizer.update(schedule="linear", warmup_steps=2, learning_rate=1e-3)
    num_steps = run_length(config, Counted(), is_main=True)
    assert num_steps == 15 and "one epoch = 5 steps (counted); 3 epochs = 15 steps" in (
        capsys.readouterr().out
    )
    _, schedule = make_optimizer(config.optimizer, config.model.d_model, num_steps)
    assert float(schedule(14)) > 0 and float(schedule(15)) == 0


def read_train_records(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if "loss" in r and "split" not in r]


def epoch_config(num_epochs: int, cache_dir: str):
    return tiny_translation_config(
        0,
        **{
            "train.num_epochs": num_epochs,
            "data.demo_train_size": 120,
            "data.pack_pool_batches": 1,
            "train.checkpoint_every": 1000,
            # The three runs compile the same step: once is enough.
            "train.compilation_cache_dir": cache_dir,
            "train.async_checkpoints": False,
        },
    )


def test_epochs_are_logged_and_a_resumed_run_continues_them(tmp_path, capsys):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    cache = str(tmp_path / "xla")
    train_and_evaluate(epoch_config(2, cache), str(straight))
    said = capsys.readouterr().out
    train_and_evaluate(epoch_config(1, cache), str(resumed))  # saves at the end of epoch 1
    train_and_evaluate(epoch_config(2, cache), str(resumed))  # the same command, 2 epochs: resumes
    a, b = read_train_records(straight), read_train_records(resumed)
    per_epoch = len(a) // 2
    assert f"one epoch = {per_epoch} steps (counted:" in said
    assert f"2 epochs = {2 * per_epoch} steps" in said
    assert [r["step"] for r in a] == list(range(1, 2 * per_epoch + 1))
    assert f"epoch {a[0]['epoch']:.2f}  loss" in said
    epochs = [r["epoch"] for r in a]
    assert epochs == sorted(epochs) and epochs[0] > 0
    assert abs(epochs[per_epoch - 1] - 1) < 0.2 and abs(epochs[-1] - 2) < 0.2, epochs
    assert [(r["epoch"], r["loss"]) for r in a] == [(r["epoch"], r["loss"]) for r in b]
