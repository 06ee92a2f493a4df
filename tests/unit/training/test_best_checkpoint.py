"""The best checkpoint on disk: kept by the Checkpointer beyond the newest K, and restored by
``--checkpoint best`` (jaxtrans.workdirs.checkpoint_choice) from the step the newest checkpoint's
metadata names. The checkpoints hold a small tree of random parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.errors import UserError
from jaxtrans.workdirs.checkpoint_choice import parse_checkpoint_spec, restore_params
from jaxtrans.workdirs.checkpoint_meta import Best, CheckpointMeta
from jaxtrans.workdirs.checkpoints import Checkpointer


def params_of(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"dense": {"kernel": jnp.asarray(rng.uniform(-1, 1, (8, 4)), jnp.float32)}}


ABSTRACT = jax.eval_shape(lambda: params_of(0))


def save_steps(workdir: str, steps, best_of: dict[int, int | None], keep: int = 2) -> list[int]:
    """Save ``steps`` keeping the newest ``keep``, each naming ``best_of[step]`` as its best
    (in its metadata too, as the training loop does); the steps on disk after."""
    checkpointer = Checkpointer(workdir, keep=keep, async_save=False)
    for step in steps:
        params = params_of(step)
        best = best_of.get(step)
        saved_best = None if best is None else Best("bleu", step=best, value=20.0 + best)
        meta = CheckpointMeta(step, best=saved_best)
        zeros = jax.tree.map(jnp.zeros_like, params)
        checkpointer.save(step, params, zeros, jnp.zeros(2, jnp.uint32), meta, kept=best)
    checkpointer.wait()
    steps = checkpointer.all_steps()
    checkpointer.close()
    return steps


def test_best_is_a_checkpoint_spec():
    assert parse_checkpoint_spec("best") == ("best", 0)
    with pytest.raises(UserError, match="use latest, best, a step number, or avg:K"):
        parse_checkpoint_spec("bestest")


def test_the_best_checkpoint_stays_beside_the_newest_k(tmp_path):
    steps = save_steps(str(tmp_path), range(1, 7), {s: 2 for s in range(2, 7)})
    assert steps == [2, 5, 6]


def test_a_new_best_lets_the_old_one_rotate_out(tmp_path):
    best_of = {1: 1, 2: 2, 3: 2, 4: 2, 5: 5, 6: 5}
    assert save_steps(str(tmp_path), range(1, 7), best_of) == [5, 6]


def test_without_a_best_only_the_newest_k_stay(tmp_path):
    assert save_steps(str(tmp_path), range(1, 5), {}) == [3, 4]


def test_checkpoint_best_restores_the_step_the_newest_checkpoint_names(tmp_path):
    save_steps(str(tmp_path), range(1, 7), {s: 2 for s in range(2, 7)})
    params, step, description = restore_params(str(tmp_path), ABSTRACT, "best")
    assert step == 2 and description == "step 2 (best dev bleu 22)"
    np.testing.assert_array_equal(
        params["dense"]["kernel"], np.asarray(params_of(2)["dense"]["kernel"])
    )


def test_checkpoint_best_of_a_run_without_keep_best_is_a_one_line_user_error(tmp_path):
    save_steps(str(tmp_path), range(1, 3), {})
    with pytest.raises(UserError, match="has no best checkpoint.*without train.keep_best") as error:
        restore_params(str(tmp_path), ABSTRACT, "best")
    assert "\n" not in str(error.value) and "use latest, a step number or avg:K" in str(error.value)
