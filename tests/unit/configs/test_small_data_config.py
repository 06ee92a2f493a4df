"""configs/small_data.py: the fixed-budget recipe resolves to a run that the time budget
alone bounds, with a linear schedule that ends with it and about 2,000 token slots a step;
and benchmarks/time_to_bleu.py, which measures it, refuses bad flags before spending time."""

import math
import os
import subprocess
import sys

import pytest
from paths import REPO

from jaxtrans.training import sharding
from jaxtrans.training.run_settings import (
    batch_rows,
    check_run_settings,
    has_time_length_schedule,
    run_length,
)

BENCHMARK = os.path.join(REPO, "benchmarks", "time_to_bleu.py")


@pytest.fixture
def config():
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import small_data

    return small_data.get_config()


def test_the_recipe_is_bounded_by_time_with_a_schedule_that_ends_with_it(config):
    mesh = sharding.make_mesh(config.mesh)
    resolved = batch_rows(config, mesh)
    check_run_settings(resolved, mesh)
    rows, length = resolved.data.batch_size, resolved.data.max_target_length
    assert rows * length == config.data.tokens_per_batch  # 32 packed rows of 64 tokens
    assert resolved.data.pack
    assert config.train.max_minutes > 0
    steps = run_length(resolved, task=None, is_main=True)
    assert steps == math.inf and has_time_length_schedule(resolved, steps)


def test_the_recipe_keeps_the_seeds_shape_with_pre_ln(config):
    model = config.model
    assert (model.d_model, model.num_heads, model.d_ff) == (256, 4, 1024)
    assert (model.num_encoder_layers, model.num_decoder_layers) == (3, 3)
    assert model.norm == "pre"


def run_benchmark(*flags):
    return subprocess.run(
        [sys.executable, BENCHMARK, *flags], capture_output=True, text=True, timeout=60
    )


def test_time_to_bleu_refuses_a_missing_config_before_training():
    out = run_benchmark("--config", "configs/no_such.py", "--minutes", "0.01")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: --config configs/no_such.py: no such file; give a jaxtrans config, e.g. "
        "configs/demo.py"
    ]


def test_time_to_bleu_refuses_an_unknown_split():
    out = run_benchmark("--splits", "train", "--minutes", "0.01")
    assert out.returncode == 2
    assert "--splits train: use dev, test or dev,test" in out.stderr
