"""Encoder and decoder layers and their stacks, Post-LN or Pre-LN.

Post-LN (the paper, original BERT):  x = LayerNorm(x + Dropout(sublayer(x)))
Pre-LN:                              x = x + Dropout(sublayer(LayerNorm(x))),
                                     with one final LayerNorm on top of the stack.

The blocks know nothing of vocabularies or sequence-to-sequence training, so the
same encoder stack serves the translation model and BERT.
"""

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp

from jaxtrans.nn.attention import MultiHeadAttention
from jaxtrans.nn.config import BlockConfig
from jaxtrans.nn.dropout import Dropout
from jaxtrans.nn.feed_forward import FeedForward
from jaxtrans.nn.layers import layer_norm


def residual(
    config: BlockConfig,
    x: jnp.ndarray,
    sublayer: Callable[[jnp.ndarray], jnp.ndarray],
    norm: nn.Module,
    deterministic: bool,
) -> jnp.ndarray:
    """One residual sub-layer with the configured LayerNorm placement and dropout."""
    dropout = Dropout(config.dropout_rate)
    if config.norm == "pre":
        return x + dropout(sublayer(norm(x)), deterministic)
    return norm(x + dropout(sublayer(x), deterministic))


class EncoderBlock(nn.Module):
    """Self-attention then feed-forward, each in a residual sub-layer."""

    config: BlockConfig

    @nn.compact
    def __call__(
        self,
        x: jnp.ndarray,
        mask: jnp.ndarray | None,
        positions: jnp.ndarray | None,
        deterministic: bool,
    ) -> jnp.ndarray:
        """x [batch, length, d_model], mask [batch|1, 1, length|1, length] -> x."""
        cfg = self.config
        attention = MultiHeadAttention(cfg, rope=cfg.position == "rope", name="self_attention")
        x = residual(
            cfg,
            x,
            lambda h: attention(h, h, mask, positions, positions, deterministic),
            layer_norm(cfg, "self_attention_norm"),
            deterministic,
        )
        feed_forward = FeedForward(cfg, name="feed_forward")
        return residual(
            cfg,
            x,
            lambda h: feed_forward(h, deterministic),
            layer_norm(cfg, "feed_forward_norm"),
            deterministic,
        )


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward."""

    config: BlockConfig
    # Incremental decoding: self-attention keys/values accumulate in the "cache"
    # collection, cross-attention keys/values of the memory sit in "memory_cache".
    decode: bool = False

    @nn.compact
    def __call__(
        self,
        y: jnp.ndarray,
        memory: jnp.ndarray | None,
        self_mask: jnp.ndarray | None,
        cross_mask: jnp.ndarray | None,
        positions: jnp.ndarray | None,
        deterministic: bool,
    ) -> jnp.ndarray:
        """y [batch, tgt_len, d_model], memory [batch, src_len, d_model] -> y.

        When decoding, ``memory=None`` reuses the cross-attention keys/values cached by
        an earlier call that was given the memory.
        """
        cfg = self.config
        self_attention = MultiHeadAttention(
            cfg,
            rope=cfg.position == "rope",
            cache="causal" if self.decode else None,
            name="self_attention",
        )
        y = residual(
            cfg,
            y,
            lambda h: self_attention(h, h, self_mask, positions, positions, deterministic),
            layer_norm(cfg, "self_attention_norm"),
            deterministic,
        )
        # Rotary angles relate positions within one sequence; source and target
        # positions are not comparable, so cross-attention is not rotated.
        cross_attention = MultiHeadAttention(
            cfg, cache="memory" if self.decode else None, name="cross_attention"
        )
        y = residual(
            cfg,
            y,
            lambda h: cross_attention(h, memory, cross_mask, deterministic=deterministic),
            layer_norm(cfg, "cross_attention_norm"),
            deterministic,
        )
        feed_forward = FeedForward(cfg, name="feed_forward")
        return residual(
            cfg,
            y,
            lambda h: feed_forward(h, deterministic),
            layer_norm(cfg, "feed_forward_norm"),
            deterministic,
        )


def _maybe_remat(
    block: type[nn.Module], config: BlockConfig, deterministic_argnum: int, decode: bool = False
):
    # `self` is argument 0 for nn.remat; `deterministic` must be static. Decoding takes
    # no gradients, so there is nothing to recompute.
    if config.remat and not decode:
        return nn.remat(block, static_argnums=(deterministic_argnum,))
    return block


class Encoder(nn.Module):
    """A stack of ``num_layers`` encoder blocks (plus a final LayerNorm when Pre-LN)."""

    config: BlockConfig
    num_layers: int

    @nn.compact
    def __call__(
        self,
        x: jnp.ndarray,
        mask: jnp.ndarray | None,
        positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """x [batch, length, d_model] (embedded) -> [batch, length, d_model]."""
        cfg = self.config
        block = _maybe_remat(EncoderBlock, cfg, 4)
        for i in range(self.num_layers):
            x = block(cfg, name=f"layer_{i}")(x, mask, positions, deterministic)
        if cfg.norm == "pre":
            x = layer_norm(cfg, "final_norm")(x)
        return x


class Decoder(nn.Module):
    """A stack of ``num_layers`` decoder blocks (plus a final LayerNorm when Pre-LN)."""

    config: BlockConfig
    num_layers: int
    # Incremental decoding with key/value caches (see DecoderBlock).
    decode: bool = False

    @nn.compact
    def __call__(
        self,
        y: jnp.ndarray,
        memory: jnp.ndarray | None,
        self_mask: jnp.ndarray | None,
        cross_mask: jnp.ndarray | None,
        positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """y [batch, tgt_len, d_model] (embedded) -> [batch, tgt_len, d_model]."""
        cfg = self.config
        block = _maybe_remat(DecoderBlock, cfg, 6, self.decode)
        for i in range(self.num_layers):
            y = block(cfg, decode=self.decode, name=f"layer_{i}")(
                y, memory, self_mask, cross_mask, positions, deterministic
            )
        if cfg.norm == "pre":
            y = layer_norm(cfg, "final_norm")(y)
        return y
