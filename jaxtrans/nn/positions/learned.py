"""position="learned": a learned table of absolute positions (BERT), added to the token
embeddings; it ends at max_len, the longest sequence such a model places."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxtrans.nn.positions.position_encoding import PositionEncoding, Rotary

if TYPE_CHECKING:
    from jaxtrans.nn.block_config import BlockConfig


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


class LearnedEncoding(PositionEncoding):
    """A [max_len, d_model] table (LearnedPositions, parameter "embedding") whose row at
    each position is added to the token embeddings."""

    name = "learned"
    rotates = False
    biases_attention = False

    def check(self) -> None:
        pass  # max_len >= 1 is BlockConfig's own check

    def make_table(self) -> nn.Module:
        return LearnedPositions(self.config)

    def embed(self, positions: jnp.ndarray, table: nn.Module | None) -> jnp.ndarray:
        return table(positions)

    def rotate(self, x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
        return x

    def attention_bias(self, q_positions: jnp.ndarray, kv_positions: jnp.ndarray) -> None:
        return None

    def max_length(self) -> int:
        return self.config.max_len

    def encodings(self, params: Any, rows: int) -> np.ndarray:
        table = np.asarray(params["embedding"], np.float32)
        if rows > len(table):
            raise ValueError(f"{rows} rows asked of a learned table of {len(table)}")
        return table[:rows]

    def rotary(self) -> Rotary | None:
        return None
