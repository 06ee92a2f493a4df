"""Test-wide settings: with CI=true a skipped test fails the run; the shared helpers of
tests/helpers/ (tiny configs, program servers, fuzz cases, paths) importable by name.

The tests are sorted by kind: unit/<package>/ (one module or package, no program started),
integration/ (training and evaluation through the programs), reliability/ (bad input,
faults, fuzz, security) and docs/ (the docs and the architecture they describe). Every
test of integration/ and reliability/ is ``slow``, and so is each unit test marked
``@pytest.mark.slow`` (a few seconds or more): ``python -m pytest -m "not slow"`` is the
quick loop, the whole suite is what CI runs.
"""

import atexit
import os
import shutil
import sys
import tempfile
import warnings

import pytest
from xdist.scheduler import LoadScopeScheduling

# torch's reference modules warn about their own mask conventions; not our concern.
warnings.filterwarnings("ignore", module="torch")

TESTS = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(TESTS, "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

# The suite's models are tiny, so compiling them is most of its time, and most of that is
# XLA:CPU's backend optimisation; without it the model tests take half the time and every
# result is still compared with its reference at the same tolerance. Set before JAX starts
# a backend (here and in every program a test starts, which inherits the environment);
# JAXTRANS_TEST_XLA_OPTIMIZE=1 keeps XLA's default. Tests that set XLA_FLAGS of their own
# (forced device counts) add this flag through ``paths.xla_flags``.
if os.environ.get("JAXTRANS_TEST_XLA_OPTIMIZE") != "1":
    from paths import xla_flags

    os.environ["XLA_FLAGS"] = xla_flags()

# The suite runs on the CPU. With libtpu installed (the tpu-compile extra, for the
# compile-only TPU tests) JAX would also try to start a TPU backend in every process, and
# libtpu would print its warnings about the TPU host it cannot find; the programs the
# tests start inherit this too.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Runs whose config keeps the default train.compilation_cache_dir (~/.cache/jaxtrans/xla),
# in this process and in the programs it starts, use a temporary directory of this test
# run instead (jaxtrans.compilation_cache), removed at its end: no test writes into the
# home directory.
if not os.environ.get("JAXTRANS_COMPILATION_CACHE_DIR"):
    os.environ["JAXTRANS_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtrans-xla-")
    atexit.register(shutil.rmtree, os.environ["JAXTRANS_COMPILATION_CACHE_DIR"], True)

# The tests' own processes (each xdist worker) use that cache too: many tests build the
# same tiny models at the same shapes, and a program another test compiled is read back.
import jax  # noqa: E402  (after XLA_FLAGS and JAX_PLATFORMS, before any backend starts)

jax.config.update("jax_compilation_cache_dir", os.environ["JAXTRANS_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# The kinds of test whose every test is slow: they start programs or train.
SLOW_KINDS = ("integration", "reliability")


# pytest-xdist's two workers (pyproject's -n 2) take whole groups: a test file is one
# group, so its module fixtures are built once; all of reliability/ is one, run in one
# worker in its order, as its files share one program server and reference run. (xdist's
# own ``xdist_group`` marks do not group under pytest 9, whose node ids ignore the group
# suffix xdist adds, so the groups are drawn here, from the node ids.)
SHARED_GROUPS = ("reliability",)


# Groups are handed to the workers in the order of the items, so the longest go first: a
# long group handed out last would leave one worker running it alone at the end.
KIND_ORDER = ("reliability", "integration", "unit", "docs")


# Files of one long test each (minutes on 2 cores), handed out first within their kind, so
# that neither worker is left with one of them alone at the end.
LONGEST_FILES = (
    "integration/test_bert_qa_demo_seed.py",
    "integration/test_compile_find_batch.py",
    "integration/test_gpu_benchmark.py",
)


def _kind(item) -> str:
    return os.path.relpath(str(item.path), TESTS).split(os.sep)[0]


def _longest(item) -> bool:
    return os.path.relpath(str(item.path), TESTS) in LONGEST_FILES


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    # Stable: within a kind, the longest files first, the rest in their order.
    items.sort(key=lambda item: (rank.get(_kind(item), len(KIND_ORDER)), not _longest(item)))
    for item in items:
        if _kind(item) in SLOW_KINDS:
            item.add_marker(pytest.mark.slow)


class _TestGroups(LoadScopeScheduling):
    """xdist's scheduling of whole scopes, a scope being a test file or a shared group."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]  # tests/<kind>/.../test_x.py
        kind = os.path.relpath(path, "tests").split(os.sep)[0]
        return kind if kind in SHARED_GROUPS else path


def pytest_xdist_make_scheduler(config, log):
    return _TestGroups(config, log)


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
