"""Where a BERT run's tokenizer and starting weights come from.

Every BERT workdir keeps its tokenizer in ``WORKDIR/bert_tokenizer/``: ``spm.model`` (a
SentencePiece model jaxtrans trained on the pretraining text) or ``vocab.txt`` (or, from a
directory saved by transformers 5, ``tokenizer.json``) with ``tokenizer_config.json`` (the
WordPiece vocabulary of a Hugging Face checkpoint, copied there). A workdir therefore
evaluates and fine-tunes without the files it started from.

Fine-tuning starts from ``--config.init_from=PATH``, one of

- a jaxtrans BERT workdir (``config.json`` with ``task`` bert_pretraining or
  bert_classification, ``bert_tokenizer/``, ``checkpoints/``): the encoder of its latest
  checkpoint and its tokenizer;
- a Hugging Face BERT checkpoint directory (``config.json`` with ``model_type`` bert, the
  weights, ``vocab.txt`` or ``tokenizer.json``): its encoder and its WordPiece vocabulary.
"""

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.data.tokenizers.bert_tokenizer import (
    MODEL_FILE,
    TOKENIZER_DIR,
    BertTokenizer,
    SentencePieceBertTokenizer,
)
from jaxtrans.data.tokenizers.wordpiece import (
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    WordPieceTokenizer,
    vocabulary_file,
)
from jaxtrans.errors import UserError, describe, json_type
from jaxtrans.models.bert.bert_from_huggingface import (
    bert_config_from_huggingface,
    from_huggingface,
)
from jaxtrans.models.bert.bert_model import (
    BertConfig,
    BertForClassification,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForTokenClassification,
)
from jaxtrans.workdirs import checkpoint_choice, checkpoints
from jaxtrans.workdirs.workdir import new_directory

# The model of each BERT task's workdirs (whose encoder a new run can start from).
BERT_MODELS = {
    "bert_pretraining": BertForPretraining,
    "bert_classification": BertForClassification,
    "bert_token_classification": BertForTokenClassification,
    "bert_question_answering": BertForQuestionAnswering,
}
BERT_TASKS = tuple(BERT_MODELS)


def tokenizer_dir(workdir: str | Path) -> Path:
    return Path(workdir) / TOKENIZER_DIR


def has_run_tokenizer(workdir: str | Path) -> bool:
    directory = tokenizer_dir(workdir)
    return any((directory / name).is_file() for name in (MODEL_FILE, VOCAB_FILE, TOKENIZER_FILE))


def load_run_tokenizer(workdir: str | Path) -> BertTokenizer:
    """The tokenizer kept in ``WORKDIR/bert_tokenizer/`` (SentencePiece or WordPiece)."""
    directory = tokenizer_dir(workdir)
    if not has_run_tokenizer(workdir):
        raise UserError(
            f"{directory} holds none of {MODEL_FILE}, {VOCAB_FILE}, {TOKENIZER_FILE}; is {workdir} "
            "a BERT workdir?"
        )
    return load_tokenizer(directory)


def load_tokenizer(directory: Path) -> BertTokenizer:
    """The SentencePiece model or WordPiece vocabulary in ``directory``."""
    if (directory / MODEL_FILE).is_file():
        return SentencePieceBertTokenizer(directory / MODEL_FILE)
    return WordPieceTokenizer.from_huggingface(directory)


def install_tokenizer(files: list[Path], workdir: str | Path) -> BertTokenizer:
    """Copy tokenizer files into ``WORKDIR/bert_tokenizer/`` (atomically) and load them.
    They are loaded where they are first, so that damaged files are refused (UserError
    naming them) before anything is copied."""
    if not has_run_tokenizer(workdir):
        load_tokenizer(files[0].parent)
        complete = lambda path: has_run_tokenizer(os.path.dirname(path))  # noqa: E731
        with new_directory(str(workdir), TOKENIZER_DIR, complete) as scratch:
            for file in files:
                shutil.copyfile(file, os.path.join(scratch, file.name))
    return load_run_tokenizer(workdir)


def huggingface_tokenizer_files(directory: str | Path) -> list[Path]:
    """vocab.txt (else tokenizer.json, as transformers 5 saves it) and, when present,
    tokenizer_config.json of a checkpoint directory; UserError naming both without either."""
    directory = Path(directory)
    optional = directory / TOKENIZER_CONFIG_FILE
    return [vocabulary_file(directory)] + ([optional] if optional.is_file() else [])


@dataclasses.dataclass(frozen=True)
class InitSource:
    """A checkpoint to fine-tune from.

    config: the BertConfig it was trained with (its shapes are the fine-tuned model's).
    tokenizer_files: the files to copy into the new workdir's ``bert_tokenizer/``.
    """

    path: Path
    kind: Literal["jaxtrans", "huggingface"]
    config: BertConfig
    tokenizer_files: tuple[Path, ...]
    # For a jaxtrans workdir: the task it was trained with.
    task: str = ""

    def encoder_params(self) -> dict[str, Any]:
        """``{"bert": ...}``: embeddings, encoder and pooler as numpy float arrays."""
        if self.kind == "huggingface":
            return {"bert": from_huggingface(self.path).params["bert"]}
        model = BERT_MODELS[self.task](self.config)
        ids = jnp.ones((1, 2), jnp.int32)
        abstract = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(0), ids))["params"])
        params, _, _ = checkpoint_choice.restore_params(str(self.path), abstract, "latest")
        return {"bert": params["bert"]}


def _checkpoint_steps(workdir: Path) -> list[int]:
    directory = Path(checkpoints.checkpoint_dir(str(workdir)))
    if not directory.is_dir():
        return []
    return [int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()]


def init_source(path: str, flag: str = "--config.init_from") -> InitSource:
    """Inspect ``--config.init_from=PATH`` (reads config files only, not the weights);
    errors name ``flag``."""
    flag = f"{flag}={path}"
    help_ = "give a BERT pretraining workdir or a Hugging Face BERT checkpoint directory"
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise UserError(f"{flag}: no such directory; {help_}")
    config_file = directory / "config.json"
    try:
        saved = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{flag}: the directory holds no config.json; {help_}") from None
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(f"{flag}: {config_file} is not valid JSON ({describe(error)})") from None
    if not isinstance(saved, dict):
        raise UserError(f"{flag}: {config_file} holds {json_type(saved)}, not an object; {help_}")
    if "model_type" in saved:
        try:
            config = bert_config_from_huggingface(saved)
        except UserError as error:
            raise UserError(f"{flag}: {config_file}: {error}") from None
        return InitSource(
            path=directory,
            kind="huggingface",
            config=config,
            tokenizer_files=tuple(huggingface_tokenizer_files(directory)),
        )
    task = saved.get("task", "translation") if "model" in saved else None
    if task not in BERT_TASKS:
        kind = f"a {task} workdir" if task else "neither a jaxtrans workdir nor a checkpoint"
        raise UserError(f"{flag} is {kind}; {help_}")
    if not _checkpoint_steps(directory):
        raise UserError(f"{flag}: the workdir has no checkpoint yet; train it first")
    try:
        config = BertConfig.from_dict(saved["model"])
    except (ValueError, TypeError, AttributeError, ArithmeticError) as error:
        raise UserError(f"{flag}: {config_file}: model: {describe(error)}") from None
    files = sorted(p for p in tokenizer_dir(directory).glob("*") if p.is_file())
    if not has_run_tokenizer(directory):
        raise UserError(f"{flag}: the workdir has no {TOKENIZER_DIR}/ tokenizer")
    return InitSource(directory, "jaxtrans", config, tuple(files), task)
