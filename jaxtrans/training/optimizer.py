"""Learning-rate schedules and the optimizer chain (clip -> Adam/AdamW)."""

import jax.numpy as jnp
import optax

from jaxtrans.training.run_sections import OptimizerConfig


def noam_schedule(factor: float, d_model: int, warmup: int) -> optax.Schedule:
    """lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    ``step`` counts optimizer updates from 1, as in the paper; the optax count starts
    at 0, so update n uses step n + 1.
    """

    def schedule(count):
        step = jnp.asarray(count, jnp.float32) + 1.0
        return factor * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup**-1.5)

    return schedule


def linear_warmup_decay(peak: float, warmup: int, total: int) -> optax.Schedule:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then linear decay to 0 at ``total``."""
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, max(warmup, 1)),
            optax.linear_schedule(peak, 0.0, max(total - warmup, 1)),
        ],
        [warmup],
    )


def make_schedule(config: OptimizerConfig, d_model: int, num_steps: int) -> optax.Schedule:
    """The schedule named by ``config.schedule``: noam | linear | constant."""
    if config.schedule == "noam":
        return noam_schedule(config.noam_factor, d_model, config.warmup_steps)
    if config.schedule == "linear":
        return linear_warmup_decay(config.learning_rate, config.warmup_steps, num_steps)
    if config.schedule == "constant":
        return optax.constant_schedule(config.learning_rate)
    raise ValueError(f"optimizer.schedule={config.schedule!r} is not noam, linear or constant")


def _decay_mask(params):
    """Weight decay on matrices only: not on biases, LayerNorm scales or other vectors."""
    import jax

    return jax.tree.map(lambda p: p.ndim > 1, params)


def make_optimizer(
    config: OptimizerConfig, d_model: int, num_steps: int
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """Global-norm clipping followed by Adam or AdamW (decoupled weight decay), from the
    optimizer section (an OptimizerConfig, or a section with its fields)."""
    schedule = make_schedule(config, d_model, num_steps)
    if config.name == "adam":
        update = optax.adam(schedule, b1=config.b1, b2=config.b2, eps=config.eps)
    elif config.name == "adamw":
        update = optax.adamw(
            schedule,
            b1=config.b1,
            b2=config.b2,
            eps=config.eps,
            weight_decay=config.weight_decay,
            mask=_decay_mask,
        )
    else:
        raise ValueError(f"optimizer.name={config.name!r} is not adam or adamw")
    chain = [update]
    if config.clip_norm:
        chain.insert(0, optax.clip_by_global_norm(config.clip_norm))
    return optax.chain(*chain), schedule
