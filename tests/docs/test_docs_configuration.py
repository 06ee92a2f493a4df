"""docs/configuration.md lists every key of every config in configs/*.py, and no other,
with the config's own value and a description; its tables are what the generator writes."""

import ast
import glob
import importlib
import importlib.util
import inspect
import os
import re
import sys

import ml_collections
import pytest
from paths import REPO

from jaxtrans.models import BertConfig, TransformerConfig

REFERENCE = os.path.join(REPO, "docs", "configuration.md")


def config_names() -> list[str]:
    return sorted(
        os.path.basename(p)[:-3]
        for p in glob.glob(os.path.join(REPO, "configs", "*.py"))
        if not os.path.basename(p).startswith("_")
    )


def load_config(name: str) -> ml_collections.ConfigDict:
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    return importlib.import_module(f"configs.{name}").get_config()


def flatten(config: ml_collections.ConfigDict, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def documented() -> dict[str, dict[str, tuple[str, str]]]:
    """{config name: {key: (value cell, description)}} read from the reference's tables,
    whose header is | key | <config names> | what it does |."""
    with open(REFERENCE, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found: dict[str, dict[str, tuple[str, str]]] = {}
    columns: list[str] = []
    split = lambda line: [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]  # noqa: E731
    for line in lines:
        if line.startswith("| key |"):
            columns = split(line)[1:-1]
        elif line.startswith("| `") and columns:
            cells = split(line)
            key = cells[0].strip("`")
            for name, value in zip(columns, cells[1:-1], strict=True):
                entries = found.setdefault(name, {})
                assert key not in entries, f"{name}: {key} listed twice"
                entries[key] = (value, cells[-1])
        elif not line.startswith("|"):
            columns = []
    return found


def test_reference_covers_exactly_the_config_files():
    assert sorted(documented()) == config_names()


@pytest.mark.parametrize("name", config_names())
def test_reference_lists_every_key_of_the_config_and_no_other(name):
    keys = set(flatten(load_config(name)))
    listed = set(documented().get(name, {}))
    assert not keys - listed, f"configs/{name}.py keys missing from docs/configuration.md"
    assert not listed - keys, f"docs/configuration.md lists keys configs/{name}.py lacks"


@pytest.mark.parametrize("name", config_names())
def test_reference_values_are_the_config_defaults(name):
    config = flatten(load_config(name))
    for key, (cell, _) in documented()[name].items():
        value = ast.literal_eval(cell.strip("`").replace("\\|", "|"))
        expected = config[key]
        assert type(value) is type(expected) and value == expected, (name, key, cell)


def test_every_key_has_a_description():
    missing = sorted(
        f"{name}: {key}"
        for name, entries in documented().items()
        for key, (_, text) in entries.items()
        if not text
    )
    assert not missing, f"write a comment above these fields in the config code: {missing}"


def test_reference_tables_are_up_to_date_with_the_config_comments():
    spec = importlib.util.spec_from_file_location(
        "generate_configuration", os.path.join(REPO, "docs", "generate_configuration.py")
    )
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.main(["generate_configuration.py", "--check"]) == 0, (
        "docs/configuration.md is out of date: run python docs/generate_configuration.py"
    )


def field_comment(cls: type, name: str) -> str:
    """The comment lines right above ``name: ...`` in the first class of ``cls``'s
    hierarchy that declares the field, joined."""
    declaring = next(k for k in reversed(cls.__mro__) if name in inspect.get_annotations(k))
    lines = inspect.getsource(declaring).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name}:"))
    above = []
    while lines[at - 1].strip().startswith("#"):
        at -= 1
        above.insert(0, lines[at].strip().lstrip("#").strip())
    return " ".join(above)


@pytest.mark.parametrize(
    "name, model_class",
    [("base", TransformerConfig), ("bert_base", BertConfig), ("bert_classify", BertConfig)],
)
def test_model_fields_are_described_by_the_comment_in_their_dataclass(name, model_class):
    entries = documented()[name]
    for key in flatten(load_config(name).model):
        comment = field_comment(model_class, key)
        assert comment, f"{model_class.__name__}.{key} has no comment above it"
        description = entries[f"model.{key}"][1].replace("\\|", "|")
        assert description.startswith(comment), (name, key, description, comment)
