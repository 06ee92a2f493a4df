"""Scaled dot-product attention and the multi-head attention module.

Shapes: queries [batch, q_len, heads, head_dim], keys/values [batch, kv_len, heads,
head_dim], boolean masks broadcastable to [batch, heads, q_len, kv_len] (True = attend).
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn.config import BlockConfig
from jaxtrans.nn.positions import apply_rope


def attention_weights(q: jnp.ndarray, k: jnp.ndarray, mask: jnp.ndarray | None) -> jnp.ndarray:
    """softmax(q k^T / sqrt(d_k)) over keys, in float32 -> [batch, heads, q_len, kv_len].

    Masked keys get exactly zero weight; a query with no key to attend to (a padding
    row of a packed batch) gets all-zero weights rather than NaN.
    """
    q = q * jnp.asarray(q.shape[-1] ** -0.5, q.dtype)
    scores = jnp.einsum("bqnh,bknh->bnqk", q, k).astype(jnp.float32)
    if mask is None:
        return jax.nn.softmax(scores, axis=-1)
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    return jnp.where(mask, jax.nn.softmax(scores, axis=-1), 0.0)


def fused_attention(
    q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: jnp.ndarray | None
) -> jnp.ndarray:
    """jax.nn.dot_product_attention (cuDNN on GPU) -> [batch, q_len, heads, head_dim].

    The library averages all values for a fully masked query; we zero those rows so
    both paths agree.
    """
    if mask is None:
        return jax.nn.dot_product_attention(q, k, v)
    shape = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    mask = jnp.broadcast_to(mask, shape)
    out = jax.nn.dot_product_attention(q, k, v, mask=mask)
    has_key = jnp.any(mask, axis=-1).transpose(0, 2, 1)[..., None]  # [b, q, heads, 1]
    return jnp.where(has_key, out, 0).astype(out.dtype)


class MultiHeadAttention(nn.Module):
    """Project to heads, attend, merge heads, project out.

    The same module serves self-attention (``inputs_kv is inputs_q``) and
    cross-attention (queries from the decoder, keys/values from the encoder).
    With ``rope=True`` queries and keys are rotated by their position ids.
    """

    config: BlockConfig
    rope: bool = False

    @nn.compact
    def __call__(
        self,
        inputs_q: jnp.ndarray,
        inputs_kv: jnp.ndarray,
        mask: jnp.ndarray | None = None,
        q_positions: jnp.ndarray | None = None,
        kv_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """inputs_q [batch, q_len, d_model], inputs_kv [batch, kv_len, d_model].

        Returns [batch, q_len, d_model].
        """
        cfg = self.config
        projection = functools.partial(
            nn.DenseGeneral,
            features=(cfg.num_heads, cfg.head_dim),
            dtype=cfg.compute_dtype,
            param_dtype=cfg.storage_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.xavier_uniform(),  # fans of the flattened [d_model, d_model]
                ("embed", "heads", "kv"),
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("heads", "kv")),
        )
        q = projection(name="query")(inputs_q)
        k = projection(name="key")(inputs_kv)
        v = projection(name="value")(inputs_kv)

        if self.rope:
            if q_positions is None or kv_positions is None:
                raise ValueError("RoPE attention needs q_positions and kv_positions")
            q = apply_rope(q, q_positions, cfg.rope_base)
            k = apply_rope(k, kv_positions, cfg.rope_base)

        if cfg.attention_impl == "fused":
            x = fused_attention(q, k, v, mask)
        else:
            weights = attention_weights(q, k, mask)
            self.sow("intermediates", "attention_weights", weights)
            weights = nn.Dropout(cfg.attention_dropout_rate)(weights, deterministic)
            x = jnp.einsum("bnqk,bknh->bqnh", weights.astype(v.dtype), v)

        return nn.DenseGeneral(
            features=cfg.d_model,
            axis=(-2, -1),
            dtype=cfg.compute_dtype,
            param_dtype=cfg.storage_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.xavier_uniform(),
                ("heads", "kv", "embed"),
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out",
        )(x)
