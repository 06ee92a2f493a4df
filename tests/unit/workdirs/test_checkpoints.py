"""Checkpoints of a workdir: averaging, what a damaged checkpoint raises, and the reports
that a failed orbax operation leaves behind (dropped) next to everyone else's (kept).

The checkpoints here hold a small tree of random parameters, written by the Checkpointer
the training loop uses; the programs' side of the same behaviours is in
tests/reliability/test_reliability_checkpoint_faults.py.
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

from jaxtrans.errors import UserError
from jaxtrans.workdirs import orbax_reports
from jaxtrans.workdirs.checkpoint_choice import restore_params
from jaxtrans.workdirs.checkpoint_meta import CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer, CheckpointUnreadable

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
        checkpointer.save(step, params, opt_state, jnp.zeros(2, jnp.uint32), CheckpointMeta(step))
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


def remove(pattern: str):
    def damage(workdir: str) -> None:
        for path in glob.glob(f"{workdir}/checkpoints/3/{pattern}"):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)

    return damage


def overwrite(pattern: str, content: bytes):
    def damage(workdir: str) -> None:
        for path in glob.glob(f"{workdir}/checkpoints/3/{pattern}"):
            with open(path, "wb") as f:
                f.write(content)

    return damage


# ---------------------------------------------------------------------------- averaging


def test_avg_k_is_the_mean_of_the_restored_checkpoints_parameters(trained):
    averaged, step, description = restore_params(trained, ABSTRACT, "avg:3")

    restored = [restore_params(trained, ABSTRACT, str(s))[0] for s in STEPS]
    mean = jax.tree.map(lambda *xs: np.mean(np.stack(xs).astype(np.float64), axis=0), *restored)
    for got, want in zip(jax.tree.leaves(averaged), jax.tree.leaves(mean), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    assert step == 3 and description == "average of steps [1, 2, 3]"


def test_avg_2_leaves_the_older_checkpoints_out_and_avg_1_is_the_latest_as_saved(trained):
    averaged, _, _ = restore_params(trained, ABSTRACT, "avg:2")
    latest, _, _ = restore_params(trained, ABSTRACT, "avg:1")

    saved = [jax.tree.leaves(random_params(step)) for step in (2, 3)]
    for got, two, three in zip(jax.tree.leaves(averaged), *saved, strict=True):
        np.testing.assert_allclose(got, (np.float64(two) + three) / 2, rtol=0, atol=1e-7)
    for got, three in zip(jax.tree.leaves(latest), saved[1], strict=True):
        np.testing.assert_array_equal(got, three)


# ------------------------------------------------------------------ damaged or another model


def reshaped(params: dict) -> dict:
    return {**params, "decoder": {"kernel": jax.ShapeDtypeStruct((64, 16), jnp.float32)}}


def with_extra(params: dict) -> dict:
    return {**params, "pooler": {"kernel": jax.ShapeDtypeStruct((8, 8), jnp.float32)}}


def without_decoder(params: dict) -> dict:
    return {"encoder": params["encoder"]}


# JSON, but not what orbax writes: a list of keys replaced by a number.
WRONG_FORM = b'{"tree_metadata": {"(\'encoder\', \'bias\')": {"key_metadata": 7}}}'
# What each kind of damage looks like to orbax and TensorStore (the error it raises).
DAMAGE = {
    "data_cut_short": (truncate("params/ocdbt.process_0/d/*"), "OUT_OF_RANGE"),
    "data_files_empty": (truncate("params/ocdbt.process_0/d/*", 0), "OUT_OF_RANGE"),
    "data_files_missing": (remove("params/ocdbt.process_0/d/*"), "FAILED_PRECONDITION"),
    "index_cut_short": (truncate("params/d/*"), "OUT_OF_RANGE"),
    "manifest_missing": (remove("params/manifest.ocdbt"), "NOT_FOUND"),
    "manifest_garbled": (overwrite("params/manifest.ocdbt", b"garbage"), "DATA_LOSS"),
    "metadata_missing": (remove("params/_METADATA"), "FileNotFoundError"),
    "metadata_cut_short": (truncate("params/_METADATA", 40), "JSONDecodeError"),
    "metadata_not_utf8": (overwrite("params/_METADATA", bytes(range(256))), "UnicodeDecodeError"),
    "metadata_without_its_fields": (overwrite("params/_METADATA", b"{}"), "KeyError"),
    "metadata_of_the_wrong_form": (overwrite("params/_METADATA", WRONG_FORM), "TypeError"),
    "params_directory_missing": (remove("params"), "was not found in the checkpoint"),
}
ANOTHER_MODEL = {
    "another_shape": (reshaped, "is not compatible with the stored shape"),
    "a_parameter_the_checkpoint_lacks": (with_extra, "Structure mismatch"),
    "fewer_parameters_than_the_checkpoint": (without_decoder, "structures do not match"),
}


@pytest.mark.parametrize("case", DAMAGE, ids=str)
def test_a_damaged_checkpoint_is_unreadable_and_a_one_line_user_error(workdir, case):
    damage, reason = DAMAGE[case]
    damage(workdir)
    checkpointer = Checkpointer(workdir, read_only=True)
    with pytest.raises(CheckpointUnreadable, match=reason) as raised:
        checkpointer.restore_params(3, ABSTRACT)
    checkpointer.close()
    assert raised.value.step == 3

    with pytest.raises(UserError) as error:
        restore_params(workdir, ABSTRACT, "latest")
    assert "checkpoint 3 cannot be restored, it is damaged or from another model" in str(
        error.value
    )
    assert "choose another with --checkpoint (steps: 1, 2)" in str(error.value)


@pytest.mark.parametrize("case", ANOTHER_MODEL, ids=str)
def test_a_checkpoint_of_another_model_is_unreadable(trained, case):
    abstract, reason = ANOTHER_MODEL[case]
    with pytest.raises(UserError, match=f"checkpoint 3 cannot be restored.*{reason}"):
        restore_params(trained, abstract(ABSTRACT), "latest")


def test_a_bug_while_restoring_is_raised_as_it_is_not_blamed_on_the_checkpoint(
    trained, monkeypatch
):
    def broken_restore(self, step, args=None):
        raise TypeError("restore() got an unexpected keyword argument 'sharding'")

    monkeypatch.setattr(ocp.CheckpointManager, "restore", broken_restore)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        restore_params(trained, ABSTRACT, "latest")


def test_an_abstract_tree_orbax_cannot_use_is_a_bug_not_a_damaged_checkpoint(trained):
    not_arrays = {**ABSTRACT, "decoder": {"kernel": "(64, 32) float32"}}
    with pytest.raises(ValueError, match="Unsupported type") as raised:
        restore_params(trained, not_arrays, "latest")
    assert not isinstance(raised.value, UserError)


# ------------------------------------------------------------- each process's data position


def save_with_data(workdir: str, meta: CheckpointMeta) -> Checkpointer:
    checkpointer = Checkpointer(workdir)
    params = random_params(0)
    checkpointer.save(
        1, params, jax.tree.map(jnp.zeros_like, params), jnp.zeros(2, jnp.uint32), meta
    )
    checkpointer.wait()
    return checkpointer


def restored_meta(checkpointer: Checkpointer) -> CheckpointMeta:
    params = random_params(0)
    abstract = jax.eval_shape(lambda: params)
    return checkpointer.restore(
        1, abstract, abstract, jax.eval_shape(lambda: jnp.zeros(2, jnp.uint32))
    )[3]


def test_the_data_position_is_a_file_of_this_process_and_restores_as_a_list(tmp_path):
    checkpointer = save_with_data(str(tmp_path), CheckpointMeta(1, data={"position": 7}))
    step_dir = tmp_path / "checkpoints" / "1"
    assert (step_dir / "data" / "process_0-of-1.json").read_text() == '{"position": 7}'
    assert "data" not in (step_dir / "meta" / "metadata").read_text()
    assert restored_meta(checkpointer) == CheckpointMeta(1, data=[{"position": 7}])
    checkpointer.close()


def test_a_checkpoint_of_the_older_layout_gives_its_one_data_position_as_a_list(tmp_path):
    """Before per-process files, meta held process 0's position."""
    checkpointer = save_with_data(str(tmp_path), CheckpointMeta(1, data={"position": 7}))
    step_dir = tmp_path / "checkpoints" / "1"
    shutil.rmtree(step_dir / "data")
    (step_dir / "meta" / "metadata").write_text('{"step": 1, "data": {"position": 7}}')
    assert restored_meta(checkpointer) == CheckpointMeta(1, data=[{"position": 7}])
    checkpointer.close()


@pytest.mark.parametrize("damage", ["missing", "garbled", "another_count"])
def test_a_missing_or_garbled_data_position_is_a_damaged_checkpoint(tmp_path, damage):
    checkpointer = save_with_data(str(tmp_path), CheckpointMeta(1, data={"position": 7}))
    path = tmp_path / "checkpoints" / "1" / "data" / "process_0-of-1.json"
    if damage == "missing":
        path.unlink()
    elif damage == "garbled":
        path.write_text('{"posi')
    else:  # a file of a 2-process run beside it: process 1's is missing
        path.rename(path.with_name("process_0-of-2.json"))
    with pytest.raises(CheckpointUnreadable):
        restored_meta(checkpointer)
    checkpointer.close()


# ----------------------------------------------------- reports of what a failure abandons


@pytest.fixture
def reports(monkeypatch):
    """Unraisable reports as the process would print them: a recording hook installed
    before any checkpoint operation, in a process where none has run (a fresh
    AbandonedWork); everything is put back afterwards."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(
        warnings, "_warn_unawaited_coroutine", warnings._warn_unawaited_coroutine, raising=False
    )
    fresh = orbax_reports.AbandonedWork()
    monkeypatch.setattr(orbax_reports, "abandoned_work", fresh)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_after_a_failed_restore_orbax_coroutines_never_awaited_are_not_reported(workdir, reports):
    fail_a_restore(workdir)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        ocp.serialization.async_deserialize(None, None)  # created, never awaited
        gc.collect()
    assert not [w for w in shown if "never awaited" in str(w.message)]
