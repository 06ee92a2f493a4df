"""docs/architecture.md's map of the folders names every module of jaxtrans, and only
files that exist."""

import glob
import os
import re

from paths import REPO


def mapped_files() -> set[str]:
    """Paths named in the first code block of docs/architecture.md: ``jaxtrans/pkg/`` lines
    open a package, an indented ``name/`` line a folder inside it (two more spaces of
    indent per level), and a bare ``name.py`` on the lines below belongs to the innermost."""
    with open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8") as f:
        block = re.search(r"^```\n(.*?)^```", f.read(), re.M | re.S).group(1)
    found: set[str] = set()
    folders: list[str] = []  # the open folders, outermost first
    for line in block.splitlines():
        opened = re.match(r"(jaxtrans/\w+/)", line)
        if opened:
            folders = [opened.group(1)]
            continue  # the package's own line describes it; its files follow
        if not line.startswith(" "):
            folders = []  # a top-level entry ends the package
        depth = (len(line) - len(line.lstrip())) // 2  # 1: in the package, 2: in a folder
        if folders and depth:
            del folders[depth:]  # a line less indented closes the folders below it
            sub = re.match(r"\s+(\w+)/\s", line)
            if sub:
                folders.append(folders[-1] + sub.group(1) + "/")
                continue
        package = folders[-1] if folders else ""
        for name in re.findall(r"[\w/.]*\w\.(?:py|ipynb)\b", line):
            found.add(name if "/" in name else package + name)
    return found


def test_every_module_of_jaxtrans_is_on_the_map():
    modules = {
        os.path.relpath(path, REPO)
        for path in glob.glob(os.path.join(REPO, "jaxtrans", "**", "*.py"), recursive=True)
        if os.path.basename(path) != "__init__.py"
    }
    missing = sorted(modules - mapped_files())
    assert not missing, f"add a line for each to docs/architecture.md: {missing}"


def test_every_file_on_the_map_exists():
    stale = sorted(p for p in mapped_files() if not os.path.exists(os.path.join(REPO, p)))
    assert not stale, f"docs/architecture.md names files that do not exist: {stale}"
