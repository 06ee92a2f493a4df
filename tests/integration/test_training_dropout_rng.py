"""A run with the rbg dropout generator resumes exactly, its checkpoints say which
generator their key is of, and a run resumed with another generator keeps its
checkpoints' (an older workdir's threefry key: tests/integration/test_old_workdirs.py)."""

import json
import os

import jax
import numpy as np
import pytest
from tiny_configs import tiny_translation_config

from jaxtrans.tasks import train_and_evaluate
from jaxtrans.workdirs.checkpoints import Checkpointer


def config(num_steps: int, impl: str):
    # configs/demo.py's residual dropout 0.1: every step draws masks.
    return tiny_translation_config(
        num_steps,
        **{
            "train.checkpoint_every": 3,
            "train.compilation_cache_dir": "",
            "train.dropout_rng_impl": impl,
        },
    )


def losses(workdir) -> list[tuple[int, float, float]]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in records if "split" not in r]


def saved(workdir, step: int):
    """(params leaves, dropout key data, metadata) of checkpoint ``step``."""
    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        from orbax.checkpoint import args

        restored = checkpointer.manager.restore(
            step,
            args=args.Composite(
                params=args.StandardRestore(),
                training=args.StandardRestore(),
                meta=args.JsonRestore(),
            ),
        )
    finally:
        checkpointer.close()
    params = [np.asarray(x) for x in jax.tree.leaves(restored["params"])]
    return params, np.asarray(restored["training"]["rng"]), restored["meta"]


@pytest.fixture(scope="module")
def rbg_straight(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rbg_straight")
    train_and_evaluate(config(8, "rbg"), str(workdir))
    return workdir


def test_an_rbg_run_resumes_with_the_losses_and_parameters_of_an_uninterrupted_one(
    rbg_straight, tmp_path
):
    train_and_evaluate(config(5, "rbg"), str(tmp_path))  # stops after the step-5 checkpoint
    train_and_evaluate(config(8, "rbg"), str(tmp_path))  # resumes
    assert losses(tmp_path) == losses(rbg_straight)
    assert [step for step, _, _ in losses(tmp_path)] == list(range(1, 9))
    straight, resumed = saved(rbg_straight, 8), saved(tmp_path, 8)
    for a, b in zip(straight[0], resumed[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(straight[1], resumed[1])
    assert straight[1].shape == (4,) and straight[2]["dropout_rng_impl"] == "rbg"


def test_rbg_draws_other_masks_than_threefry(rbg_straight, tmp_path):
    train_and_evaluate(config(1, "threefry"), str(tmp_path))
    _, threefry_key, meta = saved(tmp_path, 1)
    assert threefry_key.shape == (2,) and meta["dropout_rng_impl"] == "threefry"
    # The initial parameters are the same (tests/unit/training/test_dropout_rng.py), so the
    # first step's loss differs by the masks alone.
    (_, threefry_loss, _), (_, rbg_loss, _) = losses(tmp_path)[0], losses(rbg_straight)[0]
    assert threefry_loss != rbg_loss
    assert abs(threefry_loss - rbg_loss) < 0.05 * rbg_loss


def test_a_run_resumed_with_another_generator_keeps_its_checkpoints_and_says_so(
    rbg_straight, tmp_path, capsys
):
    train_and_evaluate(config(5, "rbg"), str(tmp_path))
    capsys.readouterr()
    train_and_evaluate(config(8, "threefry"), str(tmp_path))
    said = capsys.readouterr().out
    assert (
        "train.dropout_rng_impl=threefry: checkpoint 5 holds a dropout key of rbg, kept so "
        "that the run resumes exactly (a new --workdir starts with threefry)"
    ) in said
    assert losses(tmp_path) == losses(rbg_straight)
    assert saved(tmp_path, 8)[2]["dropout_rng_impl"] == "rbg"
