"""Pure train and eval steps for the translation model.

``train_step(state, batch, rng) -> (state, metrics)``; the loop jit-compiles it with
explicit shardings. Batches are dicts of int32 arrays (see jaxtrans.data):
source/source_segments/source_positions [batch, src_len] and
target_in/target_out/target_segments/target_positions [batch, tgt_len].
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxtrans.models import Transformer
from jaxtrans.training.loss import label_smoothed_cross_entropy
from jaxtrans.training.state import TrainState

Batch = dict[str, jnp.ndarray]


def forward_sums(
    model: Transformer,
    params,
    batch: Batch,
    smoothing: float,
    deterministic: bool,
    rng: jax.Array | None = None,
) -> dict[str, jnp.ndarray]:
    """Teacher-forced logits and the loss sums over the non-pad targets of ``batch``."""
    logits = model.apply(
        {"params": params},
        batch["source"],
        batch["target_in"],
        batch.get("source_segments"),
        batch.get("target_segments"),
        batch.get("source_positions"),
        batch.get("target_positions"),
        deterministic=deterministic,
        rngs=None if rng is None else {"dropout": rng},
    )
    weights = batch["target_out"] != model.config.pad_id
    return label_smoothed_cross_entropy(logits, batch["target_out"], weights, smoothing)


def summarize(sums: dict[str, jnp.ndarray]) -> dict[str, jnp.ndarray]:
    """Per-token means from summed loss terms."""
    tokens = jnp.maximum(sums["tokens"], 1.0)
    return {
        "loss": sums["loss"] / tokens,
        "nll": sums["nll"] / tokens,
        "accuracy": sums["correct"] / tokens,
        "tokens": sums["tokens"],
    }


def make_train_step(
    model: Transformer,
    optimizer: optax.GradientTransformation,
    schedule: optax.Schedule,
    label_smoothing: float,
    grad_accum_steps: int = 1,
) -> Callable[[TrainState, Batch, jax.Array], tuple[TrainState, dict]]:
    """Build ``train_step``; with ``grad_accum_steps`` > 1 the batch is processed in that
    many micro-batches whose gradient sums are added before one update (same result as
    the whole batch, less activation memory)."""

    def loss_and_sums(params, batch, rng):
        sums = forward_sums(model, params, batch, label_smoothing, False, rng)
        return sums["loss"], sums

    grad_fn = jax.grad(loss_and_sums, has_aux=True)

    def accumulate(params, batch, rng):
        if grad_accum_steps == 1:
            return grad_fn(params, batch, rng)
        micro = jax.tree.map(
            lambda x: x.reshape(grad_accum_steps, x.shape[0] // grad_accum_steps, *x.shape[1:]),
            batch,
        )

        def body(carry, inputs):
            index, micro_batch = inputs
            grads, sums = grad_fn(params, micro_batch, jax.random.fold_in(rng, index))
            return jax.tree.map(jnp.add, carry, (grads, sums)), None

        shapes = jax.eval_shape(grad_fn, params, jax.tree.map(lambda x: x[0], micro), rng)
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        (grads, sums), _ = jax.lax.scan(body, zeros, (jnp.arange(grad_accum_steps), micro))
        return grads, sums

    def train_step(state: TrainState, batch: Batch, rng: jax.Array) -> tuple[TrainState, dict]:
        grads, sums = accumulate(state.params, batch, rng)
        # The loss is a mean over the batch's real target tokens.
        grads = jax.tree.map(lambda g: g / jnp.maximum(sums["tokens"], 1.0), grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = summarize(sums)
        metrics["grad_norm"] = optax.tree.norm(grads)
        metrics["lr"] = schedule(state.step)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, metrics

    return train_step


def make_eval_step(model: Transformer, label_smoothing: float):
    """``eval_step(params, batch) -> sums`` (summed, so batches and devices add up)."""

    def eval_step(params, batch: Batch) -> dict[str, jnp.ndarray]:
        return forward_sums(model, params, batch, label_smoothing, deterministic=True)

    return eval_step
