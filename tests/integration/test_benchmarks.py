"""The benchmark scripts run (a smoke test: tiny model, one round; nothing is timed)."""

import os
import re
import subprocess
import sys

from paths import REPO


def test_train_step_benchmark_quick_prints_its_table():
    # The script inherits the suite's fast-compile XLA_FLAGS (tests/conftest.py).
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "train_step.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| tiny |")]
    assert [row.split("|")[2].strip() for row in rows] == ["jaxtrans", "torch"]
    assert re.search(r"\| \d+\.\d\dx \|", rows[0]), rows[0]  # the jaxtrans/torch ratio


def test_decode_benchmark_quick_prints_its_table():
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "decode.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [
        line for line in out.stdout.splitlines() if line.startswith("| naive") or "(cache)" in line
    ]
    assert len(rows) == 3, out.stdout
    # The cached search decodes the same tokens as the re-run loop.
    assert "equals the naive loop on 100.0% of tokens" in out.stdout
