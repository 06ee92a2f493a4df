"""data.tokens_per_batch: a step of about N target tokens, whatever the maximum length."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from paths import REPO
from tiny_configs import tiny_translation_config

from jaxtrans.errors import UserError
from jaxtrans.tasks import train_and_evaluate
from jaxtrans.training.run_settings import batch_rows, check_run_settings, rows_for_tokens


class Mesh:
    def __init__(self, data=1, fsdp=1, tensor=1):
        self.shape = {"data": data, "fsdp": fsdp, "tensor": tensor}


def by_tokens(tokens: int, **overrides):
    return tiny_translation_config(
        2, **{"data.batch_size": 0, "data.tokens_per_batch": tokens, **overrides}
    )


@pytest.mark.parametrize(
    "tokens, length, multiple, rows",
    [(25_000, 256, 1, 98), (25_000, 256, 8, 104), (25_000, 128, 1, 196), (96, 32, 1, 3),
     (97, 32, 1, 4), (97, 32, 3, 6)],
)  # fmt: skip
def test_rows_hold_the_tokens_rounded_up_to_what_the_mesh_needs(tokens, length, multiple, rows):
    assert rows_for_tokens(tokens, length, multiple) == rows


def test_the_rows_of_a_step_come_from_the_tokens_and_the_data_parallel_devices(capsys):
    config = by_tokens(200, **{"data.max_target_length": 24})

    one = batch_rows(config, Mesh())
    eight = batch_rows(config, Mesh(data=2, fsdp=4))
    two_and_tensor = batch_rows(config, Mesh(data=2, tensor=4))

    assert one.data.batch_size == 9  # ceil(200 / 24)
    assert eight.data.batch_size == 16  # a multiple of data x fsdp
    assert two_and_tensor.data.batch_size == 10  # tensor devices share rows
    assert config.data.batch_size == 0  # the given config is left as it was
    said = capsys.readouterr().out
    assert "data.tokens_per_batch=200: 9 rows of 24 target tokens a step" in said
    for resolved, mesh in ((one, Mesh()), (eight, Mesh(data=2, fsdp=4))):
        check_run_settings(resolved, mesh)


def test_gradient_accumulation_gets_rows_it_can_split():
    config = by_tokens(200, **{"data.max_target_length": 24, "train.grad_accum_steps": 4})
    assert batch_rows(config, Mesh(data=2)).data.batch_size == 12


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"data.batch_size": 64}, "data.batch_size=64 and --config.data.tokens_per_batch=200: "
                                  "set one of them, the other to 0"),
        ({"data.pack": False}, "needs packed rows"),
        ({"data.tokens_per_batch": -5}, "tokens_per_batch=-5: use a whole number >= 0"),
    ],
)  # fmt: skip
def test_bad_combinations_are_one_line_errors(overrides, message):
    config = by_tokens(200, **overrides)
    with pytest.raises(UserError) as raised:
        batch_rows(config, Mesh())
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_translation_run_by_tokens_trains_on_that_many_rows(tmp_path, capsys):
    config = by_tokens(100, **{"train.compilation_cache_dir": ""})  # 24-token rows: 5
    metrics = train_and_evaluate(config, str(tmp_path))

    assert np.isfinite(metrics["loss"])
    out = capsys.readouterr().out
    assert "data.tokens_per_batch=100: 5 rows of 24 target tokens a step" in out
    assert "5 rows per step" in out
    with open(tmp_path / "config.json") as f:
        saved = json.load(f)["data"]
    assert saved["batch_size"] == 5 and saved["tokens_per_batch"] == 100


def test_bert_refuses_tokens_per_batch_with_one_line_and_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/bert_demo.py",
         "--workdir", str(tmp_path / "w"), "--config.data.tokens_per_batch=4096"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "tokens_per_batch=4096 is for translation; a bert_pretraining step is" in errors[0]
    assert not os.path.exists(tmp_path / "w" / "config.json")
