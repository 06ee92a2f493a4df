"""jaxtrans equals PyTorch: MultiheadAttention, nn.Transformer stacks and a whole model.

torch.nn.Transformer always puts a LayerNorm on top of each stack. That is right for
Pre-LN, but the paper's Post-LN stack has none, so for norm_first=False the reference's
final norms are removed and the two are compared like for like.
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.nn import BlockConfig, Decoder, Encoder, MultiHeadAttention, causal_mask

torch.backends.mha.set_fastpath_enabled(False)
TOL = 1e-5
D, HEADS, FF = 32, 4, 64


def t2n(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def attention_params(mha: torch.nn.MultiheadAttention) -> dict:
    """torch packs q, k, v as rows of in_proj_weight [3d, d]; ours are [d, heads, head_dim]."""
    d = mha.embed_dim
    heads, head_dim = mha.num_heads, d // mha.num_heads
    w, b = t2n(mha.in_proj_weight), t2n(mha.in_proj_bias)
    params = {}
    for i, name in enumerate(("query", "key", "value")):
        params[name] = {
            "kernel": w[i * d : (i + 1) * d].T.reshape(d, heads, head_dim),
            "bias": b[i * d : (i + 1) * d].reshape(heads, head_dim),
        }
    params["out"] = {
        "kernel": t2n(mha.out_proj.weight).T.reshape(heads, head_dim, d),
        "bias": t2n(mha.out_proj.bias),
    }
    return params


def linear(layer: torch.nn.Linear) -> dict:
    return {"kernel": t2n(layer.weight).T, "bias": t2n(layer.bias)}


def norm(layer: torch.nn.LayerNorm) -> dict:
    return {"scale": t2n(layer.weight), "bias": t2n(layer.bias)}


def encoder_params(encoder: torch.nn.TransformerEncoder) -> dict:
    params = {}
    for i, layer in enumerate(encoder.layers):
        params[f"layer_{i}"] = {
            "self_attention": attention_params(layer.self_attn),
            "self_attention_norm": norm(layer.norm1),
            "feed_forward": {"wi": linear(layer.linear1), "wo": linear(layer.linear2)},
            "feed_forward_norm": norm(layer.norm2),
        }
    if encoder.norm is not None:
        params["final_norm"] = norm(encoder.norm)
    return params


def decoder_params(decoder: torch.nn.TransformerDecoder) -> dict:
    params = {}
    for i, layer in enumerate(decoder.layers):
        params[f"layer_{i}"] = {
            "self_attention": attention_params(layer.self_attn),
            "self_attention_norm": norm(layer.norm1),
            "cross_attention": attention_params(layer.multihead_attn),
            "cross_attention_norm": norm(layer.norm2),
            "feed_forward": {"wi": linear(layer.linear1), "wo": linear(layer.linear2)},
            "feed_forward_norm": norm(layer.norm3),
        }
    if decoder.norm is not None:
        params["final_norm"] = norm(decoder.norm)
    return params


def torch_transformer(norm_first: bool, seed: int = 0) -> torch.nn.Transformer:
    torch.manual_seed(seed)
    model = torch.nn.Transformer(
        d_model=D,
        nhead=HEADS,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=FF,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=norm_first,
    )
    if not norm_first:
        model.encoder.norm = None
        model.decoder.norm = None
    # Non-trivial LayerNorm affine parameters, so a mix-up of scale and bias shows.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
            if isinstance(module, torch.nn.MultiheadAttention):
                module.in_proj_bias.uniform_(-0.3, 0.3)
                module.out_proj.bias.uniform_(-0.3, 0.3)
    return model.eval()


def block_config(norm_first: bool) -> BlockConfig:
    return BlockConfig(
        d_model=D,
        num_heads=HEADS,
        d_ff=FF,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        activation_dropout_rate=0.0,
        norm="pre" if norm_first else "post",
    )


# Source lengths 7, 4 and 9 (of 9) and target lengths 6, 3, 5 (of 6).
SRC_LENGTHS, TGT_LENGTHS = [7, 4, 9], [6, 3, 5]


def lengths_to_pad(lengths: list[int], width: int) -> np.ndarray:
    """True where a position is padding (torch's key_padding_mask convention)."""
    return np.arange(width)[None, :] >= np.asarray(lengths)[:, None]


@pytest.mark.slow
@pytest.mark.parametrize("with_padding", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_and_decoder_equal_torch_transformer(norm_first, with_padding):
    reference = torch_transformer(norm_first)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 9, D)).astype(np.float32)
    y = rng.normal(size=(3, 6, D)).astype(np.float32)
    src_pad = lengths_to_pad(SRC_LENGTHS if with_padding else [9] * 3, 9)
    tgt_pad = lengths_to_pad(TGT_LENGTHS if with_padding else [6] * 3, 6)

    with torch.no_grad():
        causal = reference.generate_square_subsequent_mask(6) == -torch.inf
        ref_memory = reference.encoder(torch.tensor(x), src_key_padding_mask=torch.tensor(src_pad))
        ref_out = reference.decoder(
            torch.tensor(y),
            ref_memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            tgt_key_padding_mask=torch.tensor(tgt_pad),
            memory_key_padding_mask=torch.tensor(src_pad),
        )

    cfg = block_config(norm_first)
    src_mask = jnp.asarray(~src_pad)[:, None, None, :]
    tgt_mask = jnp.asarray(~tgt_pad)[:, None, None, :] & causal_mask(6)
    memory = Encoder(cfg, 2).apply(
        {"params": encoder_params(reference.encoder)}, jnp.asarray(x), src_mask
    )
    out = Decoder(cfg, 2).apply(
        {"params": decoder_params(reference.decoder)},
        jnp.asarray(y),
        memory,
        tgt_mask,
        src_mask,
    )
    memory_diff = np.max(np.abs(np.asarray(memory) - t2n(ref_memory)))
    out_diff = np.max(np.abs(np.asarray(out) - t2n(ref_out)))
    print(f"max abs diff: memory {memory_diff:.2e}, decoder output {out_diff:.2e}")
    assert memory_diff <= TOL
    assert out_diff <= TOL


def test_cross_attention_equals_torch_multihead_attention():
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_bias.uniform_(-0.3, 0.3)
    rng = np.random.default_rng(2)
    q = rng.normal(size=(3, 5, D)).astype(np.float32)
    kv = rng.normal(size=(3, 8, D)).astype(np.float32)
    key_pad = lengths_to_pad([8, 3, 6], 8)
    with torch.no_grad():
        ref_out, ref_weights = mha(
            torch.tensor(q),
            torch.tensor(kv),
            torch.tensor(kv),
            key_padding_mask=torch.tensor(key_pad),
            average_attn_weights=False,
        )
    module = MultiHeadAttention(block_config(False))
    out, state = module.apply(
        {"params": attention_params(mha)},
        jnp.asarray(q),
        jnp.asarray(kv),
        jnp.asarray(~key_pad)[:, None, None, :],
        mutable="intermediates",
    )
    (weights,) = state["intermediates"]["attention_weights"]
    out_diff = np.max(np.abs(np.asarray(out) - t2n(ref_out)))
    weights_diff = np.max(np.abs(np.asarray(weights) - t2n(ref_weights)))
    print(f"max abs diff: output {out_diff:.2e}, weights {weights_diff:.2e}")
    assert out_diff <= TOL
    assert weights_diff <= TOL


def test_causal_self_attention_equals_torch_multihead_attention():
    torch.manual_seed(4)
    mha = torch.nn.MultiheadAttention(D, HEADS, batch_first=True).eval()
    x = np.random.default_rng(5).normal(size=(2, 7, D)).astype(np.float32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(7) == -torch.inf
    with torch.no_grad():
        ref_out, _ = mha(torch.tensor(x), torch.tensor(x), torch.tensor(x), attn_mask=causal)
    out = MultiHeadAttention(block_config(False)).apply(
        {"params": attention_params(mha)}, jnp.asarray(x), jnp.asarray(x), causal_mask(7)
    )
    diff = np.max(np.abs(np.asarray(out) - t2n(ref_out)))
    print(f"max abs diff {diff:.2e}")
    assert diff <= TOL


def torch_sinusoids(length: int, d_model: int) -> torch.Tensor:
    """The seeds' PositionalEncoding table, written in torch."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_whole_model_logits_equal_torch_embedding_transformer_and_tied_output(norm_first):
    vocab = 23
    reference = torch_transformer(norm_first, seed=7)
    torch.manual_seed(8)
    table = torch.nn.Embedding(vocab, D)
    rng = np.random.default_rng(9)
    src = rng.integers(1, vocab, size=(3, 9))
    tgt = rng.integers(1, vocab, size=(3, 6))
    src[lengths_to_pad(SRC_LENGTHS, 9)] = 0
    tgt[lengths_to_pad(TGT_LENGTHS, 6)] = 0

    with torch.no_grad():
        pe = torch_sinusoids(16, D)

        def embed(ids):
            ids = torch.tensor(ids)
            return table(ids) * math.sqrt(D) + pe[: ids.shape[1]]

        out = reference(
            embed(src),
            embed(tgt),
            tgt_mask=reference.generate_square_subsequent_mask(6) == -torch.inf,
            src_key_padding_mask=torch.tensor(src == 0),
            tgt_key_padding_mask=torch.tensor(tgt == 0),
            memory_key_padding_mask=torch.tensor(src == 0),
        )
        ref_logits = out @ table.weight.T

    config = TransformerConfig(
        **vars(block_config(norm_first)),
        vocab_size=vocab,
        num_encoder_layers=2,
        num_decoder_layers=2,
    )
    params = {
        "source_embedding": {"embedding": t2n(table.weight)},
        "encoder": encoder_params(reference.encoder),
        "decoder": decoder_params(reference.decoder),
    }
    logits = Transformer(config).apply({"params": params}, jnp.asarray(src), jnp.asarray(tgt))
    # Logits reach tens (N(0, 1) embeddings times sqrt(d_model)), so float32 rounding
    # is relative: 1e-5 of the largest logit.
    scale = np.abs(t2n(ref_logits)).max()
    diff = np.max(np.abs(np.asarray(logits) - t2n(ref_logits)))
    print(f"max abs diff {diff:.2e}, logits up to {scale:.1f}")
    assert diff <= TOL * max(1.0, scale)
