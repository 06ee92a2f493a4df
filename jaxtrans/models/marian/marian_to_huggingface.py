"""jaxtrans Transformer parameters -> a Hugging Face Marian config.json and state dict: the
inverse of ``marian_from_huggingface.py``.

    hf_config, state = to_huggingface(config, params)
    # write config.json and model.safetensors (safetensors.numpy.save_file) into a
    # directory: MarianMTModel.from_pretrained(directory) computes the same logits.

What Marian can express: Post-LN, sinusoidal positions, relu / gelu / tanh gelu / silu,
LayerNorm epsilon 1e-5 (Marian's is fixed), source and target vocabularies of any sizes,
and either decoder start: a zero vector (``decoder_start_embedding="zero"``, as Marian
itself starts) or a learned start row, written as ``<pad>``'s row, which is where
transformers starts (``LEARNED_START_NOTE`` says who else does not read it). A model with
the paper's interleaved sinusoids is exported too: permuting the d_model axis of every
parameter the same way (a symmetry of the model) turns the interleaved table into Marian's
halves exactly.

Token ids are Marian's as data/translation/marian_tokenizer_files.py writes them: a side of
N model ids becomes a Marian vocabulary of V = N - 1 ids with ``</s>`` 0 and ``<pad>`` at
P, which is also the decoder start. Marian has one pad id for both sides, so P is the
last id of the smaller vocabulary (V - 1 when both have one size), inside the larger one
(``marian_pad_id``). Marian row m is the model's row ``marian_to_model_ids(V, P, 0)[m]``,
except row P, which takes the start row (BOS); the model's padding row (never attended
to, never emitted) is left out. With the zero start, row P of the embedding tables is
zero: the zero start that transformers reads from ``<pad>``'s row and CTranslate2's
converter, dropping that row, builds in.
"""

from typing import Any

import flax.linen as nn
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.models.marian.marian_from_huggingface import marian_to_model_ids
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.vocab import BOS_ID, PAD_ID

# jaxtrans activation -> Hugging Face activation_function.
ACTIVATION_FUNCTIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}
# The position kinds a Marian directory holds: its sinusoids, which transformers computes
# itself (jaxtrans.nn.positions).
POSITIONS = ("sinusoidal",)
# Marian's LayerNorm is torch's default: its epsilon is not configurable.
MARIAN_EPSILON = 1e-5
# What an export of a model with a learned start row tells its user.
LEARNED_START_NOTE = (
    "the decoder starts from a learned row, written as <pad>'s: transformers translates "
    "as jaxtrans does, Marian itself and CTranslate2's Marian converter start from a zero "
    "vector and would not (for CTranslate2 export with --format ctranslate2)"
)


def check_exportable(cfg: TransformerConfig) -> None:
    """UserError naming the first model setting Hugging Face Marian cannot express."""
    if cfg.norm != "post":
        raise UserError(
            f"model.norm={cfg.norm!r}: Marian has only Post-LN (norm='post'); "
            "this model cannot be exported"
        )
    if cfg.position not in POSITIONS:
        raise UserError(
            f"model.position={cfg.position!r}: Marian has only {' or '.join(POSITIONS)} "
            "positions; this model cannot be exported"
        )
    if cfg.activation not in ACTIVATION_FUNCTIONS:
        raise UserError(
            f"model.activation={cfg.activation!r}: Marian's activation_function has no "
            f"counterpart; only {', '.join(ACTIVATION_FUNCTIONS)} can be exported"
        )
    if cfg.layer_norm_epsilon != MARIAN_EPSILON:
        raise UserError(
            f"model.layer_norm_epsilon={cfg.layer_norm_epsilon}: Marian's LayerNorm uses "
            f"{MARIAN_EPSILON} and cannot be configured; this model cannot be exported exactly"
        )
    if cfg.pad_id != PAD_ID:
        raise UserError(f"model.pad_id={cfg.pad_id}: only models with pad 0 can be exported")
    for name, size in (
        ("vocab_size", cfg.vocab_size),
        ("target_vocab_size", cfg.output_vocab_size),
    ):
        if size < 4:
            raise UserError(f"{name}={size}: too small for a Marian vocabulary")


def marian_pad_id(cfg: TransformerConfig) -> int:
    """Marian's one pad id (and decoder start) for both sides: the last id of the smaller
    vocabulary (a side of N model ids has N - 1 Marian ids)."""
    return min(cfg.vocab_size, cfg.output_vocab_size) - 2


def marian_rows(model_vocab_size: int, pad_id: int | None = None) -> np.ndarray:
    """int [V = model_vocab_size - 1]: the model id whose row is Marian row m of a token
    table (see the module doc), ``<pad>`` at ``pad_id`` (None: V - 1); the inverse of
    marian_from_huggingface.py's row mapping."""
    size = model_vocab_size - 1
    pad_id = size - 1 if pad_id is None else pad_id
    rows = marian_to_model_ids(size, pad_id, 0)[:size].copy()
    rows[pad_id] = BOS_ID  # Marian's pad is its decoder start
    return rows


def token_rows(cfg: TransformerConfig) -> tuple[np.ndarray, np.ndarray]:
    """(source rows, target rows): ``marian_rows`` of each side, at Marian's one pad id."""
    pad_id = marian_pad_id(cfg)
    return marian_rows(cfg.vocab_size, pad_id), marian_rows(cfg.output_vocab_size, pad_id)


def huggingface_config(cfg: TransformerConfig) -> dict[str, Any]:
    """The config.json of the exported MarianMTModel."""
    check_exportable(cfg)
    pad_id = marian_pad_id(cfg)
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": cfg.vocab_size - 1,
        "decoder_vocab_size": cfg.output_vocab_size - 1,
        "share_encoder_decoder_embeddings": cfg.share_embeddings,
        "tie_word_embeddings": cfg.tie_output,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.num_encoder_layers,
        "decoder_layers": cfg.num_decoder_layers,
        "encoder_attention_heads": cfg.num_heads,
        "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": ACTIVATION_FUNCTIONS[cfg.activation],
        "dropout": cfg.dropout_rate,
        "attention_dropout": cfg.attention_dropout_rate,
        "activation_dropout": cfg.activation_dropout_rate,
        "max_position_embeddings": cfg.max_len,
        "scale_embedding": cfg.scale_embeddings,
        "pad_token_id": pad_id,
        "decoder_start_token_id": pad_id,
        "eos_token_id": 0,
        "bos_token_id": None,
        # jaxtrans neither emits the start token nor forces EOS at the length limit.
        "bad_words_ids": [[pad_id]],
        "forced_eos_token_id": None,
        "is_encoder_decoder": True,
        "dtype": "float32",
    }


class _Writer:
    """Writes tensors under Hugging Face names, permuting the d_model axis by ``order``."""

    def __init__(self, order: np.ndarray):
        self.order, self.state = order, {}

    def put(self, name: str, value: Any, model_axes: tuple[int, ...] = ()) -> None:
        array = np.asarray(value, dtype=np.float32)
        for axis in model_axes:
            array = np.take(array, self.order, axis=axis)
        self.state[name] = np.ascontiguousarray(array)

    def tokens(self, name: str, table: Any, rows: np.ndarray, zero_start: bool = False) -> None:
        """A token table [model vocab, d_model] -> [V, d_model] in Marian ids (``rows``:
        marian_rows of its side); with ``zero_start`` (an embedding table) the start row
        (Marian's pad) is zero."""
        marian = np.asarray(table)[rows]
        if zero_start:
            marian[rows == BOS_ID] = 0
        self.put(name, marian, model_axes=(1,))

    def linear(self, name: str, params: dict, reads_model: bool, writes_model: bool) -> None:
        """kernel [in, out] -> weight [out, in]; d_model axes: in if reads_model, out (and
        the bias) if writes_model."""
        weight = np.asarray(params["kernel"], np.float32).T
        self.put(f"{name}.weight", weight, (1,) * reads_model + (0,) * writes_model)
        self.put(f"{name}.bias", params["bias"], (0,) * writes_model)

    def norm(self, name: str, params: dict) -> None:
        self.put(f"{name}.weight", params["scale"], (0,))
        self.put(f"{name}.bias", params["bias"], (0,))

    def attention(self, prefix: str, params: dict, d_model: int) -> None:
        for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            kernel = np.asarray(params[ours]["kernel"], np.float32).reshape(d_model, d_model)
            self.put(f"{prefix}.{theirs}.weight", kernel.T, (1,))
            self.put(f"{prefix}.{theirs}.bias", np.asarray(params[ours]["bias"]).reshape(-1))
        out = np.asarray(params["out"]["kernel"], np.float32).reshape(d_model, d_model)
        self.put(f"{prefix}.out_proj.weight", out.T, (0,))
        self.put(f"{prefix}.out_proj.bias", params["out"]["bias"], (0,))


def _layers(w: _Writer, prefix: str, stack: dict, count: int, d_model: int) -> None:
    for i in range(count):
        if f"layer_{i}" not in stack:
            raise UserError(f"{prefix} has no layer_{i}: the parameters are not this model's")
        layer, p = stack[f"layer_{i}"], f"{prefix}.layers.{i}"
        w.attention(f"{p}.self_attn", layer["self_attention"], d_model)
        w.norm(f"{p}.self_attn_layer_norm", layer["self_attention_norm"])
        if "cross_attention" in layer:
            w.attention(f"{p}.encoder_attn", layer["cross_attention"], d_model)
            w.norm(f"{p}.encoder_attn_layer_norm", layer["cross_attention_norm"])
        w.linear(f"{p}.fc1", layer["feed_forward"]["wi"], reads_model=True, writes_model=False)
        w.linear(f"{p}.fc2", layer["feed_forward"]["wo"], reads_model=False, writes_model=True)
        w.norm(f"{p}.final_layer_norm", layer["feed_forward_norm"])


def to_state_dict(cfg: TransformerConfig, params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Transformer params (per layer or stacked, ``scan_layers``) -> float32 numpy tensors
    by Marian name."""
    check_exportable(cfg)
    params = nn.unbox(unstack_layers(params))
    d = cfg.d_model
    if cfg.sinusoidal_layout == "interleaved":  # sines (even dims) first, then cosines
        order = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    else:
        order = np.arange(d)
    w = _Writer(order)
    source_rows, target_rows = token_rows(cfg)
    source = params["source_embedding"]["embedding"]
    target = source if cfg.share_embeddings else params["target_embedding"]["embedding"]
    zero = cfg.decoder_start_embedding == "zero"  # else row P is the learned start row
    if cfg.share_embeddings:
        w.tokens("model.shared.weight", source, source_rows, zero_start=zero)
    # Written even when shared: with tie_word_embeddings false, Hugging Face ties neither
    # stack's table to model.shared.
    w.tokens(
        "model.encoder.embed_tokens.weight",
        source,
        source_rows,
        zero_start=zero or not cfg.share_embeddings,
    )
    w.tokens("model.decoder.embed_tokens.weight", target, target_rows, zero_start=zero)
    _layers(w, "model.encoder", params["encoder"], cfg.num_encoder_layers, d)
    _layers(w, "model.decoder", params["decoder"], cfg.num_decoder_layers, d)
    if cfg.tie_output:
        bias = params.get("final_logits_bias", np.zeros((cfg.output_vocab_size,), np.float32))
    else:
        kernel, bias = params["output"]["kernel"], params["output"]["bias"]
        w.tokens("lm_head.weight", np.asarray(kernel, np.float32).T, target_rows)
    w.put("final_logits_bias", np.asarray(bias, np.float32)[target_rows][None])
    return w.state


def to_huggingface(
    config: TransformerConfig, params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A translation model -> (config.json contents, state dict of float32 numpy arrays)
    of the MarianMTModel computing the same logits (in Marian ids, see the module doc).
    UserError naming the first setting Marian cannot express."""
    return huggingface_config(config), to_state_dict(config, params)
