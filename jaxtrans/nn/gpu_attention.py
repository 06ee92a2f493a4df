"""The GPU attention kernels: cuDNN flash attention and Pallas' Triton flash attention.

cuDNN (``jax.nn.dot_product_attention(implementation="cudnn")``) takes key lengths
(padding at the end of a row, as jaxtrans batches are made) and ``is_causal``; it has no
segment ids, so packed rows cannot use it. Triton (``jax.experimental.pallas.ops.gpu.
attention.mha``) takes segment ids, one array for queries and keys: packed
self-attention (encoder self, decoder causal self). A query with no key to attend to (a
padding position of a packed row) gets zeros, as in the xla kernel.

Shapes as in jaxtrans.nn.attention: q [batch, q_len, heads, head_dim], k and v
heads-major [batch, heads, kv_len, head_dim]; both kernels return [batch, q_len, heads,
head_dim].
"""

import jax
import jax.numpy as jnp

from jaxtrans.nn.kernel_placement import interpreted, over_mesh
from jaxtrans.nn.masks import AttentionMask

# --- cuDNN ---------------------------------------------------------------------------


def cudnn_arguments(mask: AttentionMask) -> dict:
    """The keyword arguments of jax.nn.dot_product_attention that apply ``mask`` in cuDNN.

    Key padding becomes key_value_seq_lengths (the number of real keys: padding sits at
    the end of a row); queries are not masked by a padding mask, so no query lengths.
    """
    if mask.q_segments is not None:
        raise ValueError("cuDNN cannot express packed-segment masks")
    arguments = {"implementation": "cudnn", "is_causal": mask.causal}
    if mask.kv_valid is not None:
        lengths = jnp.sum(mask.kv_valid, axis=-1, dtype=jnp.int32)
        arguments["key_value_seq_lengths"] = lengths
    return arguments


def cudnn_attention(
    q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: AttentionMask
) -> jnp.ndarray:
    """cuDNN flash attention -> [batch, q_len, heads, head_dim].

    The library takes k, v as [batch, kv_len, heads, head_dim]. A row without real keys
    gets zeros, as in the xla kernel.
    """
    arguments = cudnn_arguments(mask)
    k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
    out = jax.nn.dot_product_attention(q, k, v, **arguments)
    lengths = arguments.get("key_value_seq_lengths")
    if lengths is None:
        return out
    return jnp.where((lengths > 0)[:, None, None, None], out, 0).astype(out.dtype)


# --- Triton --------------------------------------------------------------------------

# The mask kinds Triton's mha expresses: one segment-id array shared by queries and keys
# (self-attention), causal or not. A padding mask lets a padding query attend to the real
# keys, which shared ids cannot say; cross-attention has two arrays.
TRITON_MASK_KINDS = ("none", "causal", "segments", "causal+segments")
TRITON_DTYPES = ("float32", "bfloat16", "float16")
# Tiles of [block, head_dim] live in shared memory: up to 128 wide (mha's default forward
# block of 128 at head_dim 128 compiles for an H100: test_gpu_attention_compile.py).
TRITON_MAX_HEAD_DIM = 128
# Padding positions of a packed row have segment id 0 (jaxtrans.nn.masks); the positions
# added to fill a tile get it too, so no real query or key sees them.
_PAD_SEGMENT = 0
# Triton's dot products need at least 16 along each side of a tile, and its tiles are
# powers of two: mha's default blocks (128 forward, 32 backward) or the whole length.
_MIN_TILE, _BLOCK = 16, 128


def triton_length(length: int) -> int:
    """The length a sequence is padded to for mha: a power of two of at least 16 up to
    128, then a multiple of 128 (every block of mha's default sizes divides it)."""
    if length <= _BLOCK:
        return max(_MIN_TILE, 1 << (length - 1).bit_length())
    return -(-length // _BLOCK) * _BLOCK


def triton_segment_ids(mask: AttentionMask, batch: int, length: int) -> jnp.ndarray:
    """Segment ids [batch, length] int32 that make mha apply ``mask`` (a self-attention
    mask of TRITON_MASK_KINDS): the packed segments, or 1 everywhere without segments."""
    if mask.cross or mask.kv_valid is not None:
        raise ValueError(f"Triton attention takes {TRITON_MASK_KINDS} masks, not {mask.kind!r}")
    if mask.q_segments is not None:
        return mask.q_segments.astype(jnp.int32)
    return jnp.ones((batch, length), jnp.int32)


def triton_attention(
    q: jnp.ndarray,
    k: jnp.ndarray,
    v: jnp.ndarray,
    mask: AttentionMask,
    interpret: bool | None = None,
) -> jnp.ndarray:
    """Pallas Triton flash attention (self-attention) -> [batch, len, heads, head_dim].

    Lengths are padded to triton_length with segment id 0 and head_dim with zeros to a
    power of two of at least 16 (zero columns change no score); scores are scaled by
    1/sqrt(head_dim) in float32 inside the kernel. The backward pass is mha's own
    (Triton kernels for dq, dk, dv). Padding queries (segment 0) get zeros.
    ``interpret`` (default: off a GPU) runs the kernels in the Pallas interpreter.
    """
    from jax.experimental.pallas.ops.gpu.attention import BlockSizes, mha

    if interpret is None:
        interpret = interpreted("gpu")
    batch, length, heads, head_dim = q.shape
    if k.shape[2] != length:
        raise ValueError(f"Triton attention is self-attention: q_len {length}, kv_len {k.shape[2]}")
    ids = triton_segment_ids(mask, batch, length)
    padded, width = triton_length(length), max(_MIN_TILE, 1 << (head_dim - 1).bit_length())
    pad = ((0, 0), (0, 0), (0, padded - length), (0, width - head_dim))
    q, k, v = (jnp.pad(x, pad) for x in (jnp.swapaxes(q, 1, 2), k, v))  # [batch, heads, ...]
    padded_ids = jnp.pad(ids, ((0, 0), (0, padded - length)), constant_values=_PAD_SEGMENT)

    def attend(q, k, v, ids, _):  # one device's rows and heads, [batch, heads, len, width]
        q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))  # mha's [batch, len, heads, d]
        out = mha(
            q,
            k,
            v,
            ids,
            sm_scale=head_dim**-0.5,
            causal=mask.causal,
            block_sizes=BlockSizes.get_default(),
            interpret=bool(interpret),
        )
        return jnp.swapaxes(out, 1, 2)

    out = over_mesh(attend, q, k, v, padded_ids, padded_ids)[:, :, :length, :head_dim]
    out = jnp.swapaxes(out, 1, 2)
    if mask.q_segments is None:
        return out
    return jnp.where((ids != _PAD_SEGMENT)[:, :, None, None], out, 0).astype(out.dtype)
