"""--find_batch end to end over compile-only TPU devices (libtpu): the tiny step compiled
at each batch the search tries, in steps of the rows a step must divide into; and the
bytes of the compile report against a count by hand.

The memory budget is set from a compile of the same step at a known batch, so that the
answer is known before the search runs; the row step is counted here from the mesh, the
hosts and the gradient accumulation, not read from the code.
"""

import re
from dataclasses import dataclass

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache
from tiny_configs import TINY_TRANSLATION, tiny_translation_config

from jaxtrans.compiling.compile_report import compile_for_slice
from jaxtrans.compiling.tpu_topologies import Slice, slice_named
from jaxtrans.compiling import compile_report


@pytest.fixture(scope="module", autouse=True)
def no_persistent_cache():
    """As in test_compile_tpu.py: libtpu's compile-only client cannot read CPU entries."""
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


@dataclass(frozen=True)
class _SliceWithBudget(Slice):
    """A TPU slice whose chips hold ``budget`` bytes (the search's bound)."""

    budget: int = 0

    @property
    def hbm_bytes(self) -> int:
        return self.budget


# v5e-16: 16 chips on 4 hosts (2x2 chips a host); every chip a replica; 3 micro-batches.
# The rows of a step divide over the 16 replicas, and over 4 hosts x 3 micro-batches:
# steps of lcm(16, 12) = 48 rows.
ROW_STEP = 48
RUN = {**TINY_TRANSLATION, "mesh.data": -1, "train.grad_accum_steps": 3}


def tried(stderr: str, remat: str) -> dict[int, bool]:
    """The batches the search compiled with remat ``remat`` ("on"/"off") -> fitted."""
    lines = re.findall(rf"remat {remat}: (\d+) rows, [\d.]+ GiB, (fits|does not fit)", stderr)
    return {int(rows): verdict == "fits" for rows, verdict in lines}


def test_find_batch_searches_in_row_steps_up_to_the_budget(monkeypatch, capsys):
    # The budget: exactly what the step takes at 2 steps of rows (96), without remat.
    at_96 = compile_for_slice(tiny_translation_config(10, **{**RUN, "data.batch_size": 96}),
                              "v5e-16", decode=False)  # fmt: skip
    budget = at_96["bytes_per_device"]["total"]
    slice_ = _SliceWithBudget(**vars(slice_named("v5e-16")), budget=budget)
    monkeypatch.setattr(compile_report, "target_named", lambda name: slice_)
    capsys.readouterr()

    config = tiny_translation_config(10, **{**RUN, "data.batch_size": 48})
    report = compile_for_slice(config, "v5e-16", find_batch=True, decode=False)
    found = report["find_batch"]
    stderr = capsys.readouterr().err

    assert found["remat_off"]["row_multiple"] == ROW_STEP
    assert found["remat_on"]["row_multiple"] == ROW_STEP
    # Without remat: 96 rows fit (the budget is their total), 144 do not.
    assert found["remat_off"]["rows"] == 96
    for remat in ("off", "on"):
        sizes = tried(stderr, remat)
        rows = found[f"remat_{remat}"]["rows"]
        assert all(size % ROW_STEP == 0 for size in sizes), sizes
        assert len(sizes) <= 8  # bracketing and bisecting: a few compiles, not a scan
        # The answer was compiled and fitted; one row step more was compiled and did not.
        assert sizes[rows] and sizes[rows + ROW_STEP] is False, (remat, sizes)


def test_the_reports_bytes_against_a_count_by_hand():
    """A tiny model whose parameters outweigh its activations (2 rows a chip, 8192-wide
    feed-forward layers), data-parallel on v5e-8. By hand, per chip: the arguments are
    the float32 parameters (4P bytes), Adam's two moments (8P) and the batch, exactly; a
    step must also hold the gradients (4P) beside them, so the peak is at least 16P +
    batch. The bound above: the peak at most 2.25 times that (libtpu's peak for this step
    is 2.06 times it: it counts about 12P more than its own temporaries, as if the
    updated state did not reuse the donated buffers)."""
    run = {**TINY_TRANSLATION, "mesh.data": -1, "data.batch_size": 16, "model.d_model": 128,
           "model.num_heads": 4, "model.d_ff": 8192}  # fmt: skip
    report = compile_for_slice(tiny_translation_config(10, **run), "v5e-8", decode=False)
    params = report["parameters"]
    held = report["bytes_per_device"]
    batch = 2 * 24 * 7 * 4  # 2 rows a chip, 7 int32 arrays of 24 tokens
    assert held["batch"] == batch
    assert abs(held["params"] + held["optimizer"] - 12 * params) <= 64
    hand = 16 * params + batch
    assert hand <= held["total"] <= 2.25 * hand
    # The temporaries are the rest of the peak beyond the compiler's arguments, which are
    # the shards' bytes and a little more: libtpu lays small arrays (biases, LayerNorm
    # scales) out in whole tiles (56 KB of 53 MB here).
    arguments = held["total"] - held["temp"]
    assert 12 * params + batch <= arguments <= 1.01 * (12 * params + batch)
    assert held["temp"] >= 4 * params  # the gradients, at least
