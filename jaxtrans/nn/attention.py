"""Scaled dot-product attention and the multi-head attention module.

Shapes: queries [batch, q_len, heads, head_dim]; keys and values heads-major, [batch,
heads, kv_len, head_dim], the layout the score and mixing products read without a
transpose (a decoding cache is stored that way, so no step copies it); boolean masks
broadcastable to [batch, heads, q_len, kv_len] (True = attend), bare or as an
AttentionMask that also carries the padding, segment ids and causality that built the
mask: the splash (TPU), cuDNN and Triton (GPU) kernels of jaxtrans.nn.attention_kernels
take those, chosen by ``config.attention_impl``; the xla kernel takes the boolean mask.

For incremental decoding the module keeps keys and values between calls in two Flax
variable collections: ``"cache"`` (decoder self-attention, one slot per target position,
appended to at every step) and ``"memory_cache"`` (cross-attention keys/values of the
encoder output, projected once per sentence).
"""

import functools
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.nn import attention_kernels
from jaxtrans.nn.block_config import BlockConfig
from jaxtrans.nn.dropout import Dropout
from jaxtrans.nn.masks import AttentionMask, combine_masks, dense_mask
from jaxtrans.nn.positions import PositionEncoding

# Variable collections of the decoding caches (see the module docstring).
CACHE = "cache"
MEMORY_CACHE = "memory_cache"

CacheKind = Literal["causal", "memory"]
# The self-attention cache's variables: keys and values [rows, ..., max_len, head_dim]
# (slots second to last; scanned stacks put a layers axis after rows) and the number of
# slots written so far, a scalar once decoding has started.
CACHED_KEY, CACHED_VALUE, CACHE_INDEX = "cached_key", "cached_value", "cache_index"


def attention_weights(
    q: jnp.ndarray, k: jnp.ndarray, mask: jnp.ndarray | None, bias: jnp.ndarray | None = None
) -> jnp.ndarray:
    """softmax(q k^T / sqrt(d_k) + bias) over keys, in float32 -> [batch, heads, q_len, kv_len].

    q [batch, q_len, heads, head_dim], k [batch, heads, kv_len, head_dim], bias float32
    broadcastable to [batch, heads, q_len, kv_len] (a position encoding's) or None.

    Masked keys get exactly zero weight; a query with no key to attend to (a padding
    row of a packed batch) gets all-zero weights rather than NaN.
    """
    q = q * jnp.asarray(q.shape[-1] ** -0.5, q.dtype)
    scores = jnp.einsum("bqnh,bnkh->bnqk", q, k).astype(jnp.float32)
    if bias is not None:
        scores = scores + bias
    if mask is None:
        return jax.nn.softmax(scores, axis=-1)
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    return jnp.where(mask, jax.nn.softmax(scores, axis=-1), 0.0)


def fused_attention(
    q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: jnp.ndarray | None
) -> jnp.ndarray:
    """jax.nn.dot_product_attention (XLA) -> [batch, q_len, heads, head_dim].

    k, v heads-major as everywhere here; the library takes [batch, kv_len, heads,
    head_dim] (XLA folds the two transposes away). It averages all values for a fully
    masked query; we zero those rows so both paths agree.
    """
    k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
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
    ``positions`` (the config's position_encoding, for self-attention) turns queries and
    keys by their position ids and adds its bias to the scores, where the kind does.
    """

    config: BlockConfig
    # How positions act inside this attention; None: they do not (cross-attention, whose
    # source and target positions are not comparable).
    positions: PositionEncoding | None = None
    # Incremental decoding; None: off. "causal": each call writes its keys/values into
    # the next free slots of a [batch, heads, max_len, head_dim] cache and its queries
    # attend to every slot filled so far (the cache is sized by the input of model.init).
    # "memory": keys/values of a fixed memory are projected and stored when inputs_kv
    # is given, and read back from the cache when inputs_kv is None.
    cache: CacheKind | None = None

    @nn.compact
    def __call__(
        self,
        inputs_q: jnp.ndarray,
        inputs_kv: jnp.ndarray | None,
        mask: jnp.ndarray | AttentionMask | None = None,
        q_positions: jnp.ndarray | None = None,
        kv_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """inputs_q [batch, q_len, d_model], inputs_kv [batch, kv_len, d_model].

        Returns [batch, q_len, d_model]. ``inputs_kv=None`` (with ``cache="memory"``)
        reuses the keys/values stored by an earlier call. ``mask``: a boolean array or
        an AttentionMask (which the splash, cuDNN and Triton kernels need; see the module doc).
        """
        cfg = self.config
        structure = mask if isinstance(mask, AttentionMask) else None
        mask = dense_mask(mask)
        # rules=(): DenseGeneral boxes a flattened kernel/bias before reshaping it
        # (flax#3676), so under logical-axis rules the box's own constraint would get
        # more names than axes; the train state's shardings place these parameters.
        projection = functools.partial(
            nn.DenseGeneral,
            features=(cfg.num_heads, cfg.head_dim),
            dtype=cfg.compute_dtype,
            param_dtype=cfg.storage_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.xavier_uniform(),  # fans of the flattened [d_model, d_model]
                ("embed", "heads", "kv"),
                rules=(),
            ),
            bias_init=nn.with_logical_partitioning(
                nn.initializers.zeros, ("heads", "kv"), rules=()
            ),
        )
        encoding = self.positions
        rotates = encoding is not None and encoding.rotates
        biases = encoding is not None and encoding.biases_attention
        if (rotates or biases) and (
            q_positions is None or (inputs_kv is not None and kv_positions is None)
        ):
            raise ValueError(f"{encoding.name} attention needs q_positions and kv_positions")
        q = projection(name="query")(inputs_q)
        if rotates:
            q = encoding.rotate(q, q_positions)

        if inputs_kv is None:
            if self.cache != "memory":
                raise ValueError("inputs_kv=None reuses cached keys/values: needs cache='memory'")
            k = self.get_variable(MEMORY_CACHE, "cached_key")
            v = self.get_variable(MEMORY_CACHE, "cached_value")
        else:
            k = projection(name="key")(inputs_kv)
            v = projection(name="value")(inputs_kv)
            if rotates:
                k = encoding.rotate(k, kv_positions)  # cached keys stay rotated
            k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)  # heads-major
            if self.cache == "memory":
                self.put_variable(MEMORY_CACHE, "cached_key", k)
                self.put_variable(MEMORY_CACHE, "cached_value", v)
        if self.cache == "causal":
            k, v, mask, cached = self._append_to_cache(k, v, mask)
            if cached:  # the keys of every slot, slot s holding position s
                kv_positions = jnp.arange(k.shape[2], dtype=jnp.int32)[None]
        bias = encoding.attention_bias(q_positions, kv_positions) if biases else None

        kernel, _ = attention_kernels.attention_kernel(
            cfg.attention_impl,
            attention_kernels.current_platform(),
            q.dtype,
            attention_kernels.mask_kind(structure if structure is not None else mask),
            decode=self.cache is not None,  # decoding (and its model.init) runs xla
            dropout=cfg.attention_dropout_rate > 0,
            head_dim=cfg.head_dim,
            bias=bias is not None,
        )
        if kernel != "xla":
            x = attention_kernels.kernel_attention(kernel, q, k, v, structure).astype(v.dtype)
        else:
            weights = attention_weights(q, k, mask, bias)
            self.sow("intermediates", "attention_weights", weights)
            weights = Dropout(cfg.attention_dropout_rate)(weights, deterministic)
            x = jnp.einsum("bnqk,bnkh->bqnh", weights.astype(v.dtype), v)

        return nn.DenseGeneral(
            features=cfg.d_model,
            axis=(-2, -1),
            dtype=cfg.compute_dtype,
            param_dtype=cfg.storage_dtype,
            kernel_init=nn.with_logical_partitioning(
                nn.initializers.xavier_uniform(),
                ("heads", "kv", "embed"),
                rules=(),
            ),
            bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
            name="out",
        )(x)

    def _append_to_cache(
        self, k: jnp.ndarray, v: jnp.ndarray, mask: jnp.ndarray | None
    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray | None, bool]:
        """Write k, v [batch, heads, q_len, head_dim] at the cache index and advance it.

        Returns the whole cache [batch, heads, max_len, head_dim], the mask extended so
        that the query at absolute position index + t sees slots 0 .. index + t, and True;
        at model.init, which only sizes the cache, k, v, mask as given and False.
        """
        initialized = self.has_variable(CACHE, CACHED_KEY)
        cached_key = self.variable(CACHE, CACHED_KEY, jnp.zeros, k.shape, k.dtype)
        cached_value = self.variable(CACHE, CACHED_VALUE, jnp.zeros, v.shape, v.dtype)
        index = self.variable(CACHE, CACHE_INDEX, lambda: jnp.array(0, jnp.int32))
        if not initialized:
            # model.init: the call only sizes the cache; attend as without one.
            return k, v, mask, False
        start = index.value
        cached_key.value = jax.lax.dynamic_update_slice(cached_key.value, k, (0, 0, start, 0))
        cached_value.value = jax.lax.dynamic_update_slice(cached_value.value, v, (0, 0, start, 0))
        index.value = start + k.shape[2]
        slots = jnp.arange(cached_key.value.shape[2])
        visible = slots[None, :] <= start + jnp.arange(k.shape[2])[:, None]  # [q_len, max_len]
        return cached_key.value, cached_value.value, combine_masks(mask, visible[None, None]), True


def reorder_cache(cache, rows: jnp.ndarray):
    """A decoding cache whose row r is row rows[r] of ``cache`` (beam search following its
    hypotheses): any tree of "cache" collections, one model's or an ensemble's.

    rows [rows] int32. Keys and values move only in the slots written so far (the cache
    index): one loop over those slots copies every layer's, so an early step copies a few
    slots rather than all max_len. Other leaves with a rows axis move whole; scalars (the
    cache indices) stay. Decoding equals that of a cache gathered whole: the slots past the
    index hold other rows' old keys and values, which the mask gives weight exactly zero
    until a step writes them.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(cache)
    names = [getattr(path[-1], "key", None) for path, _ in leaves]
    indices = [
        x for name, (_, x) in zip(names, leaves, strict=True) if name == CACHE_INDEX and x.ndim == 0
    ]
    slotted = [i for i, name in enumerate(names) if name in (CACHED_KEY, CACHED_VALUE)]
    if not indices:
        slotted = []  # model.init's cache, or not a decoding cache: gather it whole
    arrays = [
        x if x.ndim == 0 or i in slotted else jnp.take(x, rows, axis=0)
        for i, (_, x) in enumerate(leaves)
    ]
    if slotted:

        def move_slot(slot, moved):
            return [_take_rows_at_slot(x, rows, slot) for x in moved]

        filled = jnp.max(jnp.stack(indices))
        moved = jax.lax.fori_loop(0, filled, move_slot, [leaves[i][1] for i in slotted])
        for i, x in zip(slotted, moved, strict=True):
            arrays[i] = x
    return jax.tree_util.tree_unflatten(treedef, arrays)


def widen_cache(cache, slots: int):
    """A decoding cache (any tree of "cache" collections) with room for ``slots`` tokens:
    every layer's keys and values [rows, ..., max_len, head_dim] padded with zero slots to
    [rows, ..., slots, head_dim]; what they hold and the cache indices stay. Decoding goes
    on as from a cache made that long: the mask gives the new slots weight exactly zero
    until a step writes them."""

    def widen(path, x):
        if getattr(path[-1], "key", None) not in (CACHED_KEY, CACHED_VALUE):
            return x
        if x.shape[-2] > slots:
            raise ValueError(f"a cache of {x.shape[-2]} slots cannot widen to {slots}")
        padding = [(0, 0)] * x.ndim
        padding[-2] = (0, slots - x.shape[-2])
        return jnp.pad(x, padding)

    return jax.tree_util.tree_map_with_path(widen, cache)


def _take_rows_at_slot(x: jnp.ndarray, rows: jnp.ndarray, slot: jnp.ndarray) -> jnp.ndarray:
    """x [rows, ..., max_len, head_dim] with slot ``slot`` of row r taken from row rows[r]."""
    axis = x.ndim - 2
    at_slot = jax.lax.dynamic_index_in_dim(x, slot, axis, keepdims=True)
    return jax.lax.dynamic_update_index_in_dim(x, jnp.take(at_slot, rows, axis=0), slot, axis)
