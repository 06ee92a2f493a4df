"""Position ids: 0, 1, 2, ... restarting in each packed segment.

Every position encoding takes explicit position ids ``[batch, length]`` rather than
assuming 0..length-1, so packed rows (positions restart in each segment) and cached
decoding (one token at position t) get the right values.
"""

import jax
import jax.numpy as jnp


def default_positions(
    batch: int, length: int, segments: jnp.ndarray | None = None, offset: int = 0
) -> jnp.ndarray:
    """Position ids [batch, length]: 0, 1, 2, ... restarting at each new segment."""
    index = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) + offset, (batch, length))
    if segments is None:
        return index
    # A segment starts where the id differs from its left neighbour; each token's
    # position is its distance to the latest start.
    starts = jnp.concatenate(
        [jnp.ones((batch, 1), bool), segments[:, 1:] != segments[:, :-1]], axis=1
    )
    latest_start = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - latest_start
