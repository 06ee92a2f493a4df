"""The suite's own settings: skipped tests are listed with their reasons (pyproject's
``-rs``), and where CI=true any skipped test fails the run (tests/conftest.py).

Each test runs pytest in a subprocess on a tiny temporary test directory, with the
repository's pyproject.toml as its config and tests/conftest.py loaded as a plugin
(``-p conftest``), as they apply to the real suite."""

import os
import subprocess
import sys

import pytest
from paths import REPO

TESTS = {
    "test_some.py": """
import pytest

def test_passes():
    pass

def test_skips():
    pytest.skip("needs the moon")

@pytest.mark.xfail(reason="a known bug, not a skip")
def test_fails_as_expected():
    assert False
""",
    "test_optional.py": """
import pytest

pytest.importorskip("jaxtrans_no_such_module")

def test_never_runs():
    pass
""",
}


def run_pytest(tmp_path, ci: str | None, *args: str) -> subprocess.CompletedProcess:
    for name, text in TESTS.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "tests"), REPO])
    command = [sys.executable, "-m", "pytest", "-c", os.path.join(REPO, "pyproject.toml")]
    command += ["--rootdir", str(tmp_path), "-p", "conftest", "-p", "no:cacheprovider"]
    command += ["-n", "0"]  # in this process: the listing is what one pytest prints
    return subprocess.run(
        [*command, *(args or ["."])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_ci_skips_pass_and_are_listed_with_their_reasons(tmp_path, ci):
    result = run_pytest(tmp_path, ci)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIPPED" in result.stdout and "needs the moon" in result.stdout
    assert "jaxtrans_no_such_module" in result.stdout
    assert "CI=true" not in result.stdout


def test_with_ci_true_a_skipped_test_fails_the_run_naming_each_skip(tmp_path):
    result = run_pytest(tmp_path, "true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "CI=true: 2 skipped test(s) fail the run" in result.stdout
    assert "SKIPPED test_some.py::test_skips: needs the moon" in result.stdout
    assert "SKIPPED test_optional.py: could not import 'jaxtrans_no_such_module'" in (result.stdout)
    listed = result.stdout.split("CI=true")[1].split("=====")[0]
    assert "test_fails_as_expected" not in listed and "test_passes" not in listed


def test_with_ci_true_a_run_without_skips_passes(tmp_path):
    result = run_pytest(tmp_path, "true", "test_some.py", "-k", "passes or expected")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CI=true" not in result.stdout
