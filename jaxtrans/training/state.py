"""The training state: everything a step reads and writes, as one pytree."""

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtrans.training import sharding
from jaxtrans.training.dropout_rng import dropout_key_data, wrap_dropout_key


@flax.struct.dataclass
class TrainState:
    """step (int32 scalar: updates applied so far), params, optimizer state, and the
    base dropout key (raw uint32 key data so that checkpoints hold a plain array: [2] for
    threefry, [4] for rbg and unsafe_rbg) with the name of its generator (static: a step
    compiles for one generator; checkpoints record it in their metadata)."""

    step: jnp.ndarray
    params: Any
    opt_state: Any
    rng: jnp.ndarray
    rng_impl: str = flax.struct.field(pytree_node=False, default="threefry")

    def dropout_key(self) -> jax.Array:
        """A fresh key per step, derived from the base key: resuming repeats it exactly."""
        return jax.random.fold_in(wrap_dropout_key(self.rng, self.rng_impl), self.step)


def init_train_state(
    init_params,
    optimizer,
    mesh,
    rng: jax.Array,
    rules=sharding.LOGICAL_RULES,
    rng_impl: str = "threefry",
) -> tuple[TrainState, Any, TrainState]:
    """Initialise the state directly in its sharded layout.

    ``init_params(rng)`` returns boxed (logically partitioned) parameters. Returns
    (state, shardings, abstract): the state on the mesh, the NamedSharding of every leaf
    (a TrainState of shardings, from the parameters' logical axis names and ``rules``, a
    rule table as sharding.logical_rules returns) and the state's shapes and dtypes.
    ``rng_impl``: the dropout generator (jaxtrans.training.dropout_rng).
    """
    init = train_state_init(init_params, optimizer, rng_impl)
    shardings, abstract = abstract_train_state(init, mesh, rng, rules)
    initialize = jax.jit(lambda r: nn.unbox(init(r)), out_shardings=shardings)
    state = sharding.with_axis_rules(initialize, mesh, rules)(rng)
    return state, shardings, abstract


def train_state_init(
    init_params, optimizer, rng_impl: str = "threefry"
) -> Callable[[jax.Array], TrainState]:
    """``init(rng) -> TrainState`` with boxed parameters, step 0 and a dropout key of
    generator ``rng_impl``; ``rng`` is a threefry key, and the parameters are the same
    whatever the generator."""

    def init(rng: jax.Array) -> TrainState:
        init_rng, dropout_rng = jax.random.split(rng)
        params = init_params(init_rng)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=optimizer.init(params),
            rng=dropout_key_data(dropout_rng, rng_impl),
            rng_impl=rng_impl,
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
