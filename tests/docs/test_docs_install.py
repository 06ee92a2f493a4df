"""`pip install -e .` gives the console scripts the README names, and they are the programs
of train.py, evaluate.py and python -m jaxtrans.plot."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sysconfig
import tomllib

import pytest
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
