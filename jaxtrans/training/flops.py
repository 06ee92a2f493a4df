"""Model FLOPs of a training step, and model FLOPs utilisation (MFU).

Counted from the shapes, as executed: a matmul of [m, k] x [k, n] is 2mkn FLOPs;
attention is dense over the (packed) row, so padding and other segments count.
Backward costs twice the forward, so a training step is 3x the forward pass.
"""

import jax

from jaxtrans.models import TransformerConfig

# Dense peak FLOP/s per device for the usual training dtype (bfloat16), from vendor specs.
PEAK_FLOPS = {
    "TPU v2": 45e12,
    "TPU v3": 123e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "A100": 312e12,
    "H100": 989e12,
    "H200": 989e12,
    "B200": 2250e12,
    "L4": 121e12,
    "V100": 125e12,
}


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


def device_peak_flops(override: float = 0.0) -> float | None:
    """Peak FLOP/s of one local device: ``override`` if set, else the table, else None."""
    if override:
        return float(override)
    kind = jax.devices()[0].device_kind
    for name, peak in PEAK_FLOPS.items():
        if name.lower() in kind.lower():
            return peak
    return None


def mfu(
    step_flops: float, step_seconds: float, num_devices: int, peak: float | None
) -> float | None:
    """Achieved model FLOP/s as a fraction of the devices' peak (None when the peak is unknown)."""
    if not peak or step_seconds <= 0:
        return None
    return step_flops / step_seconds / (peak * num_devices)
