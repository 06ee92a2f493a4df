"""Boolean attention masks. True means "may attend".

Masks broadcast against attention scores of shape [batch, heads, q_len, kv_len].
AttentionMask carries such a mask with the padding, segment ids and causality that
built it, for the kernels that take those instead (jaxtrans.nn.attention_kernels).
"""

import jax.numpy as jnp
from flax import struct

from jaxtrans.vocab import PAD_ID


def padding_mask(kv_ids: jnp.ndarray, pad_id: int = PAD_ID) -> jnp.ndarray:
    """[batch, kv_len] token ids -> [batch, 1, 1, kv_len]: keys that are not padding."""
    return (kv_ids != pad_id)[:, None, None, :]


def causal_mask(length: int) -> jnp.ndarray:
    """[1, 1, length, length]: query i may attend to keys 0..i (lower triangle)."""
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def segment_mask(q_segments: jnp.ndarray, kv_segments: jnp.ndarray | None = None) -> jnp.ndarray:
    """Packed sequences: tokens attend only inside their own segment.

    Segment ids are [batch, len] ints, 1, 2, ... for the sequences packed in a row and
    0 for padding. Returns [batch, 1, q_len, kv_len]; padding attends to nothing and
    nothing attends to padding.
    """
    if kv_segments is None:
        kv_segments = q_segments
    same = q_segments[:, None, :, None] == kv_segments[:, None, None, :]
    real = (q_segments != 0)[:, None, :, None] & (kv_segments != 0)[:, None, None, :]
    return same & real


def combine_masks(*masks: jnp.ndarray | None) -> jnp.ndarray | None:
    """Logical AND of broadcastable masks; None entries are ignored."""
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = jnp.logical_and(out, m)
    return out


@struct.dataclass
class AttentionMask:
    """A boolean mask together with the structure that built it.

    ``mask`` is exactly the array the xla kernel takes. The other fields say how it was
    made, which is what the splash and cuDNN kernels take instead of a dense mask:
    ``kv_valid`` [batch, kv_len] keys that are not padding (a padding mask), or packed
    ``q_segments`` [batch, q_len] and ``kv_segments`` [batch, kv_len] (1, 2, ..., 0 for
    padding); ``causal``: the mask also holds the lower triangle (self-attention);
    ``cross``: segments of queries and keys come from different sequences.
    Built by padding_attention_mask, key_padding_attention_mask, segment_attention_mask.
    """

    mask: jnp.ndarray | None
    kv_valid: jnp.ndarray | None = None
    q_segments: jnp.ndarray | None = None
    kv_segments: jnp.ndarray | None = None
    causal: bool = struct.field(pytree_node=False, default=False)
    cross: bool = struct.field(pytree_node=False, default=False)

    @property
    def kind(self) -> str:
        """One of attention_kernels.MASK_KINDS (never "dense")."""
        if self.q_segments is not None:
            if self.cross:
                return "cross_segments"
            return "causal+segments" if self.causal else "segments"
        if self.kv_valid is not None:
            return "padding+causal" if self.causal else "padding"
        return "causal" if self.causal else "none"


def padding_attention_mask(
    kv_ids: jnp.ndarray, pad_id: int = PAD_ID, causal: bool = False
) -> AttentionMask:
    """padding_mask(kv_ids) (AND causal_mask for decoder self-attention), with structure."""
    mask = padding_mask(kv_ids, pad_id)
    if causal:
        mask = combine_masks(causal_mask(kv_ids.shape[1]), mask)
    return AttentionMask(mask, kv_valid=kv_ids != pad_id, causal=causal)


def key_padding_attention_mask(valid: jnp.ndarray) -> AttentionMask:
    """[batch, kv_len] 1/True for real keys (BERT's attention_mask) -> [batch, 1, 1, kv_len]."""
    valid = valid.astype(bool)
    return AttentionMask(valid[:, None, None, :], kv_valid=valid)


def segment_attention_mask(
    q_segments: jnp.ndarray, kv_segments: jnp.ndarray | None = None, causal: bool = False
) -> AttentionMask:
    """segment_mask (AND causal_mask when ``causal``), with the segment ids that built it.

    ``kv_segments`` given: cross-attention between two packed sequences.
    """
    mask = segment_mask(q_segments, kv_segments)
    if causal:
        mask = combine_masks(causal_mask(q_segments.shape[1]), mask)
    cross = kv_segments is not None
    kv_segments = q_segments if kv_segments is None else kv_segments
    return AttentionMask(
        mask, q_segments=q_segments, kv_segments=kv_segments, causal=causal, cross=cross
    )


def dense_mask(mask: AttentionMask | jnp.ndarray | None) -> jnp.ndarray | None:
    """The boolean array of a mask given with or without its structure."""
    return mask.mask if isinstance(mask, AttentionMask) else mask
