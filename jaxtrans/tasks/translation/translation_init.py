"""Where a translation model comes from when it is not trained from nothing: a Hugging Face
Marian directory (opus-mt), asked as it is (evaluate.py --init_from DIR, Translator.load)
or fine-tuned (``--config.init_from=DIR``).

The directory decides the model's shape and its tokenizer: config.json gives the
TransformerConfig (jaxtrans.models.marian.marian_config), source.spm / target.spm / vocab.json
the tokenizer (copied into the workdir, jaxtrans.data.tokenizers.marian_tokenizer). A run config
may change only what fine-tuning may change (FINE_TUNING_FIELDS); its other model fields
are best left None (configs/marian_finetune.py: placeholders), and one set to another value
than the directory's is refused, naming both values.
"""

from pathlib import Path
from typing import Any

import ml_collections

from jaxtrans.data.tokenizers.marian_tokenizer import is_marian_directory
from jaxtrans.errors import UserError
from jaxtrans.models import TransformerConfig
from jaxtrans.models.layer_stacks import arrange_layers
from jaxtrans.models.marian.marian_config import read_config
from jaxtrans.models.marian.marian_from_huggingface import from_huggingface
from jaxtrans.workdir import huggingface_model_type

# Model fields a run may set on a pretrained model: regularisation and how it is computed.
FINE_TUNING_FIELDS = (
    "dropout_rate",
    "attention_dropout_rate",
    "activation_dropout_rate",
    "attention_impl",
    "remat",
    "scan_layers",
    "dtype",
    "param_dtype",
)
# The pretrained architectures a translation task loads, by config.json's model_type.
MODEL_TYPES = ("marian",)


def check_directory(path: str, flag: str) -> Path:
    """``path`` as a Marian directory, or a UserError naming ``flag`` and saying what to give."""
    directory = Path(path).expanduser()
    help_ = "give a Hugging Face Marian (opus-mt) directory: config.json, weights, .spm files"
    if not directory.is_dir():
        raise UserError(f"{flag}={path}: no such directory; {help_}")
    model_type = huggingface_model_type(str(directory))
    if model_type is None:
        raise UserError(f"{flag}={path}: no Hugging Face config.json with a model_type; {help_}")
    if model_type not in MODEL_TYPES:
        raise UserError(f"{flag}={path} holds a {model_type} model; {help_}")
    if not is_marian_directory(str(directory)):
        raise UserError(f"{flag}={path}: no source.spm / target.spm tokenizer files; {help_}")
    return directory


def pretrained_model_config(
    path: str, model_section: dict[str, Any] | None = None, flag: str = "--config.init_from"
) -> TransformerConfig:
    """The directory's TransformerConfig with the run's FINE_TUNING_FIELDS from
    ``model_section`` (a run config's model section; None keeps the directory's value);
    UserError for a shape field there that contradicts the directory."""
    directory = check_directory(path, flag)
    config, _ = read_config(directory / "config.json")
    if not model_section:
        return config
    changes = {}
    for key, value in model_section.items():
        if key in FINE_TUNING_FIELDS:
            if value is not None:  # None: the directory's value
                changes[key] = value
        elif not hasattr(config, key):
            raise UserError(f"--config.model.{key}: not a field of the translation model")
        elif value is not None and value != getattr(config, key):
            raise UserError(
                f"--config.model.{key}={value!r} contradicts {flag}={path}, whose "
                f"config.json gives {key}={getattr(config, key)!r}; leave it unset "
                "(configs/marian_finetune.py does): the model comes from the directory"
            )
    try:
        return config.replace(**changes)
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from None


def pretrained_params(path: str, model_config: TransformerConfig) -> Any:
    """The directory's parameters (numpy) in the layout of ``model_config``: one subtree per
    layer, or stacked when it scans its layers."""
    _, params = from_huggingface(path)
    return arrange_layers(params, model_config.scan_layers)


def fine_tuning_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A run config with ``init_from`` = a Marian directory: its tokenizer is the
    directory's (data.tokenizer), its model section the directory's model with the run's
    fine-tuning fields."""
    path = config.init_from
    tokenizer = config.data.get("tokenizer", "sentencepiece")
    if tokenizer not in ("sentencepiece", path):
        raise UserError(
            f"--config.data.tokenizer={tokenizer}: a run that starts from "
            f"--config.init_from={path} uses that directory's tokenizer; leave it unset"
        )
    if config.data.get("target_tokenizer"):
        raise UserError(
            "--config.data.target_tokenizer: a run that starts from --config.init_from uses "
            "that directory's tokenizer; leave it unset"
        )
    model_config = pretrained_model_config(path, config.model.to_dict())
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.data.tokenizer = path
    resolved.data.shared_vocab = model_config.share_embeddings
    resolved.model = model_fields(model_config)
    return resolved


def model_fields(model_config: TransformerConfig) -> dict[str, Any]:
    """A TransformerConfig as a run config's model section (decode is not a run setting)."""
    fields = dict(vars(model_config))
    fields.pop("decode", None)
    return fields
