"""Where a translation model comes from when it is not trained from nothing: a Hugging Face
Marian directory (opus-mt), asked as it is (evaluate.py --init_from DIR, Translator.load)
or fine-tuned (``--config.init_from=DIR``).

The directory decides the model's shape and its tokenizer: config.json gives the
TransformerConfig (jaxtrans.models.marian.marian_config), source.spm / target.spm / vocab.json
the tokenizer (copied into the workdir, jaxtrans.data.tokenizers.marian_tokenizer); the two
must number every token of both sides alike (check_token_ids), or the directory is refused.
A run config may change only what fine-tuning may change (FINE_TUNING_FIELDS); its other
model fields are best left None (configs/marian_finetune.py: placeholders), and one set to
another value than the directory's is refused, naming both values.
"""

from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from jaxtrans.data.tokenizers.marian_tokenizer import (
    EOS_PIECE,
    PAD_PIECE,
    TARGET_VOCAB_FILE,
    VOCAB_FILE,
    MarianVocabulary,
    is_marian_directory,
    read_marian,
)
from jaxtrans.errors import UserError
from jaxtrans.models import TransformerConfig
from jaxtrans.models.layer_stacks import arrange_layers
from jaxtrans.models.marian.marian_config import read_config
from jaxtrans.models.marian.marian_from_huggingface import (
    directory_start_embedding,
    from_huggingface,
    marian_to_model_ids,
)
from jaxtrans.workdirs.workdir import huggingface_model_type

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
    config, contents = read_config(directory / "config.json")
    check_token_ids(directory, contents, config)
    config = config.replace(decoder_start_embedding=directory_start_embedding(directory, contents))
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


def check_token_ids(directory: Path, contents: dict[str, Any], config: TransformerConfig) -> None:
    """UserError, naming the files and ids, unless the directory's tokenizer numbers every
    token of each side as its weights are numbered.

    The weights are loaded by config.json (``vocab_size``, ``decoder_vocab_size``, one
    ``pad_token_id`` and ``eos_token_id`` for both sides: marian_to_model_ids), the text by
    vocab.json and, with separate vocabularies, target_vocab.json (each side by its own
    ``<pad>`` and ``</s>``). They agree on every id when each vocabulary has the size
    config.json gives its side and holds ``<pad>`` and ``</s>`` at config.json's ids;
    separate vocabularies of different sizes can, with ``<pad>`` at one id in both.
    ``contents``: config.json as read; ``config``: the TransformerConfig made of it."""
    tokenizer = read_marian(str(directory))
    target_key = "decoder_vocab_size" if contents.get("decoder_vocab_size") else "vocab_size"
    target_file = VOCAB_FILE if tokenizer.shared else TARGET_VOCAB_FILE
    sides = (
        ("source", tokenizer.source_vocabulary, VOCAB_FILE, "vocab_size", config.vocab_size),
        ("target", tokenizer.target_vocabulary, target_file, target_key, config.output_vocab_size),
    )
    for side, vocabulary, name, size_key, model_size in sides:
        # The model has one id more than the vocabulary: the start token.
        files = (directory / name, directory / "config.json")
        problem = _numbering_problem(vocabulary, files, size_key, model_size - 1, contents)
        if problem:
            raise UserError(
                f"{problem}: the tokenizer would number the {side} side's tokens otherwise "
                "than the weights"
            )


def _numbering_problem(
    vocabulary: MarianVocabulary,
    files: tuple[Path, Path],
    size_key: str,
    size: int,
    contents: dict[str, Any],
) -> str | None:
    """How ``vocabulary`` (read from files[0]) differs from what config.json (files[1],
    ``contents``) says of its side: its size (``size_key``: ``size``), its pad and eos ids,
    and so any id (marian_to_model_ids); None when they agree."""
    path, config_file = files
    pieces = vocabulary.pieces
    if len(pieces) != size:
        return f"{path} holds {len(pieces)} pieces but {config_file} has {size_key}={size}"
    for piece, key in ((PAD_PIECE, "pad_token_id"), (EOS_PIECE, "eos_token_id")):
        if pieces[piece] != contents[key]:
            return (
                f"{path} has {piece} at id {pieces[piece]} but {config_file} has "
                f"{key}={contents[key]} (one id for both sides)"
            )
    loaded = marian_to_model_ids(size, contents["pad_token_id"], contents["eos_token_id"])
    differ = np.flatnonzero(vocabulary.to_model != loaded)
    if differ.size:  # what the checks above imply, checked whole
        return f"{path} and {config_file} number the token {int(differ[0])} differently"
    return None


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
    tokenizer = config.data.tokenizer
    if tokenizer not in ("sentencepiece", path):
        raise UserError(
            f"--config.data.tokenizer={tokenizer}: a run that starts from "
            f"--config.init_from={path} uses that directory's tokenizer; leave it unset"
        )
    if config.data.target_tokenizer:
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
