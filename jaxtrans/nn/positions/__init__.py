"""Position information: fixed sinusoids, learned absolute embeddings, and RoPE.

Every function takes explicit position ids ``[batch, length]`` rather than assuming
0..length-1, so packed rows (positions restart in each segment) and cached decoding
(one token at position t) get the right values.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn.block_config import BlockConfig


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


def sinusoidal_embedding(
    positions: jnp.ndarray, d_model: int, layout: str = "interleaved"
) -> jnp.ndarray:
    """The paper's table, evaluated at the given positions.

    With angle_i = pos / 10000^(2i/d) for i in [0, d/2):
    "interleaved" (the paper's formula): PE[pos, 2i] = sin(angle_i), PE[pos, 2i+1] = cos(angle_i);
    "halves" (Marian, fairseq): PE[pos, i] = sin(angle_i), PE[pos, d/2 + i] = cos(angle_i).
    positions [batch, length] -> [batch, length, d_model] float32.
    """
    i = jnp.arange(d_model // 2, dtype=jnp.float32)
    inv_freq = jnp.power(10000.0, -2.0 * i / d_model)
    angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [b, l, d/2]
    if layout == "halves":
        return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
    if layout != "interleaved":
        raise ValueError(f"layout={layout!r} is not one of ('interleaved', 'halves')")
    pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # interleave sin, cos
    return pe.reshape(*positions.shape, d_model)


class LearnedPositions(nn.Module):
    """Learned absolute position embeddings (BERT): a [max_len, d_model] table."""

    config: BlockConfig

    @nn.compact
    def __call__(self, positions: jnp.ndarray) -> jnp.ndarray:
        """positions [batch, length] -> [batch, length, d_model]."""
        cfg = self.config
        table = self.param(
            "embedding",
            nn.with_logical_partitioning(nn.initializers.normal(0.02), ("length", "embed")),
            (cfg.max_len, cfg.d_model),
            cfg.storage_dtype,
        )
        return jnp.take(table, positions, axis=0).astype(cfg.compute_dtype)


def rope_frequencies(head_dim: int, base: float = 10000.0) -> jnp.ndarray:
    """theta_i = base^(-2i / head_dim) for i in [0, head_dim / 2)."""
    i = jnp.arange(head_dim // 2, dtype=jnp.float32)
    return jnp.power(base, -2.0 * i / head_dim)


def rope_angles(positions: jnp.ndarray, head_dim: int, base: float = 10000.0) -> jnp.ndarray:
    """The rotation angles positions * theta_i: [batch, length] -> [batch, length, head_dim / 2]
    float32; dimension i and i + head_dim/2 of a query or key turn by angle i."""
    return positions.astype(jnp.float32)[..., None] * rope_frequencies(head_dim, base)


def rotate_half(x: jnp.ndarray) -> jnp.ndarray:
    """[x1, x2] -> [-x2, x1] on the last axis (halves, not interleaved pairs)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, base: float = 10000.0) -> jnp.ndarray:
    """Rotate each head's query or key vector by its position.

    x [batch, length, heads, head_dim], positions [batch, length]. Dimension i is paired
    with i + head_dim/2 and the pair is rotated by positions * theta_i, so the dot product
    of a rotated query at m and key at n depends on n - m only. Computed in float32.
    """
    angles = rope_angles(positions, x.shape[-1], base)
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [b, l, 1, d]
    xf = x.astype(jnp.float32)
    out = xf * jnp.cos(angles) + rotate_half(xf) * jnp.sin(angles)
    return out.astype(x.dtype)
