"""Pure train and eval steps, generic over the task (see task.py).

``train_step(state, batch, rng) -> (state, metrics)``; the loop jit-compiles it with
explicit shardings and donates the old state.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxtrans.training.state import TrainState
from jaxtrans.training.task import Batch, TrainingTask


def make_train_step(
    task: TrainingTask,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum_steps: int = 1,
) -> Callable[[TrainState, Batch, jax.Array], tuple[TrainState, dict]]:
    """Build ``train_step``.

    With ``grad_accum_steps`` > 1 the batch is processed in that many micro-batches whose
    gradients are added before one update: the same update as the whole batch (each
    micro-batch's loss is divided by the whole batch's counts), less activation memory.
    """

    def share_of_loss(params, batch, rng, counts):
        sums = task.loss_sums(params, batch, rng, deterministic=False)
        return task.objective(sums, counts), sums

    grad_fn = jax.grad(share_of_loss, has_aux=True)

    def gradients(params, batch, rng):
        counts = task.counts(batch)
        if grad_accum_steps == 1:
            return grad_fn(params, batch, rng, counts)
        micro = jax.tree.map(
            lambda x: x.reshape(grad_accum_steps, x.shape[0] // grad_accum_steps, *x.shape[1:]),
            batch,
        )

        def body(carry, inputs):
            index, micro_batch = inputs
            result = grad_fn(params, micro_batch, jax.random.fold_in(rng, index), counts)
            return jax.tree.map(jnp.add, carry, result), None

        first = jax.tree.map(lambda x: x[0], micro)
        shapes = jax.eval_shape(grad_fn, params, first, rng, counts)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        result, _ = jax.lax.scan(body, zeros, (jnp.arange(grad_accum_steps), micro))
        return result

    def train_step(state: TrainState, batch: Batch, rng: jax.Array) -> tuple[TrainState, dict]:
        grads, sums = gradients(state.params, batch, rng)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = task.summarize(sums)
        metrics["grad_norm"] = optax.tree.norm(grads)
        metrics["lr"] = schedule(state.step)
        # A NaN or Inf in the loss, a gradient or an updated parameter leaves the state as
        # it was: the update is skipped, and the metrics say so and name the first bad
        # tensor (index into gradients then updated parameters; -1: only the loss), for
        # the loop to stop or count.
        leaf_finite = jnp.stack(
            [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(grads) + jax.tree.leaves(params)]
        )
        finite = jnp.all(leaf_finite) & jnp.isfinite(metrics["loss"])
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        metrics["nonfinite"] = jnp.logical_not(finite)
        metrics["first_nonfinite_leaf"] = jnp.where(
            jnp.all(leaf_finite), -1, jnp.argmin(leaf_finite)
        )
        new_state = state.replace(
            step=state.step + 1,
            params=keep(params, state.params),
            opt_state=keep(opt_state, state.opt_state),
        )
        return new_state, metrics

    return train_step


def make_eval_step(task: TrainingTask):
    """``eval_step(params, batch) -> sums`` (summed, so that batches add up)."""

    def eval_step(params, batch: Batch) -> dict[str, jnp.ndarray]:
        return task.loss_sums(params, batch, None, deterministic=True)

    return eval_step
