"""A workdir's config.json checked when the workdir is loaded (evaluate.py, Translator,
export), before anything is built of its values.

    check_saved_run_config(config, shape_fields, path)

A field of a known section (run_config.task_sections) or of the top level whose value is
of another JSON type than the field's (``"d_model": "512"``, ``"num_heads": 8.5``, an array
for a whole number, null) is one line naming the file, the field, the value and the type
expected. So are the values of the right type that a restored run reads and that would
fail later, where the file is no longer known: a size below its least (LEAST_VALUES, and
any other whole number of the data section below 0: sizes, counts and seeds), a name that is
not a choice, a data file name of no known type; and a model section without one of the
task's shape fields (every version wrote them: they are the checkpoints' shapes).
"""

from typing import Any

import ml_collections

from jaxtrans.config_sections import field_types, type_mismatch
from jaxtrans.data.translation.text_files import line_format_for
from jaxtrans.errors import UserError
from jaxtrans.inference.options import PENALTY_FORMS
from jaxtrans.tasks.run_config import task_sections

# Fields outside the sections, and their types.
TOP_LEVEL_TYPES = {"seed": int, "init_from": str}
# The least value of the numbers a restored run reads, by section (where the section has
# the field): decoding needs a beam, a batch and room for one token, and a pair two tokens.
LEAST_VALUES = {
    # data.workers: -1 means one worker process a core.
    "data": {"max_source_length": 2, "max_target_length": 2, "workers": -1},
    "eval": {
        "beam_size": 1,
        "batch_size": 1,
        "max_extra_length": 1,
        "alpha": 0,
        "no_repeat_ngram_size": 0,
    },
}
# The names a restored translation run reads, and their choices.
CHOICES = {"eval": {"penalty_form": PENALTY_FORMS}}
# Data fields naming local files (comma-separated), read when data.tfds_name is unset.
FILE_FIELDS = ("train", "dev", "test")
RESTORE = "restore the file or use another workdir"


def check_saved_run_config(
    config: ml_collections.ConfigDict, shape_fields: tuple[str, ...], path: str
) -> None:
    """UserError naming ``path`` (the config.json ``config`` was read from, completed by
    run_config.complete_run_config) for the first field of the wrong type or value, or a
    missing shape field; see the module doc."""
    task = config.get("task", "translation")
    sections = {
        name: config[name]
        for name in task_sections(task)
        if isinstance(config.get(name), ml_collections.ConfigDict)
    }
    problem = (
        _type_problem(config, sections, task)
        or _value_problem(sections, task)
        or _shape_problem(config, shape_fields)
    )
    if problem:
        raise UserError(f"{path}: {problem}; {RESTORE}")


def _type_problem(config, sections: dict[str, Any], task: str) -> str | None:
    """``section.key=VALUE is a string; expected a whole number`` for the first field whose
    value is not of its type, or None."""
    specs = task_sections(task)
    for name, section in sections.items():
        types = field_types(specs[name])
        for key, value in section.items():
            if key in types and (problem := type_mismatch(f"{name}.{key}", value, types[key])):
                return problem
    for key, expected in TOP_LEVEL_TYPES.items():
        if key in config and (problem := type_mismatch(key, config[key], expected)):
            return problem
    return None


def _value_problem(sections: dict[str, Any], task: str) -> str | None:
    """The first value of the right type that the restored run cannot use, or None."""
    data = sections.get("data", {})
    for key, value in data.items():
        least = LEAST_VALUES["data"].get(key, 0)
        if isinstance(value, int) and not isinstance(value, bool) and value < min(least, 0):
            return f"data.{key}={value}: a size, count or seed, not below {min(least, 0)}"
    for name, least in LEAST_VALUES.items():
        for key, bound in least.items():
            value = sections.get(name, {}).get(key)
            if isinstance(value, int | float) and value < bound:
                return f"{name}.{key}={value}: use a value >= {bound}"
    if task != "translation":
        return None
    for name, choices in CHOICES.items():
        for key, allowed in choices.items():
            value = sections.get(name, {}).get(key)
            if value is not None and value not in allowed:
                return f"{name}.{key}={value!r}: use one of {', '.join(allowed)}"
    if not data.get("tfds_name"):
        for key in FILE_FIELDS:
            for name in filter(None, str(data.get(key, "")).split(",")):
                try:
                    line_format_for(name, data)
                except UserError as error:
                    return f"data.{key}: {error}"
    return None


def _shape_problem(config, shape_fields: tuple[str, ...]) -> str | None:
    missing = [key for key in shape_fields if key not in config.model]
    if missing:
        return f"the model section has no {missing[0]}, a shape of the checkpoints"
    return None
