"""A run config's section made from a frozen dataclass's defaults.

The model dataclasses (``jaxtrans.nn.BlockConfig``, ``jaxtrans.models.TransformerConfig``,
``jaxtrans.models.bert.bert_model.BertConfig``) are the one place a model field's name, default and
description live; a config file takes its ``model`` section from them and writes down only
the values that differ (docs/generate_configuration.py shows each field's comment from
the dataclass).
"""

import dataclasses
from collections.abc import Iterable

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
