"""A Hugging Face Marian ``config.json`` -> the TransformerConfig of the same model.

Every key read is checked: a wrong type or value, or a setting describing layers this
model does not have, is a UserError naming the key. Missing keys take MarianConfig's
defaults. marian_from_huggingface.py loads the weights; marian_to_huggingface.py is the inverse.
"""

import json
from pathlib import Path
from typing import Any

from jaxtrans.errors import UserError, describe, json_type
from jaxtrans.models.huggingface_files import flag, rate, whole_number
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.vocab import PAD_ID

# Hugging Face activation_function -> jaxtrans activation (HF's "gelu_new" and
# "gelu_pytorch_tanh" are both the tanh approximation).
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "swish": "silu",
    "silu": "silu",
}
# config.json keys of the older, BART-derived Marian configs that describe layers this
# model does not have, with the one value it can load: (key, loadable value).
_UNSUPPORTED = (
    ("normalize_before", False),  # Pre-LN layers
    ("normalize_embedding", False),  # a LayerNorm on the embeddings (layernorm_embedding)
    ("add_final_layer_norm", False),  # a LayerNorm on top of each stack
    ("static_position_embeddings", True),  # learned positions instead of sinusoids
    ("add_bias_logits", False),  # a bias inside the output projection
)


def _same(hf: dict[str, Any], encoder_key: str, decoder_key: str, default: int | None) -> int:
    encoder, decoder = (
        whole_number(hf, encoder_key, default),
        whole_number(hf, decoder_key, default),
    )
    if encoder != decoder:
        raise UserError(
            f"{encoder_key}={encoder} but {decoder_key}={decoder}; jaxtrans's Transformer "
            "uses one value for both stacks"
        )
    return encoder


def start_token_id(hf: dict[str, Any]) -> int:
    """The token whose target embedding row the decoder starts from: config.json's
    ``decoder_start_token_id``, else (as MarianConfig) ``pad_token_id``. Any token may be
    the start (transformers allows it); the start row is copied to the model's start token
    (marian_from_huggingface.py)."""
    pad_id = whole_number(hf, "pad_token_id", None, low=0)
    return whole_number(hf, "decoder_start_token_id", pad_id, low=0)


def config_from_huggingface(hf: dict[str, Any]) -> TransformerConfig:
    """Marian ``config.json`` contents -> TransformerConfig (float32). A field that is
    missing, mistyped or describes something this model lacks is a UserError naming the
    key (callers add the file). Defaults are MarianConfig's."""
    if not isinstance(hf, dict):
        raise UserError(f"{json_type(hf)}, not an object")
    if hf.get("model_type") != "marian":
        raise UserError(
            f"model_type={hf.get('model_type')!r}; only 'marian' checkpoints can be loaded"
        )
    for key, loadable in _UNSUPPORTED:
        if hf.get(key, loadable) != loadable:
            raise UserError(
                f"{key}={hf[key]!r} cannot be loaded: jaxtrans's Marian model needs "
                f"{key}={json.dumps(loadable)}"
            )
    act = hf.get("activation_function", "gelu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise UserError(
            f"activation_function={act!r} is not supported; use one of {sorted(ACTIVATIONS)}"
        )
    vocab_size = whole_number(hf, "vocab_size", None)
    shared = flag(hf, "share_encoder_decoder_embeddings", True)
    target_vocab_size = vocab_size
    if hf.get("decoder_vocab_size") is not None:
        target_vocab_size = whole_number(hf, "decoder_vocab_size")
    if shared and target_vocab_size != vocab_size:
        raise UserError(
            f"decoder_vocab_size={target_vocab_size} differs from vocab_size={vocab_size} "
            "but share_encoder_decoder_embeddings is true; one shared table has one size"
        )
    pad_id = whole_number(hf, "pad_token_id", None, low=0)
    eos_id = whole_number(hf, "eos_token_id", None, low=0)
    for key, size in (("vocab_size", vocab_size), ("decoder_vocab_size", target_vocab_size)):
        if pad_id >= size or eos_id >= size or pad_id == eos_id:
            raise UserError(
                f"pad_token_id={pad_id}, eos_token_id={eos_id}: need two different ids below "
                f"{key}={size}"
            )
    start = start_token_id(hf)
    if start >= target_vocab_size:
        raise UserError(
            f"decoder_start_token_id={start}: not a token of the target vocabulary "
            f"(decoder_vocab_size={target_vocab_size})"
        )
    tied = flag(hf, "tie_word_embeddings", True)
    d_model = whole_number(hf, "d_model", 1024)
    try:
        return TransformerConfig(
            vocab_size=vocab_size + 1,  # + the start token (marian_to_model_ids)
            target_vocab_size=None if shared else target_vocab_size + 1,
            d_model=d_model,
            num_heads=_same(hf, "encoder_attention_heads", "decoder_attention_heads", 16),
            d_ff=_same(hf, "encoder_ffn_dim", "decoder_ffn_dim", 4096),
            num_encoder_layers=whole_number(hf, "encoder_layers", 12),
            num_decoder_layers=whole_number(hf, "decoder_layers", 12),
            activation=ACTIVATIONS[act],
            dropout_rate=rate(hf, "dropout", 0.1),
            attention_dropout_rate=rate(hf, "attention_dropout", 0.0),
            activation_dropout_rate=rate(hf, "activation_dropout", 0.0),
            norm="post",
            position="sinusoidal",
            sinusoidal_layout="halves",
            max_len=whole_number(hf, "max_position_embeddings", 1024),
            layer_norm_epsilon=1e-5,  # torch.nn.LayerNorm's default, which Marian uses
            share_embeddings=shared,
            tie_output=tied,
            # An untied projection holds the bias itself (its "bias" parameter).
            final_logits_bias=tied,
            scale_embeddings=flag(hf, "scale_embedding", False),
            # Marian starts the decoder from a zero vector (Hugging Face: the zero <pad> row
            # of a converted model); the copied start row is then never read. A directory
            # whose start row is not zero starts from it ("learned"): the weights decide
            # (marian_from_huggingface.start_embedding).
            decoder_start_embedding="zero",
            pad_id=PAD_ID,
        )
    except (ValueError, TypeError) as error:
        raise UserError(str(error)) from None


def read_config(config_file: Path) -> tuple[TransformerConfig, dict[str, Any]]:
    """A checkpoint's config.json -> (TransformerConfig, its contents); UserError naming the
    file when it is missing, not JSON or not a loadable Marian config."""
    if not config_file.is_file():
        raise UserError(f"{config_file} not found; pass a Hugging Face Marian checkpoint directory")
    try:
        contents = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(f"{config_file} is not valid JSON ({describe(error)})") from None
    try:
        return config_from_huggingface(contents), contents
    except UserError as error:
        raise UserError(f"{config_file}: {error}") from None
