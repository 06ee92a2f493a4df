"""jaxtrans Transformer parameters -> a CTranslate2 model spec (``ctranslate2.specs``), built
directly rather than through a Hugging Face directory, so that every translation model
converts: Post-LN or Pre-LN, any LayerNorm epsilon, sinusoidal (either layout), learned or
rotary positions, a learned or zero decoder start, shared or separate vocabularies.

    spec = transformer_spec(config, params, source_tokens, target_tokens)
    spec.validate(); spec.optimize(); spec.save(directory)  # ctranslate2.Translator(directory)

Token ids are the model's own (pad 0, eos 1, bos 2, unk 3: jaxtrans/vocab.py); the tokens
are the pieces at those ids. What CTranslate2 is told, and why:

    pre_norm                 norm == "pre" (Pre-LN's final LayerNorm: each stack's layer_norm)
    layer_norm_epsilon       the model's (CTranslate2's TransformerConfig carries it)
    position_encodings       sinusoidal: jaxtrans's own table, in its layout, of
                             max(max_len, SINUSOID_ROWS) rows (CTranslate2's built-in table
                             numbers positions from 1 with another frequency step);
                             learned: the max_len-row table
    rotary_dim=0, sliced     position="rope": every dimension of a head, i paired with
                             i + head_dim / 2 (rotary_interleave=False), base rope_base;
                             cross-attention is not rotated, as here
                             (both from the config's position_encoding: its encodings()
                             and rotary(); a kind with an attention bias, or a rotation
                             no Rotary describes, is refused with a UserError)
    scale_embeddings         the model's flag (sqrt(d_model) or none)
    start_from_zero_embedding  decoder_start_embedding == "zero"; else the decoder starts
                             from <s> (BOS) and its learned row
    projection bias          final_logits_bias or the untied output's bias, -inf at PAD and
                             BOS: jaxtrans's searches never emit either and normalise over
                             the other tokens, so the log-probabilities are the same
    add_source_eos           sources are given as pieces without EOS, as SentencePiece cuts
"""

from typing import Any

import flax.linen as nn
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# Rows of the sinusoidal table written for a sinusoidal model (more when max_len is
# larger): CTranslate2 reads positions from it and refuses a position past its end; its
# Translator cuts sources at max_input_length=1024 tokens by default.
SINUSOID_ROWS = 1024


def _activation(name: str):
    from ctranslate2.specs import common_spec

    return {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,  # erf, as jaxtrans's "gelu"
        "gelu_tanh": common_spec.Activation.GELUTanh,
        "silu": common_spec.Activation.SWISH,
    }[name]


def _f32(value: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value, dtype=np.float32))


def _dense(spec, params: dict) -> None:
    """A flax Dense, kernel [in, out] and bias [out] -> weight [out, in] and bias."""
    spec.weight = _f32(_f32(params["kernel"]).T)
    spec.bias = _f32(params["bias"])


def _projection(params: dict) -> tuple[np.ndarray, np.ndarray]:
    """An attention projection (query/key/value) -> (weight [d_model, d_model], bias)."""
    kernel = _f32(params["kernel"])
    return kernel.reshape(kernel.shape[0], -1).T, _f32(params["bias"]).reshape(-1)


def _out_projection(spec, params: dict, d_model: int) -> None:
    """The output projection [heads, head_dim, d_model] -> weight [d_model, d_model]."""
    spec.weight = _f32(_f32(params["kernel"]).reshape(d_model, d_model).T)
    spec.bias = _f32(params["bias"])


def _norm(spec, params: dict) -> None:
    spec.gamma = _f32(params["scale"])
    spec.beta = _f32(params["bias"])


def _attention(spec, params: dict, d_model: int, cross: bool) -> None:
    """Self-attention: one fused [3d, d] input projection; cross-attention: the query
    projection, then keys and values fused [2d, d]."""
    parts = [_projection(params[name]) for name in ("query", "key", "value")]
    groups = [parts[:1], parts[1:]] if cross else [parts]
    for linear, group in zip(spec.linear[:-1], groups, strict=True):
        linear.weight = _f32(np.concatenate([w for w, _ in group]))
        linear.bias = _f32(np.concatenate([b for _, b in group]))
    _out_projection(spec.linear[-1], params["out"], d_model)


def _feed_forward(spec, layer: dict) -> None:
    _dense(spec.linear_0, layer["feed_forward"]["wi"])
    _dense(spec.linear_1, layer["feed_forward"]["wo"])
    _norm(spec.layer_norm, layer["feed_forward_norm"])


def check_positions(cfg: TransformerConfig) -> None:
    """UserError where CTranslate2 cannot express the model's positions: it writes a table
    added to the embeddings and a rotation of queries and keys, nothing else."""
    encoding = cfg.position_encoding
    if encoding.biases_attention or (encoding.rotates and encoding.rotary() is None):
        what = "a bias on the attention scores" if encoding.biases_attention else "its rotation"
        raise UserError(
            f"model.position={cfg.position!r}: CTranslate2's Transformer spec cannot express "
            f"{what}; this model cannot be exported to CTranslate2"
        )


def position_table(cfg: TransformerConfig, table_params: Any = None) -> np.ndarray | None:
    """The position encodings [rows, d_model] CTranslate2 adds to the embeddings, as the
    model adds them (the learned table, jaxtrans's sinusoids), or None where nothing is
    added (RoPE: inside the attention). ``table_params``: the side's position parameters."""
    encoding = cfg.position_encoding
    rows = encoding.max_length() or max(cfg.max_len, SINUSOID_ROWS)
    table = encoding.encodings(table_params, rows)
    return None if table is None else _f32(table)


def _stack_options(cfg: TransformerConfig) -> dict[str, Any]:
    options = {"pre_norm": cfg.norm == "pre", "activation": _activation(cfg.activation)}
    rotary = cfg.position_encoding.rotary()
    if rotary is not None:  # every dimension of a head (rotary_dim=0)
        options.update(rotary_dim=0, rotary_interleave=rotary.interleaved, rotary_base=rotary.base)
    return options


def _encoder(cfg: TransformerConfig, params: dict, table: np.ndarray):
    from ctranslate2.specs import transformer_spec

    spec = transformer_spec.TransformerEncoderSpec(
        cfg.num_encoder_layers, cfg.num_heads, **_stack_options(cfg)
    )
    spec.embeddings[0].weight = table
    spec.scale_embeddings = cfg.scale_embeddings
    encodings = position_table(cfg, params.get("source_positions"))
    if encodings is not None:
        spec.position_encodings.encodings = encodings
    for i, layer_spec in enumerate(spec.layer):
        layer = params["encoder"][f"layer_{i}"]
        _attention(layer_spec.self_attention, layer["self_attention"], cfg.d_model, cross=False)
        _norm(layer_spec.self_attention.layer_norm, layer["self_attention_norm"])
        _feed_forward(layer_spec.ffn, layer)
    if cfg.norm == "pre":
        _norm(spec.layer_norm, params["encoder"]["final_norm"])
    return spec


def output_layer(cfg: TransformerConfig, params: dict, table: np.ndarray):
    """(weight [target vocab, d_model], bias [target vocab]) of the logits, the bias -inf
    at PAD and BOS, which jaxtrans's searches never emit."""
    if cfg.tie_output:
        weight = table
        bias = params.get("final_logits_bias", np.zeros((cfg.output_vocab_size,)))
    else:
        weight = _f32(params["output"]["kernel"]).T
        bias = params["output"]["bias"]
    bias = _f32(bias).copy()
    bias[[PAD_ID, BOS_ID]] = -np.inf
    return _f32(weight), bias


def _decoder(cfg: TransformerConfig, params: dict, table: np.ndarray):
    from ctranslate2.specs import transformer_spec

    spec = transformer_spec.TransformerDecoderSpec(
        cfg.num_decoder_layers, cfg.num_heads, **_stack_options(cfg)
    )
    spec.embeddings.weight = table
    spec.scale_embeddings = cfg.scale_embeddings
    spec.start_from_zero_embedding = cfg.decoder_start_embedding == "zero"
    encodings = position_table(cfg, params.get("target_positions"))
    if encodings is not None:
        spec.position_encodings.encodings = encodings
    for i, layer_spec in enumerate(spec.layer):
        layer = params["decoder"][f"layer_{i}"]
        _attention(layer_spec.self_attention, layer["self_attention"], cfg.d_model, cross=False)
        _norm(layer_spec.self_attention.layer_norm, layer["self_attention_norm"])
        _attention(layer_spec.attention, layer["cross_attention"], cfg.d_model, cross=True)
        _norm(layer_spec.attention.layer_norm, layer["cross_attention_norm"])
        _feed_forward(layer_spec.ffn, layer)
    if cfg.norm == "pre":
        _norm(spec.layer_norm, params["decoder"]["final_norm"])
    spec.projection.weight, spec.projection.bias = output_layer(cfg, params, table)
    return spec


def transformer_spec(
    cfg: TransformerConfig,
    params: dict[str, Any],
    source_tokens: list[str],
    target_tokens: list[str],
):
    """Transformer params (per layer or stacked) and the token of each source / target id
    -> a ``ctranslate2.specs.TransformerSpec`` with its vocabularies and config (see the
    module doc), float32, not yet validated or saved."""
    from ctranslate2.specs import transformer_spec as specs

    if (len(source_tokens), len(target_tokens)) != (cfg.vocab_size, cfg.output_vocab_size):
        raise ValueError(
            f"{len(source_tokens)} source and {len(target_tokens)} target tokens for a model "
            f"of vocab_size={cfg.vocab_size}, target_vocab_size={cfg.output_vocab_size}"
        )
    check_positions(cfg)
    params = nn.unbox(unstack_layers(params))
    source = _f32(params["source_embedding"]["embedding"])
    target = source if cfg.share_embeddings else _f32(params["target_embedding"]["embedding"])
    spec = specs.TransformerSpec(_encoder(cfg, params, source), _decoder(cfg, params, target))
    spec.register_source_vocabulary(list(source_tokens))
    spec.register_target_vocabulary(list(target_tokens))
    spec.config.layer_norm_epsilon = float(cfg.layer_norm_epsilon)
    spec.config.unk_token = target_tokens[UNK_ID]
    spec.config.bos_token = target_tokens[BOS_ID]
    spec.config.eos_token = target_tokens[EOS_ID]
    spec.config.decoder_start_token = target_tokens[BOS_ID]
    spec.config.add_source_eos = True
    return spec
