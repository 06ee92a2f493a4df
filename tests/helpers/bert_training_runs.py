"""BERT runs shared by the training tests (test_bert_pretraining.py,
test_bert_fine_tuning.py): configs/bert_demo.py shrunk to seconds, a tiny pretraining run
trained through train.py, one compilation cache a module, and readers of what a run wrote."""

import json
import os
import subprocess
import sys

from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model is built here, not fetched

import jax
import numpy as np
import pytest
from orbax.checkpoint import args as ocp_args
from tiny_configs import TINY_PRETRAINING as SHARED_TINY_PRETRAINING

from jaxtrans.workdirs.checkpoints import Checkpointer

sys.path.insert(0, REPO)

from configs import bert_demo  # noqa: E402

# configs/bert_demo.py shrunk to seconds; the same overrides go to train.py as flags.
# A copy: the module's compilation cache is added to it below.
TINY_PRETRAINING = dict(SHARED_TINY_PRETRAINING)
PRETRAINING_STEPS = 6


@pytest.fixture(scope="module", autouse=True)
def compilation_cache(tmp_path_factory):
    """One persistent XLA cache for this module's runs, so that a run does not compile again
    what an earlier run compiled; the process's cache settings are restored afterwards."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    saved = {
        name: getattr(jax.config, name)
        for name in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    }
    TINY_PRETRAINING["train.compilation_cache_dir"] = str(tmp_path_factory.mktemp("xla_cache"))
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    cc.reset_cache()


def tiny_pretraining_config(num_steps: int):
    config = bert_demo.get_config()
    config.update_from_flattened_dict({**TINY_PRETRAINING, "train.num_steps": num_steps})
    return config


def read_records(workdir, split="train"):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    if split == "train":
        return [r for r in records if "split" not in r]
    return [r for r in records if r.get("split") == split]


def checkpoint_params(workdir, step):
    """The parameters of a checkpoint, read with orbax directly (nested dict of arrays)."""
    checkpointer = Checkpointer(str(workdir), read_only=True)
    try:
        restored = checkpointer.manager.restore(
            step, args=ocp_args.Composite(params=ocp_args.StandardRestore())
        )
        return jax.tree.map(np.asarray, restored["params"])
    finally:
        checkpointer.close()


def log_softmax(logits):
    """NumPy float64 log_softmax over the last axis (the references' arithmetic)."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """configs/bert_demo.py (tiny) trained through train.py, as a user runs it."""
    workdir = tmp_path_factory.mktemp("bert_pretraining")
    flags = [f"--config.{k}={v}" for k, v in TINY_PRETRAINING.items()]
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/bert_demo.py", "--workdir",
         str(workdir), f"--config.train.num_steps={PRETRAINING_STEPS}", *flags],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir
