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
    field_types(spec)               field -> type, of a dataclass or a ConfigDict of defaults
    type_mismatch(key, value, t)    "key=VALUE is a string; expected a whole number", or None

Types are checked before values: a config.json field of the wrong JSON type (``"512"``
for a whole number, ``8.5`` for one, an array, null) is one line naming the field, the
value and the type expected, not a failure deep inside JAX. Whether a value of the right
type is allowed (a rate in [0, 1), a name among choices) is the dataclass's own check.
"""

import dataclasses
import json
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import ml_collections

from jaxtrans.errors import json_type


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


def complete_section(section: ml_collections.ConfigDict, cls: Any) -> list[str]:
    """Add to ``section``, in place, each field of dataclass ``cls`` (or of a ConfigDict of
    defaults) it lacks, with the field's default (e.g. the fields a config.json written by
    an older version lacks); the names added, in field order. Fields ``section`` has are
    left as they are."""
    defaults = dataclasses.asdict(cls()) if dataclasses.is_dataclass(cls) else cls.to_dict()
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


def field_types(spec: Any) -> dict[str, Any]:
    """field -> expected type of ``spec``: a dataclass (its annotations), or a ConfigDict of
    defaults (each default's type; a default of None says nothing: Any)."""
    if dataclasses.is_dataclass(spec):
        return typing.get_type_hints(spec)
    return {key: Any if value is None else type(value) for key, value in spec.items()}


def fits(value: Any, expected: Any) -> bool:
    """Whether a JSON value is of type ``expected``: an int is a number, a bool is not; a
    Literal asks for its values' type (which value, the dataclass checks); a type this
    does not know fits anything."""
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, option) for option in typing.get_args(expected))
    if origin is typing.Literal:
        return any(fits(value, type(choice)) for choice in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if expected in (int, float):
        allowed = int if expected is int else int | float
        return isinstance(value, allowed) and not isinstance(value, bool)
    if expected in (bool, str):
        return isinstance(value, expected)
    return True


def type_name(expected: Any) -> str:
    """How an error names a type: "a whole number", "a string or null", ..."""
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(option) for option in typing.get_args(expected))
    if origin is typing.Literal:
        return " or ".join(dict.fromkeys(type_name(type(c)) for c in typing.get_args(expected)))
    names = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}
    return names.get(expected, "null" if expected is type(None) else str(expected))


def type_mismatch(key: str, value: Any, expected: Any) -> str | None:
    """None when ``value`` fits ``expected``; else ``key=VALUE is a string; expected a
    whole number`` (VALUE as JSON writes it)."""
    if fits(value, expected):
        return None
    if isinstance(value, ml_collections.ConfigDict):  # a JSON object, as a config holds it
        value = value.to_dict()
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    return f"{key}={shown} is {json_type(value)}; expected {type_name(expected)}"
