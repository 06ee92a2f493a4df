"""One-line errors the fuzz of tests/reliability/test_reliability_fuzz.py found missing, each pinned
where it is raised: flags, config.json, workdir directories, tokenizer training, and the
exit of a program while a library thread is still at work."""

import json
import os
import sys
import threading
import time

import pytest
from paths import REPO

from jaxtrans.errors import UserError
from jaxtrans.programs import cli, train
from jaxtrans.workdirs.workdir import load_run_config, new_directory


def parse_error(monkeypatch, capsys, *args: str) -> str:
    """The one line train.py's flag parsing prints for ``args`` (it must exit 2)."""
    argv = ["train.py", "--config", "configs/demo.py", *args, "--workdir", "/nonexistent"]
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", argv)  # the config flag reads sys.argv itself
    with pytest.raises(SystemExit) as exit_:
        train.parse_flags(argv, train._define, train.USAGE)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_config_overrides_are_read_from_the_argv_given_not_sys_argv(monkeypatch):
    """main(argv) from Python (a notebook, a test) parses as the program does, and leaves
    sys.argv as it was."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("sys.argv", ["python"])
    argv = ["train.py", "--config", "configs/demo.py", "--config.train.num_steps=7",
            "--workdir", "/nonexistent"]  # fmt: skip
    values = train.parse_flags(argv, train._define, train.USAGE)
    assert values.config.train.num_steps == 7
    assert sys.argv == ["python"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config."], "--config.: a config override names a field"),
        (["--config..x=1"], "--config..x: a config override names a field"),
        (["--config="], "--config is empty"),
        (["--config=configs/no_such.py"], "--config configs/no_such.py: no such file"),
        # The unknown path is the one named, not an override that is a prefix of it.
        (["--config.train.num_steps=1", "--config.train.num_steps.x=3"],
         "no field train.num_steps.x"),
    ],
)  # fmt: skip
def test_malformed_config_flags_are_named(monkeypatch, capsys, args, message):
    assert message in parse_error(monkeypatch, capsys, *args)


def test_a_flagfile_that_is_not_utf8_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    (tmp_path / "run.flags").write_bytes(b"--config.train.num_steps=3\n\xff\xfe\n")
    line = parse_error(monkeypatch, capsys, f"--flagfile={tmp_path / 'run.flags'}")
    assert "--flagfile is not UTF-8" in line


def test_a_missing_flagfile_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    line = parse_error(monkeypatch, capsys, f"--flagfile={tmp_path / 'none.flags'}")
    assert "Unable to open flagfile" in line


def test_an_error_exit_waits_for_library_threads_to_finish(capsys):
    finished = threading.Event()

    def cleanup():  # like orbax's background cleanup of a checkpoint directory
        time.sleep(0.3)
        finished.set()

    def main():
        threading.Thread(target=cleanup).start()
        raise UserError("bad input; fix it")

    with pytest.raises(SystemExit):
        cli.run(main)
    assert finished.is_set()
    assert capsys.readouterr().err == "error: bad input; fix it\n"


# ------------------------------------------------------------------------ config.json

VALID = {"task": "translation", "model": {}, "data": {}, "train": {}}


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 100_000, "is not valid JSON (RecursionError"),
        (b'{"model": {', "is not valid JSON"),
        (json.dumps(VALID).encode("utf-16"), "is not valid JSON"),
        (b"null", "holds null, not an object"),
        (b"[1]", "holds an array, not an object"),
        (json.dumps({**VALID, "model": [1]}).encode(), "'model' is an array, not an object"),
        (json.dumps({k: v for k, v in VALID.items() if k != "model"}).encode(), "no 'model'"),
        (json.dumps({**VALID, "eval": "fast"}).encode(), "'eval' is a string, not an object"),
        (json.dumps({**VALID, "task": 3}).encode(), "task=3 is not a task name"),
        (json.dumps({**VALID, "a.b": 1}).encode(), "dots in field names"),
    ],
)
def test_a_damaged_config_json_is_a_user_error_naming_it(tmp_path, content, message):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(UserError) as error:
        load_run_config(str(tmp_path))
    text = str(error.value)
    assert text.startswith(str(tmp_path / "config.json")) and message in text
    assert "restore it or use a new workdir" in text and "\n" not in text


def test_a_file_where_a_workdir_directory_goes_is_a_user_error(tmp_path):
    (tmp_path / "tokenizer").write_text("a file")
    refused = pytest.raises(UserError, match="cannot write .*tokenizer .*move what is there")
    with refused, new_directory(str(tmp_path), "tokenizer", os.path.isdir) as scratch:
        (tmp_path / scratch / "model").write_text("a model")
    assert sorted(os.listdir(tmp_path)) == ["tokenizer"]  # the scratch directory is gone


def test_training_files_whose_lines_are_all_malformed_name_the_flag(tmp_path):
    from jaxtrans.data.translation.data_config import get_data_config
    from jaxtrans.data.translation.tokenizer import train_tokenizer

    (tmp_path / "bad.tsv").write_bytes(b"no tab\n\xff\xfe\tx\n")
    config = get_data_config()
    config.train, config.skip_malformed = str(tmp_path / "bad.tsv"), True
    with pytest.raises(UserError) as error:
        train_tokenizer(config, str(tmp_path / "run"))
    assert f"--config.data.train={tmp_path / 'bad.tsv'}: all 2 lines" in str(error.value)
    assert "malformed" in str(error.value)
