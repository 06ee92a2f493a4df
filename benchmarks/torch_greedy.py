"""Greedy decoding of the PyTorch benchmark model (steps.TorchTransformer), two ways.

``naive``: the seeds' way, the decoder re-run on the whole prefix for every new token
(``torch.nn.TransformerDecoder`` keeps no cache). ``cached``: the same layers' weights
applied one position at a time, the self-attention keys and values of earlier positions
kept and the cross-attention keys and values of the source computed once, so a token
costs one position's work. Both pick the same tokens (the same arithmetic up to float
rounding); both decode sentences longest first, 64 at a time.

Sources are lists of token ids ending in EOS; outputs are lists of ids without BOS, EOS
or padding.
"""

import math
from collections.abc import Callable

import numpy as np
import steps
import torch
import torch.nn.functional as F

from jaxtrans.data.reserved_pieces import BOS_ID, EOS_ID, PAD_ID

CHUNK = 64  # sentences decoded together


def next_token(model: steps.TorchTransformer, y: torch.Tensor, done: torch.Tensor):
    """The argmax token of each row from the decoder output ``y`` [rows, d_model] (never
    PAD or BOS; PAD for rows already done)."""
    logits = F.linear(y, model.embedding.weight)
    logits[:, PAD_ID] = -math.inf
    logits[:, BOS_ID] = -math.inf
    return torch.where(done, PAD_ID, logits.argmax(-1))


def naive_chunk(model: steps.TorchTransformer, source: torch.Tensor, max_steps: int):
    """source [rows, src_len] -> tokens [rows, <= max_steps], re-running the decoder."""
    pad = source == PAD_ID
    memory = model.transformer.encoder(model.embed(source), src_key_padding_mask=pad)
    prefix = torch.full((len(source), 1), BOS_ID, dtype=torch.long)
    done = torch.zeros(len(source), dtype=torch.bool)
    for _ in range(max_steps):
        y = model.transformer.decoder(
            model.embed(prefix), memory, tgt_mask=steps.causal_mask(prefix.shape[1]),
            tgt_is_causal=True, memory_key_padding_mask=pad,
        )  # fmt: skip
        token = next_token(model, y[:, -1], done)
        prefix = torch.cat([prefix, token[:, None]], dim=1)
        done |= token == EOS_ID
        if bool(done.all()):
            break
    return prefix[:, 1:]


def project(attention: torch.nn.MultiheadAttention, x: torch.Tensor, part: int) -> torch.Tensor:
    """x [rows, length, d_model] through the query (0), key (1) or value (2) projection
    of ``attention`` -> heads-major [rows, heads, length, d_model / heads]."""
    weight, bias = attention.in_proj_weight.chunk(3)[part], attention.in_proj_bias.chunk(3)[part]
    rows, length, width = x.shape
    heads = attention.num_heads
    return F.linear(x, weight, bias).view(rows, length, heads, width // heads).transpose(1, 2)


def attend(attention: torch.nn.MultiheadAttention, q, k, v, mask=None) -> torch.Tensor:
    """q [rows, heads, 1, head_dim], k and v [rows, heads, length, head_dim] -> [rows, 1,
    d_model] after the output projection (mask: True where a key may be attended)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    rows, heads, length, head_dim = out.shape
    return attention.out_proj(out.transpose(1, 2).reshape(rows, length, heads * head_dim))


def decoder_layer_step(layer: torch.nn.TransformerDecoderLayer, x, cache, cross, memory_mask):
    """One position through one decoder layer: x [rows, 1, d_model]; ``cache``: the
    self-attention (keys, values) of the earlier positions, or None at the first;
    ``cross``: the source's (keys, values). Returns (x, cache with this position)."""

    def self_attention(h):
        nonlocal cache
        q, k, v = (project(layer.self_attn, h, part) for part in range(3))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        cache = (k, v)
        return attend(layer.self_attn, q, k, v)

    def cross_attention(h):
        q = project(layer.multihead_attn, h, 0)
        return attend(layer.multihead_attn, q, *cross, memory_mask)

    def feed_forward(h):
        return layer.linear2(layer.activation(layer.linear1(h)))

    for norm, block in ((layer.norm1, self_attention), (layer.norm2, cross_attention),
                        (layer.norm3, feed_forward)):  # fmt: skip
        x = x + block(norm(x)) if layer.norm_first else norm(x + block(x))
    return x, cache


def cached_chunk(model: steps.TorchTransformer, source: torch.Tensor, max_steps: int):
    """source [rows, src_len] -> tokens [rows, <= max_steps], one position a step."""
    pad = source == PAD_ID
    memory = model.transformer.encoder(model.embed(source), src_key_padding_mask=pad)
    layers = model.transformer.decoder.layers
    cross = [(project(layer.multihead_attn, memory, 1), project(layer.multihead_attn, memory, 2))
             for layer in layers]  # fmt: skip
    caches = [None] * len(layers)
    token = torch.full((len(source),), BOS_ID, dtype=torch.long)
    done = torch.zeros(len(source), dtype=torch.bool)
    out = []
    for t in range(max_steps):
        x = (model.embedding(token) * math.sqrt(model.d_model) + model.positions[t])[:, None]
        for i, layer in enumerate(layers):
            x, caches[i] = decoder_layer_step(layer, x, caches[i], cross[i], ~pad[:, None, None])
        token = next_token(model, model.transformer.decoder.norm(x[:, 0]), done)
        out.append(token)
        done |= token == EOS_ID
        if bool(done.all()):
            break
    return torch.stack(out, dim=1)


DECODERS: dict[str, Callable] = {"naive": naive_chunk, "cached": cached_chunk}


@torch.no_grad()
def greedy(
    model: steps.TorchTransformer, sources: list[list[int]], max_extra: int, how: str = "cached"
) -> list[list[int]]:
    """Greedy outputs of ``sources``, at most the chunk's longest source + ``max_extra``
    tokens each; ``how``: "naive" or "cached"."""
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    outputs: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), CHUNK):
        chunk = order[start : start + CHUNK]
        length = max(len(sources[i]) for i in chunk)
        source = np.full((len(chunk), length), PAD_ID, np.int64)
        for row, i in enumerate(chunk):
            source[row, : len(sources[i])] = sources[i]
        tokens = DECODERS[how](model, torch.from_numpy(source), length + max_extra)
        for row, i in enumerate(chunk):
            ids = []
            for t in tokens[row].tolist():
                if t == EOS_ID:
                    break
                if t != PAD_ID:
                    ids.append(t)
            outputs[i] = ids
    return outputs
