"""A trained BERT workdir -> a Hugging Face model directory (``python -m jaxtrans.export``).

    tasks.export_workdir("runs/sst2", "exported/sst2", checkpoint="latest")  # -> export_bert

writes, all at once or not at all (a scratch directory renamed into place),

    config.json         model_type bert, architectures [the task's huggingface_architectures[0]],
                        the shapes, hidden_act, dropout rates, layer_norm_eps, pad_token_id,
                        id2label / label2id for a classifier head (models/bert/)
    model.safetensors   the checkpoint's parameters under Hugging Face's names, float32
    tokenizer files     vocab.txt + tokenizer_config.json (WordPiece runs; the run's
                        tokenizer.json instead of vocab.txt when it started from a directory
                        saved by transformers 5) or tokenizer.json + tokenizer_config.json
                        (SentencePiece runs; data/tokenizers/huggingface_tokenizer_files.py)

so that ``transformers.AutoModel*.from_pretrained`` and ``AutoTokenizer.from_pretrained``
load it, and ``jaxtrans.models.bert.bert_from_huggingface.from_huggingface`` gives the checkpoint's
parameters back. Generic over the BERT tasks: the head comes with the task's model
(pretraining: masked LM + next sentence; classification: pooled classifier; token
classification: classifier on every token; question answering: qa_outputs).
"""

import json
from pathlib import Path
from typing import Any

import jax
from safetensors.numpy import save_file

from jaxtrans.data.tokenizers.huggingface_tokenizer_files import write_huggingface_tokenizer
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.bert.bert_to_huggingface import huggingface_config, to_state_dict
from jaxtrans.tasks.base import Task
from jaxtrans.tasks.bert import bert_init
from jaxtrans.tasks.export_directory import written_whole

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def run_labels(task: Task, params: dict[str, Any]) -> list[str] | None:
    """The label names of a classifier head (``data.labels`` of the run, comma-joined), or
    None when the model has no classifier or the run names no labels of the right number."""
    if "classifier" not in params:
        return None
    labels = [x for x in task.config.data.labels.split(",") if x]
    return labels if len(labels) == task.model_config.num_labels else None


def write_model_files(
    directory: Path,
    params: dict[str, Any],
    cfg: BertConfig,
    architecture: str,
    labels: list[str] | None = None,
) -> None:
    """config.json and model.safetensors of ``params`` (a BERT model's, heads included)."""
    config = huggingface_config(cfg, architecture, labels)
    state = to_state_dict(params, cfg)
    (directory / CONFIG_FILE).write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})


def export_notes(cfg: BertConfig) -> list[str]:
    """Settings of the run that only training uses and Hugging Face BERT has no field for."""
    if cfg.activation_dropout_rate:
        return [
            f"note: model.activation_dropout_rate={cfg.activation_dropout_rate} has no Hugging "
            "Face BERT field and is left out (it only matters when training further)"
        ]
    return []


def export_bert(task: Task, target: Path, checkpoint: str = "latest") -> str:
    """Write the Hugging Face directory ``target`` (new or empty, checked by the caller) of
    a BERT task's ``checkpoint`` (``latest``, a step, or ``avg:K``); returns what was
    written, in words. UserError (nothing written) for a model setting Hugging Face BERT
    cannot express."""
    architectures = task.huggingface_architectures
    cfg = task.model_config
    abstract = jax.eval_shape(lambda: task.init_params(jax.random.key(0)))
    labels = run_labels(task, abstract)
    huggingface_config(cfg, architectures[0], labels)  # a setting HF lacks: fail before reading
    restored = task.restore_params(checkpoint)
    params = jax.tree.map(lambda x: jax.device_get(x), restored.params)
    notes = export_notes(cfg)
    with written_whole(target) as scratch:
        write_model_files(scratch, params, cfg, architectures[0], labels)
        notes += write_huggingface_tokenizer(
            bert_init.tokenizer_dir(task.workdir), scratch, cfg.max_len
        )
    for note in notes:
        print(note)
    return f"{architectures[0]}, {restored.description} of {task.workdir}"
