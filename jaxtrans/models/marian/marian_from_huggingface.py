"""Load a Hugging Face Marian (opus-mt) checkpoint directory into the jaxtrans Transformer.

    config, params = from_huggingface("checkpoints/opus-mt-en-de")
    logits = Transformer(config).apply({"params": params}, source, target)

A directory is what ``MarianMTModel.save_pretrained`` writes (or a download of e.g.
``Helsinki-NLP/opus-mt-en-de``): ``config.json`` and ``model.safetensors`` or
``pytorch_model.bin`` (read by huggingface_files.py). Nothing is downloaded.

Marian is the paper's Post-LN Transformer with three differences, each a model option
here: the sinusoidal table in halves (``sinusoidal_layout="halves"``), the embedding scale
as config.json says (``scale_embeddings``) and a bias on the output logits
(``final_logits_bias``); its "swish" activation is ``activation="silu"``.

Token ids. jaxtrans reserves pad 0, eos 1, bos 2 (jaxtrans/vocab.py); a Marian vocabulary
has ``</s>`` at 0, ``<unk>`` at 1 and ``<pad>`` last, no start token, and its decoder
starts from ``decoder_start_token_id`` (``<pad>`` in every opus-mt; transformers allows any
token). The rows of every token table (embeddings, output bias, untied output) are
permuted at this boundary as jaxtrans.data.tokenizers.pretrained_tokenizer permutes a
pretrained vocabulary (``marian_to_model_ids``), with one extra id for the start token:
in the embedding tables its row copies the ``decoder_start_token_id`` row, so decoding
from BOS computes exactly what transformers computes from that token; in the output
tables (bias, untied projection) it copies ``<pad>``'s, a token neither side emits.

The decoder's start (``decoder_start_embedding``) follows that row: a directory whose
start row is zero (every opus-mt converted from Marian, which starts from a zero vector)
starts from "zero", so its exports to Marian and CTranslate2's Marian converter stay
exact; a row that is not zero (a model made or fine-tuned in transformers, whose tied
output projection trains the ``<pad>`` row) starts from "learned", the start row itself,
as ``MarianMTModel.generate`` does.
"""

from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxtrans.errors import UserError, describe
from jaxtrans.models.huggingface_files import load_state_dict
from jaxtrans.models.marian.marian_config import (
    config_from_huggingface,
    read_config,
    start_token_id,
)
from jaxtrans.models.transformer import Transformer, TransformerConfig
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "config_from_huggingface",
    "convert_state_dict",
    "from_huggingface",
    "marian_to_model_ids",
    "directory_start_embedding",
    "start_embedding",
]

# Layers of the Marian stacks: (jaxtrans name, Hugging Face name), per stack.
_ENCODER_LAYER = (
    ("self_attention", "self_attn"),
    ("self_attention_norm", "self_attn_layer_norm"),
    ("feed_forward_norm", "final_layer_norm"),
)
_DECODER_LAYER = (
    *_ENCODER_LAYER,
    ("cross_attention", "encoder_attn"),
    ("cross_attention_norm", "encoder_attn_layer_norm"),
)


def marian_to_model_ids(vocab_size: int, pad_id: int, eos_id: int) -> np.ndarray:
    """The id permutation between a Marian vocabulary and the model: ``to_model[marian id]``.

    vocab_size: the Marian vocabulary's size V (config.json ``vocab_size``, or
    ``decoder_vocab_size`` for a separate target vocabulary); pad_id, eos_id: its
    ``pad_token_id`` and ``eos_token_id``. Returns int64 [V + 1], a permutation of
    0 .. V: entry V stands for the start token Marian lacks (its decoder starts from pad).

        to_model[pad_id] = 0 (PAD), to_model[eos_id] = 1 (EOS), to_model[V] = 2 (BOS);
        the Marian ids among 0, 1, 2 that are neither pad nor eos take, in increasing
        order, the model ids the three specials left, in increasing order;
        every other id keeps its number.

    For opus-mt (eos 0, <unk> 1, pad V-1): to_model[0] = 1, to_model[1] = V-1,
    to_model[2] = V, to_model[V-1] = 0, to_model[V] = 2. The inverse
    ``np.argsort(to_model)`` gives the Marian id of each model id (model id 2 -> V, the
    start token, which a tokenizer never produces and drops when decoding). This is
    jaxtrans.data.tokenizers.pretrained_tokenizer's permutation for a vocabulary without a start
    token; numpy only, so tokenizers can import it.
    """
    if not 0 <= pad_id < vocab_size or not 0 <= eos_id < vocab_size or pad_id == eos_id:
        raise ValueError(
            f"pad_id={pad_id}, eos_id={eos_id}: two different ids below vocab_size={vocab_size}"
        )
    special = {pad_id: PAD_ID, eos_id: EOS_ID, vocab_size: BOS_ID}
    reserved = (PAD_ID, EOS_ID, BOS_ID)
    displaced = sorted(set(reserved) - set(special))  # Marian ids whose number is taken
    vacated = sorted(set(special) - set(reserved))  # the numbers the specials left
    to_model = np.arange(vocab_size + 1, dtype=np.int64)
    for marian_id, model_id in special.items():
        to_model[marian_id] = model_id
    to_model[displaced] = vacated
    return to_model


class _Tensors:
    """The checkpoint's tensors by name; remembers which were used."""

    def __init__(self, state: dict[str, np.ndarray]):
        self.state, self.used = state, set()

    def find(self, *names: str) -> str | None:
        return next((n for n in names if n in self.state), None)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.state:
            raise UserError(f"the checkpoint has no tensor {name!r}; is it a Marian checkpoint?")
        self.used.add(name)
        return np.asarray(self.state[name], dtype=np.float32)

    def linear(self, prefix: str) -> dict[str, np.ndarray]:
        return {"kernel": self[f"{prefix}.weight"].T, "bias": self[f"{prefix}.bias"]}

    def norm(self, prefix: str) -> dict[str, np.ndarray]:
        return {"scale": self[f"{prefix}.weight"], "bias": self[f"{prefix}.bias"]}

    def attention(self, prefix: str, cfg: TransformerConfig) -> dict[str, Any]:
        d, heads, head_dim = cfg.d_model, cfg.num_heads, cfg.head_dim
        params = {}
        for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            params[ours] = {
                "kernel": self[f"{prefix}.{theirs}.weight"].T.reshape(d, heads, head_dim),
                "bias": self[f"{prefix}.{theirs}.bias"].reshape(heads, head_dim),
            }
        params["out"] = {
            "kernel": self[f"{prefix}.out_proj.weight"].T.reshape(heads, head_dim, d),
            "bias": self[f"{prefix}.out_proj.bias"],
        }
        return params


def start_embedding(params: dict[str, Any]) -> str:
    """The ``decoder_start_embedding`` of converted ``params``: "zero" when the start row
    (BOS, the copy of the ``decoder_start_token_id`` row) is all zeros, else "learned"
    (see above)."""
    table = params.get("target_embedding", params["source_embedding"])["embedding"]
    return "zero" if not np.any(table[BOS_ID]) else "learned"


def directory_start_embedding(directory: Path, contents: dict[str, Any]) -> str:
    """start_embedding of a Marian directory (``contents``: its config.json, already read
    by read_config) from its target embedding's ``decoder_start_token_id`` row, without
    converting the rest."""
    state = load_state_dict(directory)
    t = _Tensors(state)
    name = t.find("model.decoder.embed_tokens.weight", "model.shared.weight")
    if name is None:
        raise UserError(f"the checkpoint in {directory} has no decoder embedding table")
    return "zero" if not np.any(t[name][start_token_id(contents)]) else "learned"


def _rows(table: np.ndarray, pad_id: int, eos_id: int, start_id: int | None = None) -> np.ndarray:
    """Rows [V, ...] by Marian id -> [V + 1, ...] by model id; the start row (BOS) copies
    row ``start_id`` (None: pad's)."""
    start_id = pad_id if start_id is None else start_id
    extended = np.concatenate([table, table[start_id : start_id + 1]])
    return np.ascontiguousarray(
        extended[np.argsort(marian_to_model_ids(len(table), pad_id, eos_id))]
    )


def _stack(t: _Tensors, prefix: str, layers: int, names, cfg: TransformerConfig) -> dict:
    stack = {}
    for i in range(layers):
        p, layer = f"{prefix}.layers.{i}", {}
        for ours, theirs in names:
            if theirs.endswith("attn"):
                layer[ours] = t.attention(f"{p}.{theirs}", cfg)
            else:
                layer[ours] = t.norm(f"{p}.{theirs}")
        layer["feed_forward"] = {"wi": t.linear(f"{p}.fc1"), "wo": t.linear(f"{p}.fc2")}
        stack[f"layer_{i}"] = layer
    return stack


def _check_positions(t: _Tensors, d_model: int) -> None:
    """Older checkpoints store the (fixed) sinusoid tables: they must be Marian's."""
    for name in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        if name not in t.state:
            continue
        table = t[name]
        position = np.arange(len(table), dtype=np.float64)[:, None]
        angles = position * np.power(10000.0, -2.0 * np.arange(d_model // 2) / d_model)
        expected = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
        if table.shape != expected.shape or np.abs(table - expected).max() > 1e-4:
            raise UserError(
                f"{name} is not Marian's sinusoidal table; learned positions cannot be loaded"
            )


def convert_state_dict(
    state: dict[str, np.ndarray],
    cfg: TransformerConfig,
    pad_id: int,
    eos_id: int,
    start_id: int | None = None,
) -> dict[str, Any]:
    """Marian tensors (Hugging Face names) -> Transformer params (numpy float32).

    cfg: from config_from_huggingface; pad_id, eos_id, start_id: the Marian ids
    (config.json's pad_token_id, eos_token_id, decoder_start_token_id; None: pad_id).
    Token tables are permuted by marian_to_model_ids, the embeddings' start row copied
    from ``start_id``. A tensor the model has no place for (a LayerNorm on the embeddings,
    ...) is a UserError naming it.
    """
    t = _Tensors(state)
    shared = t.find("model.shared.weight")
    source_name = t.find("model.encoder.embed_tokens.weight") if not cfg.share_embeddings else None
    source_name = source_name or shared or "model.encoder.embed_tokens.weight"
    params: dict[str, Any] = {
        "source_embedding": {"embedding": _rows(t[source_name], pad_id, eos_id, start_id)},
        "encoder": _stack(t, "model.encoder", cfg.num_encoder_layers, _ENCODER_LAYER, cfg),
        "decoder": _stack(t, "model.decoder", cfg.num_decoder_layers, _DECODER_LAYER, cfg),
    }
    if cfg.share_embeddings:
        target = params["source_embedding"]["embedding"]
        for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            repeated = alias in t.state and alias != source_name  # older files repeat it
            if repeated and not np.array_equal(t[alias], t[source_name]):
                raise UserError(
                    f"{alias} differs from {source_name}, but "
                    "share_encoder_decoder_embeddings is true"
                )
    else:
        target = _rows(t["model.decoder.embed_tokens.weight"], pad_id, eos_id, start_id)
        params["target_embedding"] = {"embedding": target}
    bias_name = t.find("final_logits_bias")
    if bias_name:
        bias = _rows(t[bias_name].reshape(-1), pad_id, eos_id)
    else:  # HF treats a missing bias as zeros
        bias = np.zeros((cfg.output_vocab_size,), np.float32)
    if cfg.tie_output:
        params["final_logits_bias"] = bias
        if "lm_head.weight" in t.state and not np.allclose(
            _rows(t["lm_head.weight"], pad_id, eos_id, start_id), target
        ):
            raise UserError(
                "lm_head.weight differs from the decoder embeddings, but config.json "
                "tie_word_embeddings is true (or missing); set it to false"
            )
    else:
        kernel = _rows(t["lm_head.weight"], pad_id, eos_id).T
        params["output"] = {"kernel": np.ascontiguousarray(kernel), "bias": bias}
    _check_positions(t, cfg.d_model)
    unused = sorted(set(state) - t.used)
    if unused:
        raise UserError(
            f"the checkpoint has tensors jaxtrans's Marian model has no place for "
            f"({', '.join(unused[:3])}{', ...' if len(unused) > 3 else ''}); it cannot be loaded"
        )
    return params


def from_huggingface(path: str | Path) -> tuple[TransformerConfig, dict[str, Any]]:
    """A Hugging Face Marian checkpoint directory -> (TransformerConfig, params).

    params: numpy float32 arrays laid out as ``Transformer(config).init`` lays them out
    (per layer, ``layer_{i}``), token rows in model ids (marian_to_model_ids). The config
    is float32 with the checkpoint's dropout rates (Transformer calls are deterministic
    by default). UserError for a missing directory or file, another model type, or a
    Marian variant this model does not implement (naming the config.json key).
    """
    directory = Path(path)
    config, contents = read_config(directory / "config.json")
    try:
        params = convert_state_dict(
            load_state_dict(directory),
            config,
            contents["pad_token_id"],
            contents["eos_token_id"],
            start_token_id(contents),
        )
    except ValueError as error:  # a tensor of another shape than config.json says
        raise UserError(
            f"the weights in {directory} do not fit its config.json ({describe(error)})"
        ) from None
    config = config.replace(decoder_start_embedding=start_embedding(params))
    _check_shapes(config, params, directory)
    return config, params


def _check_shapes(config: TransformerConfig, params: dict[str, Any], directory: Path) -> None:
    """UserError naming the first tensor whose shape is not the one config.json implies."""
    ids = jnp.zeros((1, 1), jnp.int32)
    expected = jax.eval_shape(lambda: Transformer(config).init(jax.random.key(0), ids, ids))
    expected = nn.unbox(expected["params"])
    paths = jax.tree_util.tree_flatten_with_path(expected)[0]
    for path, leaf in paths:
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        value: Any = params
        for k in path:
            value = value[getattr(k, "key", k)]
        if tuple(value.shape) != tuple(leaf.shape):
            raise UserError(
                f"the weights in {directory} do not fit its config.json: {name} has shape "
                f"{tuple(value.shape)}, expected {tuple(leaf.shape)}"
            )
