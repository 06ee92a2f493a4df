"""Tasks: one module per kind of model and data, each a ``Task`` (base.py).

``config.task`` names the task of a run; this registry is the one place that maps it to
a class:

    translation          encoder-decoder Transformer on sentence pairs (translation/)
    bert_pretraining     BERT masked-LM + next-sentence pretraining (bert_pretraining.py)
    bert_classification  BERT fine-tuning for sequence classification (bert_classification.py)
    bert_token_classification  BERT fine-tuning for entity tags (bert_token_classification.py)
    bert_question_answering    BERT fine-tuning for answer spans (bert_question_answering.py)

Adding a task is one new module here plus one config: docs/architecture.md says how.

    train_and_evaluate(config, workdir)        what train.py runs
    evaluate_workdir(workdir, split=...)       what evaluate.py runs without --input
    restore_task(workdir)                      the task of a trained run, to ask directly
    compile_task(config)                       a run's task without data, to compile its step
    pretrained_task(name, path)                a task on a Hugging Face directory, untrained
    ensemble_task("DIR,DIR:CHECKPOINT,...")    translation models decoding together
    export_workdir(workdir, output, ...)       what python -m jaxtrans.export runs
"""

import importlib
from pathlib import Path
from typing import Any

import ml_collections

from jaxtrans.errors import UserError
from jaxtrans.tasks.base import Restored, Task
from jaxtrans.tasks.export_directory import check_output
from jaxtrans.tasks.run_config import complete_run_config
from jaxtrans.tasks.saved_run_config import check_saved_run_config
from jaxtrans.workdirs.workdir import config_path, huggingface_model_type, load_run_config

TASKS = {
    "translation": "jaxtrans.tasks.translation.translation_task:TranslationTask",
    "bert_pretraining": "jaxtrans.tasks.bert.bert_pretraining:BertPretrainingTask",
    "bert_classification": "jaxtrans.tasks.bert.bert_classification:BertClassificationTask",
    "bert_token_classification": (
        "jaxtrans.tasks.bert.bert_token_classification:BertTokenClassificationTask"
    ),
    "bert_question_answering": (
        "jaxtrans.tasks.bert.bert_question_answering:BertQuestionAnsweringTask"
    ),
}
# Config files written before ``task`` existed are translation runs.
DEFAULT_TASK = "translation"
# Hugging Face model types that serve one task, so that --init_from needs no --task.
PRETRAINED_TASKS = {"marian": "translation"}


def task_name(config: ml_collections.ConfigDict) -> str:
    return config.get("task", DEFAULT_TASK)


def task_class(name: str, where: str = "--config.task") -> type[Task]:
    """The Task class registered as ``name``; imported on first use."""
    if name not in TASKS:
        raise UserError(f"{where}={name!r} is not one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def load_task(config: ml_collections.ConfigDict, workdir: str) -> Task:
    """The task of a new or resumed training run (its tokenizer trained or loaded)."""
    return task_class(task_name(config)).from_config(config, workdir)


def compile_task(config: ml_collections.ConfigDict) -> Task:
    """The task of a run of ``config`` made without data, to compile its step ahead of
    time (python -m jaxtrans.compile)."""
    cls = task_class(task_name(config))
    if not hasattr(cls, "for_compiling"):
        able = [n for n in TASKS if hasattr(task_class(n), "for_compiling")]
        raise UserError(
            f"--config.task={task_name(config)}: its step cannot be compiled ahead of time "
            f"yet; {', '.join(able)} runs can"
        )
    return cls.for_compiling(config)


def restore_task(workdir: str) -> Task:
    """The task of a trained run: DIR/config.json says which; its tokenizer is DIR's own.
    The fields an older version did not write yet take their defaults, and a field of the
    wrong type is a UserError naming the file (run_config.py, saved_run_config.py)."""
    run_config = complete_run_config(load_run_config(workdir))
    cls = task_class(task_name(run_config), where=f"{workdir}/config.json: task")
    check_saved_run_config(run_config, cls.shape_fields, config_path(workdir))
    return cls.from_workdir(workdir, run_config)


def pretrained_task(
    name: str | None, path: str, config: ml_collections.ConfigDict | None = None
) -> Task:
    """Task ``name`` on the Hugging Face directory ``path`` as it is, with no training
    (evaluate.py --init_from PATH --task NAME); ``config``: an optional run config for its
    data and eval settings. ``name`` None: the task of the directory's model type (a
    Marian directory: translation; a BERT directory serves several tasks and needs one)."""
    able = [n for n in TASKS if hasattr(task_class(n), "from_pretrained")]
    if name is None:
        model_type = huggingface_model_type(path)
        name = PRETRAINED_TASKS.get(model_type or "")
        if name is None:
            kind = f"a {model_type} model" if model_type else "no Hugging Face model"
            raise UserError(
                f"--init_from {path} holds {kind}; give --task NAME, one of {', '.join(able)}"
            )
    cls = task_class(name, where="--task")
    if not hasattr(cls, "from_pretrained"):
        raise UserError(
            f"--task {name} cannot start from --init_from; use one of {', '.join(able)}"
        )
    return cls.from_pretrained(path, config)


def ensemble_task(members: str) -> Any:
    """The translation models ``members`` (comma-separated: DIR, DIR:CHECKPOINT or a Marian
    directory each) decoding together, asked as a task is (evaluate.py --ensemble;
    jaxtrans.tasks.translation.translation_ensemble)."""
    from jaxtrans.tasks.translation.translation_ensemble import TranslationEnsemble, member_specs

    return TranslationEnsemble.load(member_specs(members))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Train (or resume) the run of ``config`` in ``workdir``; the last logged metrics.
    The fields ``config``'s sections lack (a config.json of an older version) take their
    defaults first (run_config.complete_run_config), so that the run reads every field."""
    from jaxtrans.training import loop  # the training loop: not imported to decode or ask

    return loop.train_and_evaluate(complete_run_config(config), workdir, load_task)


def evaluate_workdir(
    workdir: str,
    *,
    split: str | None = None,
    checkpoint: str = "latest",
    outdir: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Score a split of a trained run (default: the task's first split) with a checkpoint
    (``latest``, a step or ``avg:K``), write the report and return it. ``options``: task
    settings such as beam_size, alpha, batch_size, max_extra_length for translation."""
    task = restore_task(workdir)
    return task.evaluate(
        split or task.splits[0], checkpoint=checkpoint, outdir=outdir, options=options
    )


def export_workdir(
    workdir: str, output: str, checkpoint: str = "latest", export_format: str = "huggingface"
) -> Path:
    """Write the model and tokenizer of ``workdir``'s ``checkpoint`` (latest, a step or
    avg:K) into the new directory ``output``, in ``export_format``: "huggingface", its
    task's Hugging Face format (translation: Marian; BERT: BERT), or "ctranslate2" (a
    translation run as a CTranslate2 model); returns its path. UserError, with nothing
    written, for an ``output`` that holds anything, a task that does not export (in that
    format) or a model setting the format cannot express."""
    target = Path(output).expanduser()
    check_output(target)
    task = restore_task(workdir)
    if not task.export_format:
        able = [n for n in TASKS if task_class(n).export_format]
        raise UserError(
            f"--workdir {workdir} is a {task.name} run, which does not export; "
            f"{', '.join(able)} runs do"
        )
    formats = {"huggingface": task.export_format, **task.other_export_formats}
    if export_format not in formats:
        raise UserError(
            f"--format {export_format}: a {task.name} run exports as {' or '.join(formats)}"
        )
    written = task.export(target, checkpoint, export_format)
    print(f"wrote {target} ({formats[export_format]}: {written})")
    return target


__all__ = [
    "TASKS",
    "Restored",
    "Task",
    "compile_task",
    "ensemble_task",
    "evaluate_workdir",
    "export_workdir",
    "load_task",
    "pretrained_task",
    "restore_task",
    "task_class",
    "train_and_evaluate",
]
