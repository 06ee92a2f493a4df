"""Pure train and eval steps, generic over the task (see task.py).

``train_step(state, batch, rng) -> (state, metrics)``; the loop jit-compiles it with
explicit shardings and donates the old state. After a step that was not finite,
``make_nonfinite_diagnosis``'s function computes it again to name the first bad tensor.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtrans.training.state import TrainState
from jaxtrans.training.task import Batch, TrainingTask


def make_gradients(
    task: TrainingTask, grad_accum_steps: int = 1
) -> Callable[[Any, Batch, jax.Array], tuple[Any, dict]]:
    """``gradients(params, batch, rng) -> (grads, loss sums)``.

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

    return gradients


def make_train_step(
    task: TrainingTask,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum_steps: int = 1,
) -> Callable[[TrainState, Batch, jax.Array], tuple[TrainState, dict]]:
    """Build ``train_step``; ``grad_accum_steps``: see make_gradients."""
    gradients = make_gradients(task, grad_accum_steps)

    def train_step(state: TrainState, batch: Batch, rng: jax.Array) -> tuple[TrainState, dict]:
        grads, sums = gradients(state.params, batch, rng)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = task.summarize(sums)
        metrics["grad_norm"] = optax.tree.norm(grads)  # the same norm clipping computes
        metrics["lr"] = schedule(state.step)
        # A NaN or Inf in the loss, a gradient or an update leaves the state as it was: the
        # update is skipped and metrics["nonfinite"] says so, for the loop to stop or count.
        # One scalar decides, from norms: a norm is finite only if every element is (a
        # norm that overflows float32 counts as a failure too), so the step makes no pass
        # over the parameters to test them leaf by leaf; the selection below fuses into the
        # update. Which tensor was bad is found only after a failure
        # (make_nonfinite_diagnosis).
        finite = (
            jnp.isfinite(metrics["loss"])
            & jnp.isfinite(metrics["grad_norm"])
            & jnp.isfinite(optax.tree.norm(updates))
        )
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
        metrics["nonfinite"] = jnp.logical_not(finite)
        new_state = state.replace(
            step=state.step + 1,
            params=keep(params, state.params),
            opt_state=keep(opt_state, state.opt_state),
        )
        return new_state, metrics

    return train_step


def make_nonfinite_diagnosis(
    task: TrainingTask, optimizer: optax.GradientTransformation, grad_accum_steps: int = 1
) -> Callable[[TrainState, Batch, jax.Array], dict]:
    """``diagnosis(state, batch, rng) -> {first_nonfinite_leaf, loss, grad_norm}``: the step
    from ``state`` on ``batch`` computed again, leaf by leaf, to name what was not finite.

    first_nonfinite_leaf: index into the gradient leaves then the updated parameter leaves
    (in ``jax.tree.leaves`` order), -1 if every one is finite. Only run after a step failed:
    it makes the passes over every tensor that the step itself avoids.
    """
    gradients = make_gradients(task, grad_accum_steps)

    def diagnosis(state: TrainState, batch: Batch, rng: jax.Array) -> dict:
        grads, sums = gradients(state.params, batch, rng)
        updates, _ = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        leaf_finite = jnp.stack(
            [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(grads) + jax.tree.leaves(params)]
        )
        return {
            "first_nonfinite_leaf": jnp.where(jnp.all(leaf_finite), -1, jnp.argmin(leaf_finite)),
            "loss": task.summarize(sums)["loss"],
            "grad_norm": optax.tree.norm(grads),
        }

    return diagnosis


def make_eval_step(task: TrainingTask):
    """``eval_step(params, batch) -> sums`` (summed, so that batches add up)."""

    def eval_step(params, batch: Batch) -> dict[str, jnp.ndarray]:
        return task.loss_sums(params, batch, None, deterministic=True)

    return eval_step
