"""Checkpoints of a workdir: the reports that a failed orbax operation leaves behind
(dropped) next to everyone else's (kept).

The checkpoints here hold a small tree of random parameters, written by the Checkpointer
the training loop uses; the programs' side of the same behaviours is in
tests/test_reliability_faults.py.
"""

import asyncio
import gc
import glob
import logging
import os
import shutil
import sys
import time
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxtrans import checkpoints
from jaxtrans.checkpoints import Checkpointer, restore_params
from jaxtrans.errors import UserError

STEPS = (1, 2, 3)
ORBAX = os.path.dirname(os.path.dirname(ocp.__file__))


def random_params(seed: int) -> dict:
    """Float32 parameters in [-1, 1), where float32 resolves 1e-7 differences."""
    rng = np.random.default_rng(seed)
    # Kernels over 1 KiB, which orbax keeps in data files rather than in its index.
    shapes = {"encoder": {"kernel": (32, 64), "bias": (64,)}, "decoder": {"kernel": (64, 32)}}
    return jax.tree.map(
        lambda shape: jnp.asarray(rng.uniform(-1, 1, shape), jnp.float32),
        shapes,
        is_leaf=lambda x: isinstance(x, tuple),
    )


def write_checkpoints(workdir: str) -> None:
    checkpointer = Checkpointer(workdir, keep=10)
    for step in STEPS:
        params = random_params(step)
        opt_state = jax.tree.map(jnp.zeros_like, params)
        checkpointer.save(step, params, opt_state, jnp.zeros(2, jnp.uint32), {"step": step})
    checkpointer.wait()
    checkpointer.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """A workdir with checkpoints 1, 2 and 3 (never modified: copy it to damage it)."""
    workdir = str(tmp_path_factory.mktemp("checkpoints") / "run")
    write_checkpoints(workdir)
    return workdir


@pytest.fixture
def workdir(trained, tmp_path) -> str:
    """A copy of ``trained`` to damage."""
    return shutil.copytree(trained, tmp_path / "run")


ABSTRACT = jax.eval_shape(lambda: random_params(0))


def truncate(pattern: str, size: int = 10):
    def damage(workdir: str) -> None:
        for path in glob.glob(f"{workdir}/checkpoints/3/{pattern}"):
            os.truncate(path, size)

    return damage


# ----------------------------------------------------- reports of what a failure abandons


@pytest.fixture
def reports(monkeypatch):
    """Unraisable reports as the process would print them: a recording hook installed
    before any checkpoint operation, in a process where none has run (a fresh
    _AbandonedWork); everything is put back afterwards."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(
        warnings, "_warn_unawaited_coroutine", warnings._warn_unawaited_coroutine, raising=False
    )
    fresh = checkpoints._AbandonedWork()
    monkeypatch.setattr(checkpoints, "_abandoned_work", fresh)
    yield seen
    logging.getLogger("asyncio").removeFilter(fresh)


def from_orbax(report) -> bool:
    frames = traceback.extract_tb(report.exc_traceback) if report.exc_traceback else []
    code = getattr(report.object, "cr_code", None)
    return any(f.filename.startswith(ORBAX) for f in frames) or (
        code is not None and code.co_filename.startswith(ORBAX)
    )


def fail_a_restore(workdir: str) -> None:
    truncate("params/ocdbt.process_0/d/*")(workdir)
    with pytest.raises(UserError, match="checkpoint 3 cannot be restored"):
        restore_params(workdir, ABSTRACT, "latest")
    for _ in range(3):  # let what the restore abandoned finish and be collected
        time.sleep(0.2)
        gc.collect()


class RaisesWhenCollected:
    def __del__(self):
        raise RuntimeError("an unrelated finalizer failed")


async def unrelated_coroutine():
    pass


def unrelated_task_exception_never_retrieved() -> None:
    async def fails():
        raise ValueError("an unrelated task failed")

    loop = asyncio.new_event_loop()
    task = loop.create_task(fails())
    loop.run_until_complete(asyncio.sleep(0.01))
    loop.close()
    del task
    gc.collect()


def test_checkpoint_operations_that_succeed_leave_the_hooks_as_they_were(trained, reports):
    hook, unawaited = sys.unraisablehook, warnings._warn_unawaited_coroutine
    asyncio_filters = list(logging.getLogger("asyncio").filters)

    restore_params(trained, ABSTRACT, "avg:2")
    write_checkpoints(os.path.join(os.path.dirname(trained), "another"))

    assert sys.unraisablehook is hook
    assert warnings._warn_unawaited_coroutine is unawaited
    assert logging.getLogger("asyncio").filters == asyncio_filters


def test_after_a_failed_restore_unrelated_reports_are_still_shown(workdir, reports, caplog):
    fail_a_restore(workdir)
    assert not [r for r in reports if from_orbax(r)]

    RaisesWhenCollected()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        unrelated_task_exception_never_retrieved()
    with pytest.warns(RuntimeWarning, match="coroutine 'unrelated_coroutine' was never awaited"):
        unrelated_coroutine()
        gc.collect()

    assert [str(r.exc_value) for r in reports] == ["an unrelated finalizer failed"]
    logged = [r for r in caplog.records if r.name == "asyncio"]
    assert [str(r.exc_info[1]) for r in logged] == ["an unrelated task failed"]


def test_after_a_failed_restore_orbax_coroutines_never_awaited_are_not_reported(workdir, reports):
    fail_a_restore(workdir)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        ocp.serialization.async_deserialize(None, None)  # created, never awaited
        gc.collect()
    assert not [w for w in shown if "never awaited" in str(w.message)]
