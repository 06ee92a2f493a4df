"""Model FLOPs of the Transformer and BERT, counted from the shapes as executed.

A matmul of [m, k] x [k, n] is 2mkn FLOPs; attention is dense over the (packed) row, so
padding and other segments count. Backward costs twice the forward, so a training step
is 3x the forward pass.
"""

from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.transformer import TransformerConfig


def forward_flops(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """FLOPs of one forward pass over [batch, src_len] sources and [batch, tgt_len] targets."""
    d, ff = config.d_model, config.d_ff
    vocab = config.output_vocab_size
    src_tokens, tgt_tokens = batch * src_len, batch * tgt_len
    projection = 2 * d * d  # one [d, d] projection per token
    encoder_layer = src_tokens * (4 * projection + 2 * 2 * d * ff) + 2 * 2 * batch * src_len**2 * d
    decoder_layer = (
        tgt_tokens * (4 * projection + 2 * projection + 2 * 2 * d * ff)  # self q,k,v,o; cross q,o
        + src_tokens * 2 * projection  # cross-attention keys and values
        + 2 * 2 * batch * tgt_len**2 * d  # self-attention scores and weighted sum
        + 2 * 2 * batch * tgt_len * src_len * d  # cross-attention scores and weighted sum
    )
    output = tgt_tokens * 2 * d * vocab
    return (
        config.num_encoder_layers * encoder_layer
        + config.num_decoder_layers * decoder_layer
        + output
    )


def train_step_flops(config: TransformerConfig, batch: int, src_len: int, tgt_len: int) -> float:
    return 3 * forward_flops(config, batch, src_len, tgt_len)


def bert_encoder_flops(config: BertConfig, batch: int, length: int) -> float:
    """Forward FLOPs of embeddings-to-encoder-output on [batch, length], pooler included."""
    d, ff, tokens = config.d_model, config.d_ff, batch * length
    per_layer = tokens * (4 * 2 * d * d + 2 * 2 * d * ff) + 2 * 2 * batch * length**2 * d
    pooler = batch * 2 * d * d
    return config.num_layers * per_layer + pooler


def bert_pretraining_flops(config: BertConfig, batch: int, length: int, predictions: int) -> float:
    """FLOPs of one pretraining step; the MLM head runs at every masked-position slot
    (``predictions`` per row), padding slots included."""
    slots = batch * predictions
    head = slots * (2 * config.d_model * config.d_model + 2 * config.d_model * config.vocab_size)
    return 3 * (bert_encoder_flops(config, batch, length) + head)


def bert_classification_flops(config: BertConfig, batch: int, length: int) -> float:
    """FLOPs of one fine-tuning step (the classifier itself is negligible)."""
    return 3 * bert_encoder_flops(config, batch, length)
