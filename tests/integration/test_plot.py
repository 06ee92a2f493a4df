"""python -m jaxtrans.plot DIR: curves drawn from metrics.jsonl, resumed runs, bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest
from paths import REPO

from jaxtrans.programs.plot import draw, main, read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def train_record(step: int, loss: float) -> dict:
    """A train record as the training loop writes it (mfu is null on CPU)."""
    return {
        "step": step,
        "loss": loss,
        "nll": loss - 0.1,
        "accuracy": 0.5,
        "lr": step * 1e-5,
        "grad_norm": 1.0,
        "tokens_per_sec": 1000.0 + step,
        "mfu": None,
    }


def dev_record(step: int, loss: float, bleu: float) -> dict:
    return {"step": step, "split": "dev", "loss": loss, "bleu": bleu, "chrf": bleu + 5}


def write_metrics(workdir, records, extra_lines=()) -> None:
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    (workdir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def read_metrics_of(tmp_path, records, extra_lines=()):
    write_metrics(tmp_path, records, extra_lines)
    return read_metrics(str(tmp_path / "metrics.jsonl"))


def lines_of(fig) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """{(panel title, line label): (x, y)} of a drawn figure."""
    return {
        (ax.get_title(), line.get_label()): (line.get_xdata(), line.get_ydata())
        for ax in fig.axes
        for line in ax.get_lines()
    }


RUN = [
    train_record(50, 5.0),
    train_record(100, 4.0),
    dev_record(100, 4.5, 10.0),
    train_record(150, 3.0),
    train_record(200, 2.0),
    dev_record(200, 2.5, 30.0),
]


def test_panels_draw_loss_lr_tokens_per_sec_and_dev_bleu_against_step(tmp_path):
    train, dev, _ = read_metrics_of(tmp_path, RUN)
    drawn = lines_of(draw(train, dev))
    steps = [50, 100, 150, 200]
    expected = {
        ("loss", "train"): (steps, [5.0, 4.0, 3.0, 2.0]),
        ("loss", "dev"): ([100, 200], [4.5, 2.5]),
        ("learning rate", "lr"): (steps, [s * 1e-5 for s in steps]),
        ("tokens/s", "tokens/s"): (steps, [1000.0 + s for s in steps]),
        ("dev BLEU", "BLEU"): ([100, 200], [10.0, 30.0]),
        ("dev BLEU", "chrF"): ([100, 200], [15.0, 35.0]),
    }
    assert set(drawn) == set(expected)
    for key, (x, y) in expected.items():
        np.testing.assert_array_equal(drawn[key][0], x, err_msg=str(key))
        np.testing.assert_allclose(drawn[key][1], y, rtol=0, atol=0, err_msg=str(key))


def test_resumed_run_keeps_the_records_of_the_run_that_went_on(tmp_path):
    # Logged to step 200, crashed, resumed from the checkpoint at 100: 150 and 200 again.
    records = [*RUN, train_record(150, 3.3), train_record(200, 2.2), train_record(250, 1.1)]
    train, dev, _ = read_metrics_of(tmp_path, records)
    assert [(r["step"], r["loss"]) for r in train] == [
        (50, 5.0),
        (100, 4.0),
        (150, 3.3),
        (200, 2.2),
        (250, 1.1),
    ]
    assert [r["step"] for r in dev] == [100, 200]  # no dev record repeated: all kept


def test_null_values_and_a_line_cut_short_are_left_out(tmp_path):
    records = [train_record(1, 2.0), {**train_record(2, 1.0), "loss": None}]
    train, _, malformed = read_metrics_of(tmp_path, records, extra_lines=['{"step": 3, "loss": 0.'])
    assert malformed == 1
    drawn = lines_of(draw(train, []))
    np.testing.assert_array_equal(drawn[("loss", "train")][0], [1])
    np.testing.assert_array_equal(drawn[("learning rate", "lr")][0], [1, 2])


def test_main_writes_a_png_to_the_workdir_by_default(tmp_path, capsys):
    write_metrics(tmp_path, RUN)
    main(["plot", str(tmp_path)])
    png = tmp_path / "metrics.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert f"wrote {png}" in capsys.readouterr().out


def test_output_flag_chooses_the_png(tmp_path):
    write_metrics(tmp_path, RUN[:1])  # train records only: the dev panels say so
    main(["plot", str(tmp_path), "--output", str(tmp_path / "out" / "curves.png")])
    assert (tmp_path / "out" / "curves.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("content", [None, "", "\n\n"], ids=["missing", "empty", "blank"])
def test_missing_or_empty_metrics_file_is_a_one_line_error_with_status_2(tmp_path, capsys, content):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "metrics.jsonl" in err
    assert not (tmp_path / "metrics.png").exists()


def test_python_dash_m_jaxtrans_plot_runs_and_fails_cleanly(tmp_path):
    write_metrics(tmp_path, RUN)
    ok = subprocess.run(
        [sys.executable, "-m", "jaxtrans.plot", str(tmp_path), "--output", "p.png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG_MAGIC
    bad = subprocess.run(
        [sys.executable, "-m", "jaxtrans.plot"], cwd=REPO, capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "DIR" in bad.stderr
