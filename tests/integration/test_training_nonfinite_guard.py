"""The non-finite guard costs the step a few scalar tests, and still names step and tensor."""

import os
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from tiny_configs import tiny_translation_config

from jaxtrans.errors import TrainingStopped
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks import train_and_evaluate
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import loop, sharding
from jaxtrans.training import optimizer as optimizer_module
from jaxtrans.training.guards import STEPS_IN_FLIGHT
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_gradients, make_nonfinite_diagnosis, make_train_step

# [ROWS, LENGTH] is no parameter's shape.
ROWS, LENGTH, VOCAB = 3, 5, 64


def tiny_task_and_state():
    task = TranslationTask(
        ml_collections.ConfigDict(
            {"train": {"label_smoothing": 0.1},
             "data": {"max_source_length": LENGTH, "max_target_length": LENGTH}}
        ),
        TransformerConfig(vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64,
                          num_encoder_layers=1, num_decoder_layers=1),
    )  # fmt: skip
    config = tiny_translation_config(1).optimizer
    optimizer, schedule = make_optimizer(config, 32, 10)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
                              jax.devices()[:1])  # fmt: skip
    state, _, _ = init_train_state(task.init_params, optimizer, mesh, jax.random.key(0))
    ids = jnp.asarray(np.random.default_rng(0).integers(4, VOCAB, (ROWS, LENGTH)), jnp.int32)
    batch = {"source": ids, "target_in": ids, "target_out": ids}
    return task, optimizer, schedule, state, batch


def is_finite_ops(hlo_text: str) -> list[str]:
    """The result types of the HLO's is-finite operations, e.g. ``pred[]``, ``pred[64,32]``."""
    return re.findall(r"= (pred\[[\d,]*\])\S* is-finite\(", hlo_text)


def test_the_compiled_step_tests_no_parameter_for_finiteness():
    task, optimizer, schedule, state, batch = tiny_task_and_state()
    rng = jax.random.key(1)
    hlo = lambda f, *args: jax.jit(f).lower(*args).as_text(dialect="hlo")  # noqa: E731
    step_ops = is_finite_ops(hlo(make_train_step(task, optimizer, schedule), state, batch, rng))
    # The model's own (e.g. the log-softmax's, over [batch, length] activations).
    model_ops = is_finite_ops(hlo(make_gradients(task), state.params, batch, rng))
    # The per-leaf test, as the diagnosis after a failure makes it: what the step avoids.
    diagnosis_ops = is_finite_ops(hlo(make_nonfinite_diagnosis(task, optimizer), state, batch, rng))
    parameter_shapes = {
        f"pred[{','.join(map(str, x.shape))}]" for x in jax.tree.leaves(state.params)
    }
    leaves = len(jax.tree.leaves(state.params))

    assert len(diagnosis_ops) >= len(model_ops) + 2 * leaves > 20  # gradients + params
    assert not [op for op in step_ops if op in parameter_shapes], step_ops
    # Beyond the model's own: the loss, the gradient norm and the update norm.
    assert sorted(step_ops) == sorted([*model_ops, "pred[]", "pred[]", "pred[]"]), step_ops


def test_a_skipped_step_leaves_parameters_and_optimizer_state_bitwise_unchanged():
    task, _, schedule, state, batch = tiny_task_and_state()
    config = tiny_translation_config(1).optimizer
    config.update(schedule="constant", learning_rate=float("inf"))
    optimizer, _ = make_optimizer(config, 32, 10)  # finite gradients, infinite updates
    state = state.replace(opt_state=optimizer.init(state.params))
    step = jax.jit(make_train_step(task, optimizer, schedule))

    new_state, metrics = step(state, batch, jax.random.key(1))

    assert bool(metrics["nonfinite"]) and np.isfinite(float(metrics["grad_norm"]))
    assert int(new_state.step) == int(state.step) + 1
    for new, old in zip(jax.tree.leaves((new_state.params, new_state.opt_state)),
                        jax.tree.leaves((state.params, state.opt_state)), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(new), np.asarray(old))


def test_a_failed_step_followed_by_finite_ones_is_named_by_its_step_and_tensor(
    tmp_path, monkeypatch
):
    """Step 2 alone has an infinite learning rate; steps 3 and 4 would be finite, and run
    before the loop reads step 2's metrics (log_every 4). The error still names step 2 and
    the updated parameter that the per-leaf check of every step used to name."""
    spike = lambda config, d_model, num_steps: (  # noqa: E731
        lambda count: jnp.where(count == 1, jnp.inf, 1e-3)
    )
    monkeypatch.setattr(optimizer_module, "make_schedule", spike)
    config = tiny_translation_config(
        6, **{"train.log_every": 4, "train.checkpoint_every": 100,
              "train.compilation_cache_dir": ""}
    )  # fmt: skip
    with pytest.raises(TrainingStopped) as stopped:
        train_and_evaluate(config, str(tmp_path))

    message = str(stopped.value)
    assert re.match(r"step 2: the updated params\['(decoder|encoder|shared)", message), message
    assert "on_nonfinite=skip" in message
    assert not [s for s in os.listdir(tmp_path / "checkpoints") if s.isdigit()]


def test_with_a_long_log_interval_the_run_stops_steps_in_flight_minus_1_after_a_failure(
    tmp_path, monkeypatch
):
    """Step 2 alone fails; the log would come at step 100. The loop reads each step's flag
    STEPS_IN_FLIGHT - 1 steps later, so it takes the batches of steps 1..2 + STEPS_IN_FLIGHT
    - 1 and one more for the diagnosis (from the state frozen since step 2), and stops
    naming step 2."""
    spike = lambda config, d_model, num_steps: (  # noqa: E731
        lambda count: jnp.where(count == 1, jnp.inf, 1e-3)
    )
    monkeypatch.setattr(optimizer_module, "make_schedule", spike)
    taken = []
    global_batch = loop.global_batch
    monkeypatch.setattr(loop, "global_batch", lambda *a: taken.append(1) or global_batch(*a))
    config = tiny_translation_config(
        100, **{"train.log_every": 100, "train.checkpoint_every": 100,
                "train.compilation_cache_dir": ""}
    )  # fmt: skip
    with pytest.raises(TrainingStopped, match=r"step 2: the updated params\[") as stopped:
        train_and_evaluate(config, str(tmp_path))

    assert len(taken) == 2 + STEPS_IN_FLIGHT - 1 + 1, str(stopped.value)
    assert not [s for s in os.listdir(tmp_path / "checkpoints") if s.isdigit()]


def test_a_checkpoint_due_before_a_failure_is_found_is_not_saved(tmp_path, monkeypatch):
    """Step 3 fails; at step 4 the loop has read only step 2's flag (finite), and a
    checkpoint is due: the log before it reads every step in flight and stops the run, so
    checkpoint 2 is the last one and nothing of the frozen state is saved."""
    spike = lambda config, d_model, num_steps: (  # noqa: E731
        lambda count: jnp.where(count == 2, jnp.inf, 1e-3)
    )
    monkeypatch.setattr(optimizer_module, "make_schedule", spike)
    config = tiny_translation_config(
        100, **{"train.log_every": 100, "train.checkpoint_every": 2,
                "train.compilation_cache_dir": ""}
    )  # fmt: skip
    with pytest.raises(TrainingStopped, match=r"step 3: the updated params\["):
        train_and_evaluate(config, str(tmp_path))

    assert sorted(s for s in os.listdir(tmp_path / "checkpoints") if s.isdigit()) == ["2"]
