"""`pip install -e .` gives the console scripts the README names, and they are the programs
of train.py, evaluate.py and python -m jaxtrans.plot; the accelerator installs the README
and docs/accelerators.md give (the ``cuda12`` and ``tpu`` extras with -c constraints.txt)
keep jax, jaxlib, the plugins and every package they bring at the pins."""

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sysconfig
import tomllib

import pip_resolve
import pytest
from packaging.requirements import Requirement
from paths import REPO

import jaxtrans.compile
import jaxtrans.plot
import jaxtrans.programs.evaluate
import jaxtrans.programs.train

SCRIPTS = {
    "jaxtrans-train": jaxtrans.programs.train.main,
    "jaxtrans-evaluate": jaxtrans.programs.evaluate.main,
    "jaxtrans-plot": jaxtrans.plot.main,
    "jaxtrans-compile": jaxtrans.compile.main,
}


def installed_scripts() -> dict[str, importlib.metadata.EntryPoint]:
    distribution = importlib.metadata.distribution("jaxtrans")
    return {ep.name: ep for ep in distribution.entry_points if ep.group == "console_scripts"}


def test_installed_console_scripts_are_those_of_pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        declared = tomllib.load(f)["project"]["scripts"]
    installed = {name: ep.value for name, ep in installed_scripts().items()}
    assert installed == declared, "reinstall: pip install -c constraints.txt -e ."
    assert set(declared) == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script_runs_the_same_function_as_the_program(name):
    assert installed_scripts()[name].load() is SCRIPTS[name]


@pytest.mark.parametrize("program", ["train.py", "evaluate.py"])
def test_train_py_and_evaluate_py_call_the_console_script_functions(program):
    spec = importlib.util.spec_from_file_location(program[:-3], os.path.join(REPO, program))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: defines main, runs nothing
    assert module.main is SCRIPTS[f"jaxtrans-{program[:-3]}"]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script_help_prints_usage_and_exits_0(name, capsys):
    script = os.path.join(sysconfig.get_path("scripts"), name)
    assert os.access(script, os.X_OK), f"{script} missing: pip install -c constraints.txt -e ."
    with pytest.raises(SystemExit) as exit_info:
        installed_scripts()[name].load()([name, "--help"])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert "usage:" in out
    expected = {"jaxtrans-plot": "DIR", "jaxtrans-compile": "--topology SLICE"}
    assert expected.get(name, "--workdir DIR") in out


def test_installed_script_runs_as_a_command():
    # One real run of a generated wrapper (the lightest program: no JAX import).
    script = os.path.join(sysconfig.get_path("scripts"), "jaxtrans-plot")
    result = subprocess.run([script, "--help"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_constraints_pin_versions_the_public_index_has():
    # A local label (torch==2.13.0+cpu) exists only on a vendor's index: pip on a machine
    # that reaches only PyPI could not install the README's commands. A bare version
    # matches the CPU wheel where one is installed or offered, and PyPI's build elsewhere.
    with open(os.path.join(REPO, "constraints.txt"), encoding="utf-8") as f:
        pins = [line.split("#")[0].strip() for line in f]
    pins = [pin for pin in pins if pin]
    assert all("==" in pin for pin in pins), [pin for pin in pins if "==" not in pin]
    assert not [pin for pin in pins if "+" in pin]
    assert "torch==2.13.0" in pins


# ---------------------------------------------------------------- accelerator installs

# Each accelerator extra: its requirement, and the packages that carry JAX to the chip.
ACCELERATOR_EXTRAS = {
    "cuda12": ("jax[cuda12]", ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt")),
    "tpu": ("jax[tpu]", ("jax", "jaxlib", "libtpu")),
}
# The documents whose install tables give the accelerator commands.
INSTALL_DOCS = ("README.md", "docs/accelerators.md")


def documented_pip_commands(path: str) -> list[str]:
    """Every ``pip install ...`` command of a Markdown file: in inline code and in code
    blocks, split at ``&&``."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    blocks = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)
    snippets = blocks.findall(text) + re.findall(r"`([^`\n]+)`", blocks.sub("", text))
    commands = []
    for snippet in snippets:
        for line in snippet.splitlines():
            for part in line.split("&&"):
                part = part.split("#")[0].strip()
                if part.startswith("pip install"):
                    commands.append(part)
    return commands


def accelerator_command(path: str, extra: str) -> str:
    """The one command of ``path`` that installs ``extra``."""
    found = [c for c in documented_pip_commands(path) if f'".[{extra}]"' in c]
    assert len(found) == 1, (path, extra, found)
    return found[0]


def test_accelerator_extras_are_the_jax_builds_at_the_pinned_jax():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    jax = pip_resolve.pins()["jax"]
    assert pip_resolve.pins()["jaxlib"] == jax
    for extra, (requirement, packages) in ACCELERATOR_EXTRAS.items():
        [declared] = [Requirement(r) for r in extras[extra]]
        assert f"{declared.name}[{','.join(declared.extras)}]" == requirement
        assert declared.specifier.contains(jax), (extra, declared, jax)
        for package in packages:  # pinned, so that -c constraints.txt decides the version
            assert package in pip_resolve.pins(), package


@pytest.mark.parametrize("path", INSTALL_DOCS)
@pytest.mark.parametrize("extra", sorted(ACCELERATOR_EXTRAS))
def test_accelerator_install_is_the_extra_with_the_pins(path, extra):
    assert accelerator_command(path, extra) == f'pip install -c constraints.txt -e ".[{extra}]"'


@pytest.mark.parametrize("path", INSTALL_DOCS)
def test_no_documented_command_installs_jax_around_the_pins(path):
    # "pip install -U jax[cuda12]" (the install these docs gave before) moves jax to the
    # newest release, whatever constraints.txt says.
    for command in documented_pip_commands(path):
        names_jax = re.search(r"(?<![\w-])jax(lib)?(?![\w-])", command)  # not jaxtrans
        if names_jax or re.search(r"\.\[[^\]]*(cuda|tpu)", command):
            assert "-c constraints.txt" in command, command
            assert not re.search(r"(^|\s)(-U|--upgrade)(\s|$)", command), command


@pytest.fixture(scope="module")
def documented_resolution(tmp_path_factory):
    """The README's accelerator commands (docs/accelerators.md gives the same ones, see
    above) as one dry run against the package index, of both extras at once from a
    checkout copy. With every package pinned (the test below), each extra's packages are
    among the pair's at the same versions, so the pair landing on the pins shows each
    command alone does; one resolution downloads the shared packages once."""
    unreachable = pip_resolve.index_unreachable()
    if unreachable:
        pytest.skip(f"the package index is unreachable from here ({unreachable})")
    commands = {accelerator_command("README.md", extra) for extra in ACCELERATOR_EXTRAS}
    both = ",".join(sorted(ACCELERATOR_EXTRAS))
    assert commands == {
        f'pip install -c constraints.txt -e ".[{extra}]"' for extra in ACCELERATOR_EXTRAS
    }
    directory = pip_resolve.copy_checkout(str(tmp_path_factory.mktemp("install")))
    report = os.path.join(directory, "report.json")
    command = f'pip install -c constraints.txt -e ".[{both}]"'
    return pip_resolve.resolved(pip_resolve.start_resolving(command, directory, report), report)


@pytest.mark.slow
def test_documented_accelerator_installs_resolve_every_package_to_its_pin(
    documented_resolution,
):
    # About a minute where the index serves no separate metadata (pip then downloads the
    # wheels, 1.5 GB for CUDA).
    resolved = dict(documented_resolution)
    pins = pip_resolve.pins()
    for extra, (_, packages) in ACCELERATOR_EXTRAS.items():
        for package in packages:
            assert resolved.get(package) == pins[package], (extra, package, resolved.get(package))
    assert resolved.pop("jaxtrans") is not None
    unpinned = {name: version for name, version in resolved.items() if name not in pins}
    assert not unpinned, f"constraints.txt lacks pins for {unpinned}"
    moved = {name: (v, pins[name]) for name, v in resolved.items() if v != pins[name]}
    assert not moved, moved
