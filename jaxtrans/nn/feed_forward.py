"""Position-wise feed-forward network: Dense(d_ff) -> activation -> dropout -> Dense(d_model)."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn.block_config import BlockConfig
from jaxtrans.nn.dropout import Dropout
from jaxtrans.nn.layers import dense

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "silu": jax.nn.silu,
}


class FeedForward(nn.Module):
    """[batch, length, d_model] -> [batch, length, d_model] through a d_ff hidden layer."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool = True) -> jnp.ndarray:
        cfg = self.config
        h = dense(cfg, cfg.d_ff, ("embed", "mlp"), name="wi")(x)
        h = ACTIVATIONS[cfg.activation](h)
        h = Dropout(cfg.activation_dropout_rate)(h, deterministic)
        return dense(cfg, cfg.d_model, ("mlp", "embed"), name="wo")(h)
