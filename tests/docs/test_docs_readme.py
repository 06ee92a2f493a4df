"""The README and docs say what the code does: the Quick start is what CI runs, links and
config keys they name exist, every config and package is on the map."""

import glob
import json
import os
import re
import sys

import ml_collections
import pytest
from paths import REPO

DEMO_COMMAND = (
    "pip install -c constraints.txt -e . && python train.py --config configs/demo.py "
    "--workdir runs/demo && python evaluate.py --workdir runs/demo"
)


def read(path: str) -> str:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


README = read("README.md")


def section(title: str) -> str:
    """The README text under '## title', up to the next '## ' heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)


def quick_start_commands() -> list[str]:
    return [block.strip() for block in code_blocks(section("Quick start"))]


def test_quick_start_has_exactly_two_one_line_commands():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in command for command in commands)


def test_first_quick_start_command_installs_then_trains_and_evaluates_the_demo():
    assert quick_start_commands()[0] == DEMO_COMMAND


def test_second_quick_start_command_is_what_ci_runs():
    ci_lines = [
        line.strip()
        for line in read(".ci/run").splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    assert ci_lines == [quick_start_commands()[1]]
    assert (
        quick_start_commands()[1]
        == 'pip install -c constraints.txt -e ".[test]" && python -m pytest'
    )


def test_install_covers_cpu_gpu_and_tpu():
    install = section("Install")
    assert "pip install -c constraints.txt -e ." in install
    assert 'pip install -c constraints.txt -e ".[cuda12]"' in install
    assert 'pip install -c constraints.txt -e ".[tpu]"' in install
    assert "pip install -U" not in install  # an upgrade would leave the pins


def test_readme_says_plainly_that_configs_are_code_to_trust():
    assert "only load configs you trust" in section("Train")


def test_every_config_file_is_listed_in_the_readme():
    train = section("Train")
    for path in sorted(glob.glob(os.path.join(REPO, "configs", "*.py"))):
        name = os.path.basename(path)
        if not name.startswith("_"):
            assert f"`configs/{name}`" in train, f"README's config table lacks configs/{name}"


def test_map_of_the_code_names_every_package_and_top_level_module():
    code_map = section("Map of the code")
    for path in sorted(glob.glob(os.path.join(REPO, "jaxtrans", "*"))):
        name = os.path.basename(path)
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            assert f"`jaxtrans/{name}/`" in code_map, f"map lacks jaxtrans/{name}/"
        elif name.endswith(".py") and name != "__init__.py":
            assert f"`jaxtrans/{name}`" in code_map, f"map lacks jaxtrans/{name}"
    for folder in ("configs", "tests", "benchmarks", "docs", "notebooks"):
        assert f"`{folder}/`" in code_map


# Documents other work is still writing: a link to one is allowed while it does not exist.
PENDING = {"docs/reliability.md"}


def documents() -> list[str]:
    """README.md and docs/*.md, relative to the repository."""
    return ["README.md"] + sorted(
        os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md"))
    )


@pytest.mark.parametrize("document", documents())
def test_relative_links_point_to_existing_files(document):
    text = read(document)
    base = os.path.dirname(os.path.join(REPO, document))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.normpath(os.path.join(base, target.split("#")[0]))
        if os.path.relpath(path, REPO) in PENDING and not os.path.exists(path):
            continue
        assert os.path.exists(path), f"{document} links to {target}, which does not exist"


def all_config_keys() -> set[str]:
    """Dotted keys of every config in configs/*.py."""
    sys.path.insert(0, REPO)
    import importlib

    keys: set[str] = set()

    def walk(config: ml_collections.ConfigDict, prefix: str) -> None:
        for key, value in config.items():
            keys.add(prefix + key)
            if isinstance(value, ml_collections.ConfigDict):
                walk(value, f"{prefix}{key}.")

    for path in glob.glob(os.path.join(REPO, "configs", "*.py")):
        name = os.path.basename(path)[:-3]
        if not name.startswith("_"):
            walk(importlib.import_module(f"configs.{name}").get_config(), "")
    return keys


def test_config_overrides_named_in_readme_docs_and_notebook_exist():
    notebook = json.loads(read("notebooks/colab_tpu.ipynb"))
    texts = {d: read(d) for d in documents()}
    texts["notebooks/colab_tpu.ipynb"] = "\n".join("".join(c["source"]) for c in notebook["cells"])
    keys = all_config_keys()
    unknown = {
        f"{name}: --config.{key}"
        for name, text in texts.items()
        for key in re.findall(r"--config\.([a-z_][a-z0-9_.]*[a-z0-9_])", text)
        if key not in keys
    }
    assert not unknown, f"no config has these keys: {sorted(unknown)}"
