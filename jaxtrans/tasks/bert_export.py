"""A trained BERT workdir -> a Hugging Face model directory (``python -m jaxtrans.export``).

    export_workdir("runs/sst2", "exported/sst2", checkpoint="latest")

writes, all at once or not at all (a scratch directory renamed into place),

    config.json         model_type bert, architectures [the task's huggingface_architectures[0]],
                        the shapes, hidden_act, dropout rates, layer_norm_eps, pad_token_id,
                        id2label / label2id for a classifier head (models/huggingface_export.py)
    model.safetensors   the checkpoint's parameters under Hugging Face's names, float32
    tokenizer files     vocab.txt + tokenizer_config.json (WordPiece runs) or tokenizer.json
                        + tokenizer_config.json (SentencePiece runs; data/huggingface_tokenizer.py)

so that ``transformers.AutoModel*.from_pretrained`` and ``AutoTokenizer.from_pretrained``
load it, and ``jaxtrans.models.huggingface.from_huggingface`` gives the checkpoint's
parameters back. Generic over the BERT tasks: the head comes with the task's model
(pretraining: masked LM + next sentence; classification: pooled classifier; token
classification: classifier on every token; question answering: qa_outputs).
"""

import json
import os
from pathlib import Path
from typing import Any

import jax
from safetensors.numpy import save_file

from jaxtrans import tasks
from jaxtrans.data.huggingface_tokenizer import write_huggingface_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert import BertConfig
from jaxtrans.models.huggingface_export import huggingface_config, to_state_dict
from jaxtrans.tasks import bert_init
from jaxtrans.workdir import new_directory

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def check_output(output: Path) -> None:
    """UserError unless ``output`` is a new (or empty) directory: nothing is overwritten."""
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output} is a file; give a new directory")
    if output.is_dir() and any(output.iterdir()):
        raise UserError(
            f"--output {output} exists and is not empty; give a new directory (nothing is "
            "overwritten)"
        )


def run_labels(task: tasks.Task, params: dict[str, Any]) -> list[str] | None:
    """The label names of a classifier head (``data.labels`` of the run, comma-joined), or
    None when the model has no classifier or the run names no labels of the right number."""
    if "classifier" not in params:
        return None
    labels = [x for x in task.config.data.get("labels", "").split(",") if x]
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


def export_workdir(workdir: str, output: str, checkpoint: str = "latest") -> Path:
    """Write the Hugging Face directory ``output`` of ``workdir``'s ``checkpoint``
    (``latest``, a step, or ``avg:K``); returns its path. UserError (nothing written) for
    a workdir that is not a BERT run, a model setting Hugging Face BERT cannot express,
    or an ``output`` that exists and is not empty."""
    target = Path(output).expanduser()
    check_output(target)
    task = tasks.restore_task(workdir)
    architectures = getattr(task, "huggingface_architectures", ())
    if not architectures:
        raise UserError(
            f"--workdir {workdir} is a {task.name} workdir; only BERT runs export to Hugging Face"
        )
    cfg = task.model_config
    abstract = jax.eval_shape(lambda: task.init_params(jax.random.key(0)))
    labels = run_labels(task, abstract)
    huggingface_config(cfg, architectures[0], labels)  # a setting HF lacks: fail before reading
    restored = task.restore_params(checkpoint)
    params = jax.tree.map(lambda x: jax.device_get(x), restored.params)
    notes = export_notes(cfg)

    def complete(path: str) -> bool:
        return False  # someone else's directory appeared meanwhile: never take it as ours

    # An empty directory at ``target`` is replaced by the rename (rename(2) allows that).
    parent, name = os.path.split(os.path.abspath(target))
    with new_directory(parent, name, complete) as scratch:
        write_model_files(Path(scratch), params, cfg, architectures[0], labels)
        notes += write_huggingface_tokenizer(
            bert_init.tokenizer_dir(workdir), Path(scratch), cfg.max_len
        )
    for note in notes:
        print(note)
    print(f"wrote {target} ({architectures[0]}, {restored.description} of {workdir})")
    return target
