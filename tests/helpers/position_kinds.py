"""A position kind for tests only: a bias on the attention scores, the one way of entering
the model none of the shipped kinds takes. Tests register it for their own duration
(``monkeypatch.setitem(ENCODINGS, DistancePenalty.name, DistancePenalty)``)."""

from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxtrans.nn.positions import PositionEncoding


class DistancePenalty(PositionEncoding):
    """Head h's score of a key d positions from its query lowered by d * 2^-(h+1);
    nothing added to the embeddings, nothing turned, no length limit."""

    name = "distance_penalty"
    rotates = False
    biases_attention = True

    def slopes(self) -> np.ndarray:
        return 2.0 ** -np.arange(1, self.config.num_heads + 1)

    def check(self) -> None:
        pass

    def make_table(self) -> None:
        return None

    def embed(self, positions: jnp.ndarray, table: Any) -> None:
        return None

    def rotate(self, x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
        return x

    def attention_bias(self, q_positions: jnp.ndarray, kv_positions: jnp.ndarray) -> jnp.ndarray:
        distance = jnp.abs(q_positions[:, :, None] - kv_positions[:, None, :])  # [b, q, k]
        slopes = jnp.asarray(self.slopes(), jnp.float32)[None, :, None, None]
        return -slopes * distance[:, None].astype(jnp.float32)

    def max_length(self) -> None:
        return None

    def encodings(self, params: Any, rows: int) -> None:
        return None

    def rotary(self) -> None:
        return None

    @staticmethod
    def reference(positions: np.ndarray, num_heads: int = 2) -> np.ndarray:
        """The bias in float64 [batch, heads, length, length] for self-attention."""
        slopes = 2.0 ** -np.arange(1, num_heads + 1)
        distance = np.abs(positions[:, :, None] - positions[:, None, :]).astype(np.float64)
        return -slopes[None, :, None, None] * distance[:, None]
