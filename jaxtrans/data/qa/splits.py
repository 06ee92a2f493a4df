"""The question-answering splits of a run: the ``data.qa_{split}`` SQuAD file, else the
built-in demo stories (demo.py); and the check that SQuAD 2.0 questions come with
``data.version_2_with_negative``."""

import ml_collections

from jaxtrans.data.qa.demo import demo_squad
from jaxtrans.data.qa.squad import QAExample, read_squad
from jaxtrans.errors import UserError

# Data config fields of the number of demo questions per split.
_DEMO_SIZES = {"train": "qa_demo_questions", "dev": "qa_demo_eval_questions"}


def read_split(data: ml_collections.ConfigDict, split: str) -> list[QAExample] | None:
    """The examples of "train", "dev" or "test": the ``qa_{split}`` file, else (when
    ``qa_train`` is empty) the demo corpus; None when the split has neither. ``data``: a
    question-answering run's data section, every field of qa_data_config.py in it (and
    demo_seed where the demo corpus is read)."""
    path = data[f"qa_{split}"] if split in ("train", "dev", "test") else ""
    if path:
        return read_squad(path)
    if data.qa_train or split not in ("train", "dev", "test"):
        return None
    size = data[_DEMO_SIZES.get(split, "qa_demo_eval_questions")]
    if not size:
        return None
    return demo_squad(
        size,
        data.demo_seed,
        split,
        data.qa_demo_unanswerable,
        data.qa_demo_name_questions,
        data.qa_demo_job_questions,
    )


def check_version(examples: list[QAExample], data: ml_collections.ConfigDict, split: str):
    impossible = next((e for e in examples if e.is_impossible), None)
    if impossible is not None and not data.version_2_with_negative:
        where = data[f"qa_{split}"] or "the demo corpus"
        raise UserError(
            f"{where} has unanswerable questions (is_impossible, id {impossible.id!r}); set "
            "--config.data.version_2_with_negative=True for SQuAD 2.0 data"
        )
