"""Shipped configs by name: ``--config demo`` is the config file configs/demo.py.

The files of ``configs/`` travel in the wheel as the package ``jaxtrans.shipped_configs``
(pyproject.toml maps the folder onto it); in a checkout they are ``configs/`` beside the
package. A bare name (no ``/``, not ending in ``.py``) names one of them; anything else is
a path, as before.

    shipped_config_dir()       the folder the shipped config files are in (None: none)
    shipped_config_names()     their names: base, demo, bert_demo, ...
    resolve_config_arg(argv)   argv with a bare --config NAME replaced by its file's path
    allow_sibling_imports(p)   let config file ``p`` run ``from configs import base``
"""

import importlib
import importlib.util
import os
import sys

from jaxtrans.errors import UserError

PACKAGE = "jaxtrans.shipped_configs"


def shipped_config_dir() -> str | None:
    """The folder of the shipped config files: the package jaxtrans.shipped_configs of an
    installed wheel, else the checkout's configs/ beside jaxtrans/; None if neither."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = os.path.join(os.path.dirname(package), "configs")
    return folder if os.path.isfile(os.path.join(folder, "base.py")) else None


def shipped_config_names() -> list[str]:
    """The names of the shipped configs (the files' stems, private ``_*`` ones left out)."""
    folder = shipped_config_dir()
    if folder is None:
        return []
    return sorted(
        name[:-3]
        for name in os.listdir(folder)
        if name.endswith(".py") and not name.startswith("_")
    )


def is_config_name(value: str) -> bool:
    """Whether a --config value is a bare name (``demo``), not a path."""
    stem = value.split(":", 1)[0]
    return bool(stem) and "/" not in stem and os.sep not in stem and not stem.endswith(".py")


def shipped_config_path(name: str) -> str:
    """The file of shipped config ``name``; UserError listing the names if there is none."""
    names = shipped_config_names()
    if name not in names:
        raise UserError(
            f"--config {name}: no shipped config of that name; give a config file "
            f"(e.g. configs/demo.py) or one of {', '.join(names) or '(none installed)'}"
        )
    return os.path.join(shipped_config_dir(), f"{name}.py")


def resolve_config_name(value: str) -> str:
    """A --config value with a bare name replaced by its shipped file's path (an argument
    after ``:`` kept); paths, and a bare name that is an existing file, as given."""
    if not is_config_name(value):
        return value
    stem, colon, rest = value.partition(":")
    if stem not in shipped_config_names() and os.path.isfile(stem):
        return value
    return shipped_config_path(stem) + colon + rest


def resolve_config_arg(argv: list[str]) -> list[str]:
    """``argv`` with each --config NAME / --config=NAME given as a bare name replaced by
    the path of the shipped config file (before absl loads it); UserError for an unknown
    name."""
    resolved = list(argv)
    for i, arg in enumerate(resolved):
        if arg.startswith("--config="):
            resolved[i] = "--config=" + resolve_config_name(arg.split("=", 1)[1])
        elif arg == "--config" and i + 1 < len(resolved):
            resolved[i + 1] = resolve_config_name(resolved[i + 1])
    return resolved


def allow_sibling_imports(path: str) -> None:
    """Let the config file ``path`` import the configs beside it (``from configs import
    bert_base``): a file in a folder named configs/ finds them with the folder's parent
    on sys.path; a shipped config of a wheel (jaxtrans/shipped_configs/) with ``configs``
    standing for that package."""
    folder = os.path.dirname(os.path.abspath(path))
    shipped = shipped_config_dir()
    if shipped and os.path.basename(folder) != "configs" and os.path.samefile(folder, shipped):
        if "configs" not in sys.modules:
            sys.modules["configs"] = importlib.import_module(PACKAGE)
        return
    root = os.path.dirname(folder)
    if root not in sys.path:
        sys.path.insert(0, root)
