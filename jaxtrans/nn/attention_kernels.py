"""Which attention kernel runs where, and the splash (TPU) kernel call.

``attention_impl``: "xla" (einsum + softmax, jaxtrans.nn.attention), "splash" (Pallas
splash attention, TPU), "cudnn" (cuDNN flash attention through
``jax.nn.dot_product_attention(implementation="cudnn")``, GPU, bfloat16/float16),
"triton" (Pallas' Triton flash attention with segment ids, GPU: packed self-attention)
or "auto": splash on TPU; on GPU Triton for packed self-attention and cuDNN for the
rest, where they apply; xla elsewhere. A kernel that cannot take an attention (its
platform, dtype or mask, attention dropout, a decoding step) gives way to xla for that
attention; ``attention_kernel`` says why, and ``describe_attention_kernels`` makes the
one start-up line that says it. The GPU kernels live in jaxtrans.nn.gpu_attention.

The kernels take the mask's structure (jaxtrans.nn.masks.AttentionMask), not a dense
mask: splash takes segment ids (padding: keys 1, padding keys a non-matching id) and a
static causal or full mask; cuDNN takes key lengths and ``is_causal``; Triton one
segment-id array for queries and keys and ``causal``. A query with no key to attend to
gets zeros, as in the xla kernel.
"""

import jax
import jax.numpy as jnp

from jaxtrans.nn import gpu_attention
from jaxtrans.nn.gpu_attention import TRITON_DTYPES, TRITON_MASK_KINDS, TRITON_MAX_HEAD_DIM
from jaxtrans.nn.kernel_placement import (
    current_platform,
    interpreted,
    over_mesh,
    target_platform,  # noqa: F401  (callers import it here)
)
from jaxtrans.nn.masks import AttentionMask

IMPLS = ("auto", "xla", "splash", "cudnn", "triton")
KERNELS = ("xla", "splash", "cudnn", "triton")
MASK_KINDS = (
    "none",
    "padding",
    "causal",
    "padding+causal",
    "segments",
    "causal+segments",
    "cross_segments",
    "dense",  # a boolean array without its structure: only xla takes it
)
_SPLASH_DTYPES = ("float32", "bfloat16")
# Why packed cross-attention runs xla on a GPU (the start-up line says it).
TRITON_CROSS_REASON = (
    "packed cross-attention: Triton's mha takes one segment-id array for queries and keys, "
    "cuDNN none"
)
_CUDNN_DTYPES = ("bfloat16", "float16")
# Splash tiles are multiples of 128 along both sequences: shorter or ragged lengths are
# padded up to a multiple of 128 with segment ids that match nothing (queries -1, keys -2).
SPLASH_ALIGN = 128
_Q_PAD_ID, _KV_PAD_ID = -1, -2


def mask_kind(mask: AttentionMask | jnp.ndarray | None) -> str:
    """The MASK_KINDS entry of a mask: its structure's kind, "dense" for a bare array."""
    if mask is None:
        return "none"
    return mask.kind if isinstance(mask, AttentionMask) else "dense"


def attention_kernel(
    impl: str,
    platform: str,
    dtype,
    mask_kind: str,
    decode: bool = False,
    *,
    dropout: bool = False,
    head_dim: int | None = None,
    bias: bool = False,
) -> tuple[str, str | None]:
    """The kernel ("xla", "splash", "cudnn" or "triton") for one attention, and why it
    fell back.

    The reason is None where the kernel is the one ``impl`` asks for on ``platform``
    (auto on CPU: xla, no reason); otherwise a few words for the start-up line.
    ``dropout``: attention weights are dropped (attention_dropout_rate > 0). ``bias``: a
    position encoding adds a bias to the scores (PositionEncoding.biases_attention).
    """
    if impl == "fused":  # the old name, see BlockConfig
        impl = "xla"
    if impl not in IMPLS:
        raise ValueError(f"attention_impl={impl!r} is not one of {IMPLS}")
    if mask_kind not in MASK_KINDS:
        raise ValueError(f"mask kind {mask_kind!r} is not one of {MASK_KINDS}")
    if impl == "xla":
        return "xla", None
    wanted = impl
    if impl == "auto":
        segmented = mask_kind in ("segments", "causal+segments", "cross_segments")
        wanted = {"tpu": "splash", "gpu": "triton" if segmented else "cudnn"}.get(platform)
        if wanted is None:
            return "xla", None
    needs = {"splash": "tpu", "cudnn": "gpu", "triton": "gpu"}[wanted]
    if platform != needs:
        return "xla", f"{wanted} needs a {needs.upper()}, this is {platform}"
    if decode:
        return "xla", "decoding steps run xla"
    if dropout:
        return "xla", "attention dropout (only xla drops attention weights)"
    if bias:
        return "xla", "a bias on the scores (only xla adds one)"
    dtype = jnp.dtype(dtype).name
    if mask_kind == "dense":
        return "xla", "a mask without its structure"
    if wanted == "splash":
        if dtype not in _SPLASH_DTYPES:
            return "xla", f"splash takes float32/bfloat16, not {dtype}"
        return "splash", None
    if wanted == "triton":
        return _triton_kernel(dtype, mask_kind, head_dim)
    if dtype not in _CUDNN_DTYPES:
        return "xla", f"cuDNN flash attention takes bfloat16/float16, not {dtype}"
    if mask_kind in ("segments", "causal+segments", "cross_segments"):
        return "xla", "cuDNN cannot express packed-segment masks"
    if head_dim is not None and (head_dim % 8 or head_dim > 128):
        return "xla", f"cuDNN flash attention needs head_dim a multiple of 8 <= 128, not {head_dim}"
    return "cudnn", None


def _triton_kernel(dtype: str, mask_kind: str, head_dim: int | None) -> tuple[str, str | None]:
    """attention_kernel for a GPU attention that asks for Triton (or auto's packed ones)."""
    if dtype not in TRITON_DTYPES:
        return "xla", f"Triton attention takes float32/bfloat16/float16, not {dtype}"
    if mask_kind == "cross_segments":
        return "xla", TRITON_CROSS_REASON
    if mask_kind not in TRITON_MASK_KINDS:
        return "xla", "Triton attention cannot let padding queries see keys (padding: cudnn)"
    if head_dim is not None and head_dim > TRITON_MAX_HEAD_DIM:
        return "xla", f"Triton attention needs head_dim <= {TRITON_MAX_HEAD_DIM}, not {head_dim}"
    return "triton", None


def model_attention_kernels(
    config, platform: str | None = None, dtype=None, packed: bool = False
) -> dict[str, tuple[str, str | None]]:
    """(kernel, why it fell back) of each attention of a model's train step: "encoder
    self" (or the encoder of a BERT), and for a TransformerConfig "decoder self" and
    "cross".

    ``config``: a BlockConfig. ``packed``: batches pack several sequences per row (segment
    masks). An encoder-decoder's training batches carry segment ids packed or not (one
    per sentence pair, jaxtrans.data.translation.pipeline), so its attentions take
    segment masks either way. Platform and dtype default to current_platform() and the
    compute dtype.
    """
    platform = current_platform() if platform is None else platform
    dtype = jnp.dtype(config.compute_dtype if dtype is None else dtype)
    encoder_decoder = hasattr(config, "num_decoder_layers")
    segmented = packed or encoder_decoder
    attentions = {"encoder self": "segments" if segmented else "padding"}
    if encoder_decoder:
        attentions["decoder self"] = "causal+segments"
        attentions["cross"] = "cross_segments"
    biased = config.position_encoding.biases_attention  # self-attention only
    return {
        name: attention_kernel(
            config.attention_impl,
            platform,
            dtype,
            kind,
            dropout=config.attention_dropout_rate > 0,
            head_dim=config.head_dim,
            bias=biased and name != "cross",
        )
        for name, kind in attentions.items()
    }


def describe_attention_kernels(
    config, platform: str | None = None, dtype=None, packed: bool = False
) -> str:
    """One line: the kernel of each attention of a model (model_attention_kernels), e.g.
    for the run's first log."""
    platform = current_platform() if platform is None else platform
    dtype = jnp.dtype(config.compute_dtype if dtype is None else dtype)
    kernels = model_attention_kernels(config, platform, dtype, packed)
    parts = [
        f"{name} {kernel}" + (f" ({reason})" if reason else "")
        for name, (kernel, reason) in kernels.items()
    ]
    if "decoder self" in kernels:
        parts.append("decoding steps xla")
    head = f"attention kernels (attention_impl={config.attention_impl}, {platform}, {dtype.name})"
    return f"{head}: " + ", ".join(parts)


def _zero_rows_without_keys(out: jnp.ndarray, mask: jnp.ndarray | None) -> jnp.ndarray:
    """out [batch, q_len, heads, head_dim]; rows whose mask row is all False -> 0."""
    if mask is None:
        return out
    has_key = jnp.any(mask, axis=-1)  # [batch|1, heads|1, q_len]
    has_key = jnp.broadcast_to(has_key, (out.shape[0], has_key.shape[1], out.shape[1]))
    has_key = jnp.swapaxes(has_key, 1, 2)[..., None]  # [batch, q_len, heads|1, 1]
    return jnp.where(has_key, out, 0).astype(out.dtype)


def splash_segment_ids(mask: AttentionMask, batch: int, q_len: int, kv_len: int):
    """Segment ids [batch, q_len], [batch, kv_len] that make splash apply ``mask``.

    Packed segments keep their ids, padding (0) becomes -1 (queries) and -2 (keys), so
    it matches nothing; a padding mask gives every query id 1, real keys 1, padding -2.
    """
    if mask.q_segments is not None:
        q = jnp.where(mask.q_segments != 0, mask.q_segments, _Q_PAD_ID)
        kv = jnp.where(mask.kv_segments != 0, mask.kv_segments, _KV_PAD_ID)
        return q.astype(jnp.int32), kv.astype(jnp.int32)
    q = jnp.ones((batch, q_len), jnp.int32)
    if mask.kv_valid is not None:
        kv = jnp.where(mask.kv_valid, 1, _KV_PAD_ID).astype(jnp.int32)
    else:
        kv = jnp.ones((batch, kv_len), jnp.int32)
    return q, kv


def _block(length: int) -> int:
    """The largest of 512, 256, 128 dividing ``length`` (a multiple of 128)."""
    return next(b for b in (512, 256, 128) if length % b == 0)


def _splash_kernel(heads: int, q_len: int, kv_len: int, causal: bool, interpret: bool):
    """The kernel for [heads, q_len, head_dim] examples; made under each trace (its mask
    tables become arrays of that trace), splash caches the mask processing itself."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    shape = (q_len, kv_len)
    head_mask = splash.CausalMask(shape) if causal else splash.FullMask(shape)
    bq, bkv = _block(q_len), _block(kv_len)
    sizes = splash.BlockSizes(
        block_q=bq,
        block_kv=bkv,
        block_kv_compute=bkv,
        block_q_dkv=bq,
        block_kv_dkv=bkv,
        block_kv_dkv_compute=bkv,
        block_q_dq=bq,
        block_kv_dq=bkv,
    )
    return splash.make_splash_mha(
        splash.MultiHeadMask([head_mask] * heads),
        block_sizes=sizes,
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )


def splash_attention(
    q: jnp.ndarray,
    k: jnp.ndarray,
    v: jnp.ndarray,
    mask: AttentionMask,
    interpret: bool | None = None,
) -> jnp.ndarray:
    """Pallas splash attention -> [batch, q_len, heads, head_dim].

    q [batch, q_len, heads, head_dim]; k, v heads-major [batch, heads, kv_len, head_dim].
    Each example runs the kernel on [heads, len, head_dim] (jax.vmap over the batch).
    q is scaled by 1/sqrt(head_dim) in its dtype, as in the xla kernel. ``interpret``
    (default: off a TPU) runs the kernel in the Pallas interpreter.
    """
    from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

    if interpret is None:  # the backend the program is compiled for
        interpret = interpreted("tpu")
    batch, q_len, heads, head_dim = q.shape
    kv_len = k.shape[2]
    if mask.causal and q_len != kv_len:
        raise ValueError(f"causal splash attention needs q_len == kv_len, got {q_len}, {kv_len}")
    q_ids, kv_ids = splash_segment_ids(mask, batch, q_len, kv_len)
    q = jnp.swapaxes(q * jnp.asarray(head_dim**-0.5, q.dtype), 1, 2)  # [batch, heads, q, d]
    q_pad, kv_pad = -q_len % SPLASH_ALIGN, -kv_len % SPLASH_ALIGN
    q = jnp.pad(q, ((0, 0), (0, 0), (0, q_pad), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, kv_pad), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, kv_pad), (0, 0)))
    q_ids = jnp.pad(q_ids, ((0, 0), (0, q_pad)), constant_values=_Q_PAD_ID)
    kv_ids = jnp.pad(kv_ids, ((0, 0), (0, kv_pad)), constant_values=_KV_PAD_ID)

    def attend(q, k, v, q_ids, kv_ids):  # one device's rows and heads
        kernel = _splash_kernel(q.shape[1], q.shape[2], k.shape[2], mask.causal, bool(interpret))

        def one_example(q, k, v, q_ids, kv_ids):
            return kernel(q, k, v, segment_ids=SegmentIds(q=q_ids, kv=kv_ids))

        return jax.vmap(one_example)(q, k, v, q_ids, kv_ids)

    out = over_mesh(attend, q, k, v, q_ids, kv_ids)[:, :, :q_len]
    return _zero_rows_without_keys(jnp.swapaxes(out, 1, 2), mask.mask)


def kernel_attention(
    kernel: str, q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, mask: AttentionMask | None
) -> jnp.ndarray:
    """Run ``kernel`` ("splash", "cudnn" or "triton"); ``mask`` None: attend everywhere."""
    if mask is None:
        mask = AttentionMask(None)
    if kernel == "splash":
        return splash_attention(q, k, v, mask)
    if kernel == "cudnn":
        return gpu_attention.cudnn_attention(q, k, v, mask)
    if kernel == "triton":
        return gpu_attention.triton_attention(q, k, v, mask)
    raise ValueError(f"kernel {kernel!r} is not one of {KERNELS[1:]}")
