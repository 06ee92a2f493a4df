"""Test-wide settings: with CI=true a skipped test fails the run; the shared helpers of
tests/helpers/ (tiny configs, program servers, fuzz cases, paths) importable by name.

The tests are sorted by kind: unit/<package>/ (one module or package, no program started),
integration/ (training and evaluation through the programs), reliability/ (bad input,
faults, fuzz, security) and docs/ (the docs and the architecture they describe). Tests
that take more than a few seconds carry the ``slow`` marker: ``python -m pytest -m "not
slow"`` is the quick loop.
"""

import os
import sys
import warnings

import pytest

# torch's reference modules warn about their own mask conventions; not our concern.
warnings.filterwarnings("ignore", module="torch")

HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)


# ------------------------------------------------- on CI, a skipped test fails the run
#
# A test that skips (a missing optional package: pytest.importorskip) proves nothing. Where
# CI=true, every skip is listed and the run exits 1, so that a CI machine missing a test
# dependency cannot pass unnoticed. Expected failures (xfail) are not skips.

_skipped: dict[str, str] = {}


def _record_skip(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _skipped[report.nodeid] = reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report) -> None:
    _record_skip(report)


def pytest_collectreport(report) -> None:  # a whole module skipped at import
    _record_skip(report)


def _skips_fail_the_run() -> bool:
    return os.environ.get("CI") == "true" and bool(_skipped)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _skips_fail_the_run() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if _skips_fail_the_run():
        terminalreporter.write_sep(
            "=", f"CI=true: {len(_skipped)} skipped test(s) fail the run", red=True
        )
        for nodeid, reason in sorted(_skipped.items()):
            terminalreporter.write_line(f"SKIPPED {nodeid}: {reason}")
