"""Building blocks: attention, masks, positions, feed-forward, encoder/decoder blocks."""

from jaxtrans.nn.attention import MultiHeadAttention, attention_weights, fused_attention
from jaxtrans.nn.attention_kernels import describe_attention_kernels
from jaxtrans.nn.block_config import BlockConfig
from jaxtrans.nn.blocks import Decoder, DecoderBlock, Encoder, EncoderBlock
from jaxtrans.nn.dropout import Dropout
from jaxtrans.nn.feed_forward import FeedForward
from jaxtrans.nn.masks import (
    PAD_ID,
    AttentionMask,
    causal_mask,
    combine_masks,
    key_padding_attention_mask,
    padding_attention_mask,
    padding_mask,
    segment_attention_mask,
    segment_mask,
)
from jaxtrans.nn.positions import (
    LearnedPositions,
    apply_rope,
    default_positions,
    sinusoidal_embedding,
)

__all__ = [
    "PAD_ID",
    "AttentionMask",
    "BlockConfig",
    "Decoder",
    "DecoderBlock",
    "Dropout",
    "Encoder",
    "EncoderBlock",
    "FeedForward",
    "LearnedPositions",
    "MultiHeadAttention",
    "apply_rope",
    "attention_weights",
    "causal_mask",
    "combine_masks",
    "default_positions",
    "describe_attention_kernels",
    "fused_attention",
    "key_padding_attention_mask",
    "padding_attention_mask",
    "padding_mask",
    "segment_attention_mask",
    "segment_mask",
    "sinusoidal_embedding",
]
