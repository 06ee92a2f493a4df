"""position="sinusoidal": the Transformer paper's fixed table, added to the token
embeddings; no parameters, no length limit."""

from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxtrans.nn.positions.position_encoding import PositionEncoding, Rotary


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


class SinusoidalEncoding(PositionEncoding):
    """Sines and cosines of the position added to the token embeddings, in the layout of
    the config's sinusoidal_layout (a TransformerConfig's; BERT's config has none: the
    paper's interleaved one)."""

    name = "sinusoidal"
    fields = ("sinusoidal_layout",)
    rotates = False
    biases_attention = False

    @property
    def layout(self) -> str:
        return getattr(self.config, "sinusoidal_layout", "interleaved")

    def check(self) -> None:
        pass  # the table has no setting of its own to refuse

    def make_table(self) -> nn.Module | None:
        return None

    def embed(self, positions: jnp.ndarray, table: nn.Module | None) -> jnp.ndarray:
        return sinusoidal_embedding(positions, self.config.d_model, self.layout)

    def rotate(self, x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
        return x

    def attention_bias(self, q_positions: jnp.ndarray, kv_positions: jnp.ndarray) -> None:
        return None

    def max_length(self) -> None:
        return None

    def encodings(self, params: Any, rows: int) -> np.ndarray:
        positions = np.arange(rows, dtype=np.int32)[None]
        table = sinusoidal_embedding(positions, self.config.d_model, self.layout)[0]
        return np.asarray(table, np.float32)

    def rotary(self) -> Rotary | None:
        return None
