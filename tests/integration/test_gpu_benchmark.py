"""benchmarks/gpu.sh works the first time: ``--dry`` runs the same script end to end on the
CPU with a tiny model, every row of the table through the loop's own step on packed
batches, with torch made unimportable (the README's GPU install has none), and the
PyTorch peer skipped there; a row that runs out of time is printed as such."""

import os
import subprocess
import sys

import numpy as np
import pytest
from paths import REPO

BENCHMARKS = os.path.join(REPO, "benchmarks")
sys.path.insert(0, BENCHMARKS)

import accelerator  # noqa: E402  (benchmarks/ on the path)


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of the table's data rows."""
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines[1:]]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """gpu.sh --dry with an importable ``torch`` that fails: the output and the table file."""
    tmp = tmp_path_factory.mktemp("gpu")
    blocker = tmp / "no_torch" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ImportError('the GPU benchmark imported torch')\n", encoding="utf-8"
    )
    path = os.pathsep.join([str(blocker.parent), REPO, os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OUT": str(tmp), "PYTHON": sys.executable}
    out = subprocess.run(
        ["bash", os.path.join(BENCHMARKS, "gpu.sh"), "--dry"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with open(tmp / "gpu_benchmark.md", encoding="utf-8") as f:
        return out.stdout, f.read()


def test_dry_run_measures_every_row_without_torch(dry_run):
    stdout, table = dry_run
    print(stdout)  # the dry run's output, in the test log (-s)
    rows = table_rows(stdout)
    assert [row[0] for row in rows] == list(accelerator.ROWS)
    for row in rows:
        step_ms, tokens_per_s, batch_rows = float(row[1]), float(row[2].replace(",", "")), row[3]
        assert step_ms > 0 and tokens_per_s > 0, row
        assert batch_rows == str(accelerator.DRY["data.batch_size"])
        assert "encoder self" in row[-1] and "cross" in row[-1], row  # the kernels
    assert "beam search (beam 4" in stdout and "sentences/s" in stdout
    assert "PyTorch peer: skipped (torch does not import here)" in stdout
    assert table.startswith("device: ") and "| as shipped |" in table


def test_packed_rows_pad_less_than_one_pair_a_row(dry_run):
    # The rows are the pipeline's: packing fills rows that one pair a row leaves empty.
    padding = {row[0]: float(row[4].rstrip("%")) for row in table_rows(dry_run[0])}
    unpacked = padding.pop("bfloat16, one pair a row (data.pack=False)")
    assert max(padding.values()) < unpacked / 2, (padding, unpacked)


def test_loop_step_batches_are_the_pipelines_packed_rows():
    import loop_step

    config = loop_step.run_config(os.path.join(REPO, "configs", "base.py"), accelerator.DRY.items())
    [batch] = loop_step.packed_batches(config, 1)
    rows, length = accelerator.DRY["data.batch_size"], accelerator.DRY["data.max_target_length"]
    assert batch["target_out"].shape == (rows, length)
    segments, positions = batch["target_segments"], batch["target_positions"]
    assert segments.max() > 1  # several pairs a row
    for r in range(rows):  # positions restart at each pair; padding is segment 0
        for segment in range(1, segments[r].max() + 1):
            where = segments[r] == segment
            assert (positions[r][where] == np.arange(where.sum())).all()
        assert (batch["target_out"][r][segments[r] == 0] == 0).all()


def test_a_row_out_of_time_is_printed_as_such():
    spec = {"config": os.path.join(REPO, "configs", "base.py"), "kind": "matmul", "size": 64}
    result = accelerator.run_child(spec, timeout=0.01, env=dict(os.environ))
    assert result == {"error": "timed out after 0 s"}
    line = accelerator.table_row("as shipped", result, matmul=1.0, vendor=0.0)
    assert line.startswith("| as shipped | timed out after 0 s |")
    assert line.count("|") == 11  # the header's ten cells


def test_torch_peer_dry_prints_its_row():
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "torch_peer.py"), "--dry"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    [row] = table_rows("| header |\n" + out.stdout)
    assert row[0].startswith("torch ") and "one pair a row (cpu)" in row[0]
    assert float(row[1]) > 0 and float(row[2].replace(",", "")) > 0
