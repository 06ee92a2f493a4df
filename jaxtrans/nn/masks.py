"""Boolean attention masks. True means "may attend".

Masks broadcast against attention scores of shape [batch, heads, q_len, kv_len].
"""

import jax.numpy as jnp

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
