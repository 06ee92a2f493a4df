"""The training state: everything a step reads and writes, as one pytree."""

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtrans.training import sharding


@flax.struct.dataclass
class TrainState:
    """step (int32 scalar: updates applied so far), params, optimizer state, and the
    base dropout key (raw uint32 key data so that checkpoints hold a plain array)."""

    step: jnp.ndarray
    params: Any
    opt_state: Any
    rng: jnp.ndarray

    def dropout_key(self) -> jax.Array:
        """A fresh key per step, derived from the base key: resuming repeats it exactly."""
        return jax.random.fold_in(jax.random.wrap_key_data(self.rng), self.step)


def init_train_state(
    init_params, optimizer, mesh, rng: jax.Array, rules=sharding.LOGICAL_RULES
) -> tuple[TrainState, Any, TrainState]:
    """Initialise the state directly in its sharded layout.

    ``init_params(rng)`` returns boxed (logically partitioned) parameters. Returns
    (state, shardings, abstract): the state on the mesh, the NamedSharding of every leaf
    (a TrainState of shardings, from the parameters' logical axis names and ``rules``, a
    rule table as sharding.logical_rules returns) and the state's shapes and dtypes.
    """
    init = train_state_init(init_params, optimizer)
    shardings, abstract = abstract_train_state(init, mesh, rng, rules)
    initialize = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=shardings)
    state = sharding.with_axis_rules(initialize, mesh, rules)(rng)
    return state, shardings, abstract


def train_state_init(init_params, optimizer) -> Callable[[jax.Array], TrainState]:
    """``init(rng) -> TrainState`` with boxed parameters, step 0 and a dropout key."""

    def init(rng: jax.Array) -> TrainState:
        init_rng, dropout_rng = jax.random.split(rng)
        params = init_params(init_rng)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=optimizer.init(params),
            rng=jax.random.key_data(dropout_rng),
        )

    return init


def abstract_train_state(
    init: Callable[[jax.Array], TrainState], mesh, rng: jax.Array, rules=sharding.LOGICAL_RULES
) -> tuple[TrainState, TrainState]:
    """(shardings, abstract) of the state ``init(rng)`` makes, with nothing allocated:
    the NamedSharding of every leaf and its shape and dtype (ahead-of-time compilation
    needs only these)."""
    with sharding.axis_rules(mesh, rules):
        boxed = jax.eval_shape(init, rng)
    shardings = sharding.logical_shardings(boxed, mesh, rules)
    abstract = nn.unbox(boxed)
    sharding.check_divisible(abstract, shardings)
    return shardings, abstract
