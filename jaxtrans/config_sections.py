"""Run config sections made from frozen dataclasses, and sections filled in from them.

The dataclasses (``jaxtrans.nn.BlockConfig``, ``jaxtrans.models.TransformerConfig``,
``jaxtrans.models.bert.bert_model.BertConfig``, and the run sections of
``jaxtrans.training.run_sections`` and ``jaxtrans.tasks.translation.eval_section``) are the
one place a field's name, default and description live; a config takes its sections from
them and writes down only the values that differ (docs/generate_configuration.py shows
each field's comment from the dataclass).

    dataclass_section(cls, ...)     a ConfigDict of cls's fields and defaults
    complete_section(section, cls)  the fields a section lacks, added with their defaults
    section_values(cls, section)    cls built from a section's values (its checks run)
"""

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import ml_collections


def dataclass_section(
    cls: type,
    *,
    exclude: Iterable[str] = (),
    only: Iterable[str] | None = None,
    **overrides,
) -> ml_collections.ConfigDict:
    """The fields of dataclass ``cls`` with their defaults, in its field order.

    exclude: fields left out (e.g. those filled in from the tokenizer at run time).
    only: if given, the fields kept (all others left out).
    overrides: field=value for the defaults this section changes; the values are checked
    by building ``cls(**overrides)``.

    Raises ValueError for a name that is not a field of ``cls``, or an override of a field
    the section leaves out.
    """
    exclude, only = set(exclude), None if only is None else set(only)
    names = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted((exclude | (only or set()) | set(overrides)) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}; its fields: {names}")
    kept = [name for name in names if name not in exclude and (only is None or name in only)]
    left_out = sorted(set(overrides) - set(kept))
    if left_out:
        raise ValueError(f"overrides of fields the section leaves out: {left_out}")
    values = dataclasses.asdict(cls(**overrides))
    section = ml_collections.ConfigDict()
    for name in kept:
        section[name] = values[name]
    return section


def complete_section(section: ml_collections.ConfigDict, cls: type) -> list[str]:
    """Add to ``section``, in place, each field of dataclass ``cls`` it lacks, with the
    field's default (e.g. the fields a config.json written by an older version lacks);
    the names added, in field order. Fields ``section`` has are left as they are."""
    defaults = dataclasses.asdict(cls())
    added = [name for name in defaults if name not in section]
    with section.unlocked():
        for name in added:
            section[name] = defaults[name]
    return added


def section_values(cls: type, section: Mapping[str, Any] | None) -> Any:
    """``cls`` built from the values of ``section`` (a ConfigDict or a dict; None: all
    defaults): a field the section lacks takes its default, a key that is no field of
    ``cls`` is ignored. ``cls.__post_init__`` checks the values."""
    names = {field.name for field in dataclasses.fields(cls)}
    given = {} if section is None else dict(section.items())
    return cls(**{name: value for name, value in given.items() if name in names})
