"""Encoder and decoder layers and their stacks, Post-LN or Pre-LN.

Post-LN (the paper, original BERT):  x = LayerNorm(x + Dropout(sublayer(x)))
Pre-LN:                              x = x + Dropout(sublayer(LayerNorm(x))),
                                     with one final LayerNorm on top of the stack.

The blocks know nothing of vocabularies or sequence-to-sequence training, so the
same encoder stack serves the translation model and BERT.

A stack is ``num_layers`` blocks named ``layer_0`` ... or, with ``config.scan_layers``,
one ``nn.scan`` over a block named ``layers`` whose parameters carry a leading
``[num_layers]`` axis (logical name "layers"); jaxtrans.models.layer_stacks converts
between the two. The residual stream between blocks is constrained to the logical axes
("batch", "length", "embed").
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn.attention import CACHE, MEMORY_CACHE, MultiHeadAttention
from jaxtrans.nn.block_config import BlockConfig
from jaxtrans.nn.dropout import Dropout
from jaxtrans.nn.feed_forward import FeedForward
from jaxtrans.nn.layers import layer_norm

# Logical axes of the residual stream [batch, length, d_model] at block boundaries.
RESIDUAL_AXES = ("batch", "length", "embed")


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
    # Inside nn.scan: return (x, None), the (carry, output) pair a scanned body gives.
    scanned: bool = False

    @nn.compact
    def __call__(
        self,
        x: jnp.ndarray,
        mask: jnp.ndarray | None,
        positions: jnp.ndarray | None,
        deterministic: bool,
    ) -> jnp.ndarray | tuple[jnp.ndarray, None]:
        """x [batch, length, d_model], mask [batch|1, 1, length|1, length] -> x."""
        cfg = self.config
        x = nn.with_logical_constraint(x, RESIDUAL_AXES)
        attention = MultiHeadAttention(cfg, positions=cfg.position_encoding, name="self_attention")
        x = residual(
            cfg,
            x,
            lambda h: attention(h, h, mask, positions, positions, deterministic),
            layer_norm(cfg, "self_attention_norm"),
            deterministic,
        )
        feed_forward = FeedForward(cfg, name="feed_forward")
        x = residual(
            cfg,
            x,
            lambda h: feed_forward(h, deterministic),
            layer_norm(cfg, "feed_forward_norm"),
            deterministic,
        )
        x = nn.with_logical_constraint(x, RESIDUAL_AXES)
        return (x, None) if self.scanned else x


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward."""

    config: BlockConfig
    # Incremental decoding: self-attention keys/values accumulate in the "cache"
    # collection, cross-attention keys/values of the memory sit in "memory_cache".
    decode: bool = False
    # Inside nn.scan: return (y, None), the (carry, output) pair a scanned body gives.
    scanned: bool = False

    @nn.compact
    def __call__(
        self,
        y: jnp.ndarray,
        memory: jnp.ndarray | None,
        self_mask: jnp.ndarray | None,
        cross_mask: jnp.ndarray | None,
        positions: jnp.ndarray | None,
        deterministic: bool,
    ) -> jnp.ndarray | tuple[jnp.ndarray, None]:
        """y [batch, tgt_len, d_model], memory [batch, src_len, d_model] -> y.

        When decoding, ``memory=None`` reuses the cross-attention keys/values cached by
        an earlier call that was given the memory.
        """
        cfg = self.config
        y = nn.with_logical_constraint(y, RESIDUAL_AXES)
        self_attention = MultiHeadAttention(
            cfg,
            positions=cfg.position_encoding,
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
        # Positions relate tokens within one sequence; source and target positions are
        # not comparable, so they do not act in cross-attention (no rotation, no bias).
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
        y = residual(
            cfg,
            y,
            lambda h: feed_forward(h, deterministic),
            layer_norm(cfg, "feed_forward_norm"),
            deterministic,
        )
        y = nn.with_logical_constraint(y, RESIDUAL_AXES)
        return (y, None) if self.scanned else y


def _maybe_remat(
    block: type[nn.Module], config: BlockConfig, deterministic_argnum: int, decode: bool = False
):
    # `self` is argument 0 for nn.remat; `deterministic` must be static. Decoding takes
    # no gradients, so there is nothing to recompute. Under nn.scan the loop already
    # keeps XLA from merging recomputation with the forward pass: prevent_cse is not needed.
    if config.remat and not decode:
        return nn.remat(
            block, static_argnums=(deterministic_argnum,), prevent_cse=not config.scan_layers
        )
    return block


def _scan(block: type[nn.Module], num_layers: int, num_inputs: int) -> type[nn.Module]:
    """``block`` applied ``num_layers`` times by nn.scan: the first input is the carry,
    the other ``num_inputs - 1`` (masks, positions, memory, deterministic) are shared.

    Parameters, caches and sown intermediates get a leading [num_layers] axis named
    "layers"; every layer draws its own parameter and dropout keys.
    """
    return nn.scan(
        block,
        variable_axes={"params": 0, CACHE: 0, MEMORY_CACHE: 0, "intermediates": 0},
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * (num_inputs - 1),
        length=num_layers,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )


def _caches_rows_first(variables):
    """Scanned caches, layers first inside the scan -> rows first outside.

    Searches gather and tile caches along a leading rows axis, and expect the cache
    index as a scalar: [layers, rows, ...] -> [rows, layers, ...], and the per-layer
    cache indices [layers] (always equal) -> one scalar.
    """
    return jax.tree.map(lambda x: x[0] if x.ndim == 1 else jnp.moveaxis(x, 0, 1), variables)


def _caches_layers_first(num_layers: int):
    def convert(variables):
        return jax.tree.map(
            lambda x: jnp.broadcast_to(x, (num_layers,)) if x.ndim == 0 else jnp.moveaxis(x, 1, 0),
            variables,
        )

    return convert


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
        if cfg.scan_layers:
            stack = _scan(block, self.num_layers, 4)(cfg, scanned=True, name="layers")
            x, _ = stack(x, mask, positions, deterministic)
        else:
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
        """y [batch, tgt_len, d_model] (embedded) -> [batch, tgt_len, d_model].

        Scanned and decoding, each cache leaf is [rows, num_layers, ...] (its cache
        index one scalar), so searches gather rows as without the scan.
        """
        cfg = self.config
        block = _maybe_remat(DecoderBlock, cfg, 6, self.decode)
        if cfg.scan_layers:
            stack = _scan(block, self.num_layers, 6)
            if self.decode:
                stack = nn.map_variables(
                    stack,
                    [CACHE, MEMORY_CACHE],
                    trans_in_fn=_caches_layers_first(self.num_layers),
                    trans_out_fn=_caches_rows_first,
                    init=self.is_initializing(),
                    mutable=True,
                )
            layers = stack(cfg, decode=self.decode, scanned=True, name="layers")
            y, _ = layers(y, memory, self_mask, cross_mask, positions, deterministic)
        else:
            for i in range(self.num_layers):
                y = block(cfg, decode=self.decode, name=f"layer_{i}")(
                    y, memory, self_mask, cross_mask, positions, deterministic
                )
        if cfg.norm == "pre":
            y = layer_norm(cfg, "final_norm")(y)
        return y
