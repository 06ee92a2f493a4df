"""The chunked translation loss under sharding (eight forced CPU devices in a subprocess,
tests/helpers/chunked_loss_sharded.py): its sums and gradients on a data-parallel mesh and
on a data x fsdp x tensor mesh (the vocabulary split over tensor) equal the whole-logits
loss on one device, and chunking the target positions keeps the rows split: the
data-parallel program gathers nothing (its only collectives are the all-reduces of the
sums and gradients)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from paths import HELPERS, xla_flags

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(HELPERS, "chunked_loss_sharded.py")
# 16 rows of 10 target positions: 4 tokens a device are chunks of one or two positions.
CHUNK = 4


def run(outdir, chunk, meshes):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(8)}
    args = [sys.executable, SCRIPT, str(outdir), str(chunk), *meshes]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("chunked")
    run(outdir, 0, ["1x1x1"])
    run(outdir, CHUNK, ["1x1x1", "8x1x1", "2x2x2"])
    return outdir


@pytest.mark.parametrize("mesh", ["1x1x1", "8x1x1", "2x2x2"])
def test_chunked_loss_on_a_mesh_equals_the_whole_logits_on_one_device(results, mesh):
    want = np.load(results / "1x1x1-0.npz")
    got = np.load(results / f"{mesh}-{CHUNK}.npz")
    keys = set(want.files) - {"collectives", "batch_shards"}
    assert keys == set(got.files) - {"collectives", "batch_shards"}
    largest = max(np.abs(want[k]).max() for k in keys if not k.startswith("sum_"))
    for key in sorted(keys):
        if key.startswith("sum_"):
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
            continue
        # Each gradient within 1e-5 of its own largest element; the attention key biases,
        # zero in exact arithmetic, against the largest gradient.
        scale = largest if key.endswith("['key']['bias']") else np.abs(want[key]).max()
        assert np.abs(got[key] - want[key]).max() <= 1e-5 * scale, key


def test_data_parallel_chunked_loss_gathers_nothing(results):
    assert list(np.load(results / f"8x1x1-{CHUNK}.npz")["collectives"]) == ["all-reduce"]


@pytest.mark.parametrize("mesh, shards", [("1x1x1", 1), ("8x1x1", 8), ("2x2x2", 4)])
def test_the_loss_chunks_each_devices_rows(results, mesh, shards):
    """chunk_tokens counts one device's tokens: the rows are split over data x fsdp."""
    assert int(np.load(results / f"{mesh}-{CHUNK}.npz")["batch_shards"]) == shards
