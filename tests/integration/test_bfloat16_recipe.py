"""The accelerator recipes' bfloat16: the train step computes its matmuls in bfloat16 while
the parameters, the optimizer state, the gradients' norm and the loss stay float32."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from tiny_configs import tiny_translation_config

from jaxtrans.tasks import load_task
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import train_state_init
from jaxtrans.training.step import make_train_step


def test_a_bfloat16_step_keeps_float32_parameters_optimizer_state_and_loss(tmp_path):
    config = tiny_translation_config(2, **{"model.dtype": "bfloat16"})
    task = load_task(config, str(tmp_path))
    optimizer, schedule = make_optimizer(config.optimizer, task.model_config.d_model, 2)
    init = train_state_init(task.init_params, optimizer, "rbg")
    state = jax.eval_shape(lambda rng: nn.unbox(init(rng)), jax.random.key(0))
    batch = task.batch_shapes(8)
    step = make_train_step(task, optimizer, schedule)

    new_state, metrics = jax.eval_shape(step, state, batch, jax.random.key(1))

    floats = [
        leaf
        for tree in (state.params, state.opt_state, new_state.params, new_state.opt_state)
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(leaf.dtype, jnp.floating)
    ]
    assert floats and all(leaf.dtype == jnp.float32 for leaf in floats)
    # Adam's two moments a parameter, float32 (optax makes them like the parameters).
    assert len(jax.tree.leaves(new_state.opt_state)) > 2 * len(jax.tree.leaves(state.params))
    for name in ("loss", "nll", "grad_norm"):
        assert metrics[name].dtype == jnp.float32, name
    # ...and the matmuls run in bfloat16: the lowered step multiplies bfloat16 operands.
    text = jax.jit(step).lower(state, batch, jax.random.key(1)).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert dots and sum("bf16" in line for line in dots) > len(dots) // 2
