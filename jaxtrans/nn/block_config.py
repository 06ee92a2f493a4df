"""Shape and behaviour of the shared Transformer blocks.

One frozen dataclass travels through every block instead of long keyword lists.
Models extend it (``TransformerConfig``, ``BertConfig``) with their own fields.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import jax.numpy as jnp

from jaxtrans.config_sections import field_types, type_mismatch
from jaxtrans.nn.positions import ENCODINGS, PositionEncoding

Activation = Literal["relu", "gelu", "gelu_tanh", "silu"]
NormPlacement = Literal["post", "pre"]
# A name of jaxtrans.nn.positions.ENCODINGS: "sinusoidal", "learned", "rope".
PositionKind = str
AttentionImpl = Literal["auto", "xla", "splash", "cudnn", "triton"]

_CHOICES = {
    "activation": ("relu", "gelu", "gelu_tanh", "silu"),
    "norm": ("post", "pre"),
    "attention_impl": ("auto", "xla", "splash", "cudnn", "triton"),
}


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Hyper-parameters shared by attention, feed-forward and the layer stacks."""

    # Width of the residual stream.
    d_model: int = 512
    # Number of attention heads; d_model must divide evenly among them.
    num_heads: int = 8
    # Hidden width of the position-wise feed-forward network.
    d_ff: int = 2048
    # Dropout on embeddings and on every residual branch (P_drop in the Transformer
    # paper).
    dropout_rate: float = 0.1
    # Dropout on the attention weights.
    attention_dropout_rate: float = 0.1
    # Dropout after the feed-forward activation.
    activation_dropout_rate: float = 0.1
    # Feed-forward non-linearity: "relu", "gelu" (exact erf), "gelu_tanh" or "silu"
    # (x * sigmoid(x), Marian's "swish").
    activation: Activation = "relu"
    # LayerNorm placement: "post", x = LN(x + f(x)) as in the Transformer and BERT papers;
    # "pre", x = x + f(LN(x)) with a final LN per stack.
    norm: NormPlacement = "post"
    # How positions enter the model: "sinusoidal" (the Transformer paper), "learned"
    # absolute positions (BERT) or "rope" (rotary, applied to queries and keys).
    position: PositionKind = "sinusoidal"
    # RoPE frequency base (position="rope" only): angle_i = position * base^(-2i / d_head).
    rope_base: float = 10000.0
    # Rows of the learned position table: the longest sequence a model with learned
    # positions can take.
    max_len: int = 512
    # LayerNorm epsilon.
    layer_norm_epsilon: float = 1e-5
    # Attention kernel: "xla" (einsum + softmax, every platform), "splash" (Pallas splash
    # attention, TPU), "cudnn" (cuDNN flash attention, GPU, bfloat16/float16; no packed
    # segments), "triton" (Pallas' Triton flash attention, GPU: packed self-attention) or
    # "auto" (splash on TPU; on GPU triton for packed self-attention, cudnn for the rest;
    # else xla). An attention a kernel cannot take (platform, dtype, mask, decoding steps,
    # attention dropout) runs xla; the run's first log lines say which kernel each
    # attention uses. "splash", "cudnn" and "triton" need attention_dropout_rate = 0. The
    # old "fused" reads as "xla". The default, auto, is xla on a CPU.
    attention_impl: AttentionImpl = "auto"
    # Recompute each layer's activations in the backward pass to save memory.
    remat: bool = False
    # Run each layer stack as one nn.scan over parameters stacked on a "layers" axis
    # (one compiled layer body per stack); jaxtrans.models.layer_stacks converts them.
    scan_layers: bool = False
    # Compute dtype of matmuls and activations: "float32", or "bfloat16" on GPU/TPU (the
    # parameters stay in param_dtype).
    dtype: str = "float32"
    # Storage dtype of the parameters.
    param_dtype: str = "float32"

    def __post_init__(self):
        for field in ("d_model", "num_heads", "d_ff", "max_len"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r}: use a whole number >= 1")
        for field in ("dropout_rate", "attention_dropout_rate", "activation_dropout_rate"):
            value = getattr(self, field)
            if not isinstance(value, int | float) or not 0 <= value < 1:
                raise ValueError(f"{field}={value!r}: use a rate in [0, 1)")
        for field in ("dtype", "param_dtype"):
            value = getattr(self, field)
            try:
                floating = jnp.issubdtype(jnp.dtype(value), jnp.floating)
            except TypeError:
                floating = False
            if not floating:
                raise ValueError(
                    f"{field}={value!r}: use a floating type, e.g. float32 or bfloat16"
                )
        if self.attention_impl == "fused":  # old name: XLA's dot_product_attention
            object.__setattr__(self, "attention_impl", "xla")
        for field, allowed in _CHOICES.items():
            value = getattr(self, field)
            if value not in allowed:
                raise ValueError(f"{field}={value!r} is not one of {allowed}")
        if not isinstance(self.position, str) or self.position not in ENCODINGS:
            raise ValueError(f"position={self.position!r} is not one of {tuple(ENCODINGS)}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}"
            )
        self._check_position_fields()
        self.position_encoding.check()
        if self.attention_impl in ("splash", "cudnn", "triton") and self.attention_dropout_rate > 0:
            raise ValueError(
                f"attention_impl={self.attention_impl!r} cannot drop attention weights; "
                "set attention_dropout_rate=0 or use attention_impl='auto' or 'xla'"
            )

    def _check_position_fields(self) -> None:
        """ValueError for a field only another position kind reads (rope_base for a
        sinusoidal model, ...) set away from its default: it would do nothing."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        own = set(ENCODINGS[self.position].fields)
        for name, kind in ENCODINGS.items():
            for field in [f for f in kind.fields if f not in own]:
                if field not in defaults:  # a field of another model's config
                    continue
                if getattr(self, field) != defaults[field]:
                    raise ValueError(
                        f"{field}={getattr(self, field)!r} needs position={name!r}, "
                        f"got position={self.position!r}"
                    )

    @property
    def position_encoding(self) -> PositionEncoding:
        """``position`` as the object the embeddings, attention, the decoding limits and
        the exporters ask (jaxtrans.nn.positions)."""
        return ENCODINGS[self.position](self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    @property
    def storage_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.param_dtype)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        """Build from a plain mapping (e.g. a run config's ``model`` section); ValueError
        for an unknown field or a value of another type than the field's (``d_model="512"``),
        before the values are used."""
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown model fields {unknown}; known fields: {sorted(names)}")
        types = field_types(cls)
        for key, value in values.items():
            if problem := type_mismatch(key, value, types[key]):
                raise ValueError(problem)
        return cls(**values)
