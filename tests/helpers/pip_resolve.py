"""What a documented ``pip install`` command would install, asked of the package index
without installing anything (``pip install --dry-run --ignore-installed --report``), run
from a copy of the checkout's packaging files so that pip's metadata build writes nothing
into the checkout.

pins              constraints.txt as {canonical name: version}
index_unreachable why pip cannot reach its package index here, or None
start_resolving   a command with --dry-run added, started in the background
resolved          {canonical name: version} of the packages it would install
"""

import json
import os
import shlex
import shutil
import subprocess
import sys

from packaging.utils import canonicalize_name
from paths import REPO

# What pip needs to build jaxtrans's metadata (setuptools lists the packages).
PACKAGING_FILES = ("pyproject.toml", "README.md", "constraints.txt")
PACKAGE_DIRS = ("jaxtrans", "configs")


def pins() -> dict[str, str]:
    """constraints.txt as {canonical name: version}."""
    with open(os.path.join(REPO, "constraints.txt"), encoding="utf-8") as f:
        lines = [line.split("#")[0].strip() for line in f]
    pairs = [line.split("==") for line in lines if line]
    return {canonicalize_name(name): version for name, version in pairs}


def copy_checkout(directory: str) -> str:
    """The files ``pip install -e .`` reads, copied into ``directory``; returns it."""
    for name in PACKAGING_FILES:
        shutil.copy(os.path.join(REPO, name), directory)
    for name in PACKAGE_DIRS:
        shutil.copytree(
            os.path.join(REPO, name),
            os.path.join(directory, name),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return directory


def index_unreachable() -> str | None:
    """None where pip reaches its configured package index (asked for jax's versions),
    else the reason, pip's last line."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", "jax"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "pip index versions jax: no answer in 120 s"
    if out.returncode == 0 and "jax" in out.stdout:
        return None
    return "pip index versions jax: " + (out.stderr.strip().splitlines() or ["no output"])[-1]


def dry_run(command: str, report: str) -> list[str]:
    """``command`` (a documented ``pip install`` or ``python -m pip install``) as the argv
    of a dry run writing its report to ``report``: run by this Python, quietly, nothing
    installed, every package resolved as on a fresh machine."""
    argv = shlex.split(command)
    start = argv.index("install") + 1
    assert argv[start - 2 : start] == ["pip", "install"], command
    options = ["--dry-run", "--ignore-installed", "--quiet", "--report", report]
    return [sys.executable, "-m", "pip", "install", *options, *argv[start:]]


def start_resolving(command: str, cwd: str, report: str) -> subprocess.Popen:
    """The dry run of ``command`` started in ``cwd`` (a checkout copy); wait on it."""
    return subprocess.Popen(
        dry_run(command, report),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def resolved(process: subprocess.Popen, report: str, timeout: float = 900) -> dict[str, str]:
    """{canonical name: version} of what the dry run would install (jaxtrans included)."""
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    with open(report, encoding="utf-8") as f:
        install = json.load(f)["install"]
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in install
    }
