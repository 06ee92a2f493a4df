"""position="rope": rotary position embeddings, queries and keys of self-attention turned
by their positions (base rope_base); nothing is added to the embeddings, no length limit."""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from jaxtrans.nn.positions.position_encoding import PositionEncoding, Rotary


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


class RotaryEncoding(PositionEncoding):
    """RoPE over every dimension of a head, dimension i paired with i + head_dim / 2."""

    name = "rope"
    fields = ("rope_base",)
    rotates = True
    biases_attention = False

    def check(self) -> None:
        if self.config.head_dim % 2:
            raise ValueError(f"RoPE needs an even head dimension, got {self.config.head_dim}")

    def make_table(self) -> nn.Module | None:
        return None

    def embed(self, positions: jnp.ndarray, table: nn.Module | None) -> None:
        return None

    def rotate(self, x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
        return apply_rope(x, positions, self.config.rope_base)

    def attention_bias(self, q_positions: jnp.ndarray, kv_positions: jnp.ndarray) -> None:
        return None

    def max_length(self) -> None:
        return None

    def encodings(self, params: Any, rows: int) -> None:
        return None

    def rotary(self) -> Rotary:
        return Rotary(base=float(self.config.rope_base), interleaved=False)
