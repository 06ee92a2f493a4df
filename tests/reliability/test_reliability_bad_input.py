"""Bad input to train.py and evaluate.py: one line naming the problem and what to do,
exit status 2, no traceback, and nothing already in the workdir removed or overwritten.

One table-driven test runs every case as the real program (tests/helpers/program_server.py).
"""

import dataclasses
import glob
import gzip
import json
import os
import shutil
from collections.abc import Callable

import pytest
from paths import xla_flags
from reliability_runs import (
    changed_files,
    copy_of_reference,
    run_program,
    scratch,
    snapshot,
    tiny_flags,
    train,
)

TWO_DEVICES = (("XLA_FLAGS", xla_flags(2)),)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> str:
    """Broken config files and data files, in one directory."""
    directory = tmp_path_factory.mktemp("inputs")
    contents = {
        "broken_config.py": b"def get_config(:\n",
        "no_get_config.py": b"LEARNING_RATE = 1.0\n",
        "empty.tsv": b"",
        "bad_utf8.tsv": b"a cat\tune chatte\n\xff\xfe cat\tchat\n",
        "no_tab.tsv": b"a cat\tune chatte\na dog, un chien\n",
        "bad.jsonl": b'{"source": "a cat", "target": "un chat"}\n{"source": "a dog", \n',
        # Cut off before gzip's end-of-stream marker, as by an interrupted copy.
        "cut.tsv.gz": gzip.compress(b"a cat\tune chatte\n" * 200)[:-12],
        # 100 tokens a side at least: none fits max_source_length=24.
        "long.tsv": b"".join(
            b" ".join(b"w%d" % (i * 7 + j) for j in range(100))
            + b"\t"
            + b" ".join(b"m%d" % (i * 5 + j) for j in range(100))
            + b"\n"
            for i in range(200)
        ),  # fmt: skip
    }
    for name, content in contents.items():
        (directory / name).write_bytes(content)
    return str(directory)


@pytest.fixture(scope="module")
def other_tokenizer() -> str:
    """A workdir holding only a tokenizer of another vocabulary size (200, not 300)."""
    from jaxtrans.data.translation.data_config import get_data_config
    from jaxtrans.data.translation.tokenizer import train_tokenizer

    workdir = os.path.join(scratch(), "other-tokenizer")
    if not os.path.isdir(workdir):
        config = get_data_config()
        config.vocab_size, config.demo_train_size = 200, 500
        train_tokenizer(config, workdir)
    return workdir


# ---------------------------------------------------------- ways to damage a trained workdir


def truncate_checkpoint_data(workdir: str, other_tokenizer: str) -> None:
    for path in glob.glob(f"{workdir}/checkpoints/8/params/ocdbt.process_0/d/*"):
        with open(path, "r+b") as f:
            f.truncate(10)


def remove_checkpoints(workdir: str, other_tokenizer: str) -> None:
    shutil.rmtree(os.path.join(workdir, "checkpoints"))


def corrupt_config_json(workdir: str, other_tokenizer: str) -> None:
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write('{"model": {"d_model": 32,')


def corrupt_tokenizer(workdir: str, other_tokenizer: str) -> None:
    with open(os.path.join(workdir, "tokenizer", "shared.model"), "wb") as f:
        f.write(b"not a SentencePiece model")


def swap_tokenizer(workdir: str, other_tokenizer: str) -> None:
    shutil.rmtree(os.path.join(workdir, "tokenizer"))
    shutil.copytree(os.path.join(other_tokenizer, "tokenizer"), os.path.join(workdir, "tokenizer"))


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    # "train.py" or "evaluate.py".
    program: str
    # Flags; {files} is the directory of bad files. train.py also gets the tiny run's flags
    # first unless the case gives its own --config.
    flags: tuple[str, ...]
    # Fragments the error line must contain: the problem and what to do.
    expect: tuple[str, ...]
    # The workdir: "fresh" (a directory holding one unrelated file), "trained" (a copy of
    # the reference run) or "file" (a plain file where the directory should be).
    workdir: str = "fresh"
    # Damage done to a trained workdir first: f(workdir, other_tokenizer_workdir).
    damage: Callable[[str, str], None] | None = None
    env: tuple[tuple[str, str], ...] = ()


TRAIN, EVALUATE = "train.py", "evaluate.py"


def dev_file(name: str) -> tuple[str, ...]:
    """Flags for the dev file {files}/NAME, with dev evaluation on (the tiny run has it off)."""
    return ("--config.train.eval_every=4", f"--config.data.dev={{files}}/{name}")


CASES = [
    # train.py: the config
    Case("config_file_missing", TRAIN, ("--config", "configs/no_such.py"),
         ("configs/no_such.py: no such file", "give a config file")),
    Case("config_file_broken", TRAIN, ("--config", "{files}/broken_config.py"),
         ("broken_config.py", "SyntaxError", "fix the config file")),
    Case("config_file_without_get_config", TRAIN, ("--config", "{files}/no_get_config.py"),
         ("no get_config()",)),
    Case("override_of_unknown_field", TRAIN, ("--config.train.num_step=5",),
         ("--config.train.num_step", "no field train.num_step", "did you mean num_steps?")),
    Case("override_with_mistyped_value", TRAIN, ("--config.train.num_steps=many",),
         ("--config.train.num_steps=many", "invalid literal for int()", "see --help")),
    Case("unknown_nonfinite_policy", TRAIN, ("--config.train.on_nonfinite=ignore",),
         ("on_nonfinite='ignore'", "use stop or skip")),
    Case("unknown_task", TRAIN, ("--config.task=translate",),
         ("--config.task='translate' is not one of", "translation")),
    # train.py: the data
    Case("data_file_missing", TRAIN, ("--config.data.train={files}/no_such.tsv",),
         ("no_such.tsv: no such data file", "check --config.data")),
    Case("data_file_empty", TRAIN, ("--config.data.train={files}/empty.tsv",),
         ("empty.tsv: the files hold no lines", "SOURCE<TAB>TARGET")),
    Case("data_with_invalid_utf8", TRAIN, ("--config.data.train={files}/bad_utf8.tsv",),
         ("bad_utf8.tsv:2: malformed line: invalid UTF-8", "skip_malformed=True")),
    Case("tsv_line_without_tab", TRAIN, ("--config.data.train={files}/no_tab.tsv",),
         ("no_tab.tsv:2: malformed line: expected SOURCE<TAB>TARGET", "skip_malformed")),
    Case("jsonl_line_that_is_not_json", TRAIN, ("--config.data.train={files}/bad.jsonl",),
         ("bad.jsonl:2: malformed line: bad JSON", "skip_malformed")),
    Case("all_sentences_too_long", TRAIN, ("--config.data.train={files}/long.tsv",),
         ("none of the 200 training pairs", "max_source_length=24", "truncate=True")),
    Case("batch_not_divisible_by_the_devices", TRAIN, ("--config.data.batch_size=3",),
         ("batch_size=3 is not divisible by the 2", "multiple of 2"), env=TWO_DEVICES),
    # train.py: a dev split that is configured but broken stops the run before it trains
    Case("dev_file_missing", TRAIN, dev_file("no_such_dev.tsv"),
         ("no_such_dev.tsv: no such data file", "check --config.data")),
    Case("dev_file_with_a_malformed_line", TRAIN, dev_file("no_tab.tsv"),
         ("no_tab.tsv:2: malformed line", "skip_malformed")),
    Case("dev_file_empty", TRAIN, dev_file("empty.tsv"),
         ("dev=", "empty.tsv: the file holds no sentence pairs", "SOURCE<TAB>TARGET")),
    Case("dev_file_gzip_cut_short", TRAIN, dev_file("cut.tsv.gz"),
         ("cut.tsv.gz: cannot read", "end-of-stream")),
    Case("dev_file_missing_on_resume", TRAIN, dev_file("no_such_dev.tsv"),
         ("no_such_dev.tsv: no such data file",), workdir="trained"),
    # train.py: the workdir
    Case("workdir_is_a_file", TRAIN, (), ("cannot create --workdir", "choose another"),
         workdir="file"),
    Case("workdir_of_another_model_shape", TRAIN, ("--config.model.d_model=64",),
         ("trained with d_model=32 (config now says 64)", "new --workdir"), workdir="trained"),
    Case("workdir_with_damaged_checkpoint", TRAIN, (),
         ("checkpoint 8", "cannot be restored", "aside to resume from checkpoint 6"),
         workdir="trained", damage=truncate_checkpoint_data),
    Case("workdir_with_damaged_config_json", TRAIN, (),
         ("config.json is not valid JSON", "restore it"), workdir="trained",
         damage=corrupt_config_json),
    Case("workdir_with_another_tokenizer", TRAIN, (),
         ("trained with vocab_size=300 (config now says 200)",), workdir="trained",
         damage=swap_tokenizer),
    # evaluate.py
    Case("evaluate_missing_workdir", EVALUATE, ("--workdir={workdir}/no_such_run",),
         ("no config.json", "check --workdir")),
    Case("evaluate_workdir_without_checkpoints", EVALUATE, (),
         ("no checkpoints found", "train first"), workdir="trained", damage=remove_checkpoints),
    Case("evaluate_damaged_checkpoint", EVALUATE, (),
         ("checkpoint 8 cannot be restored", "--checkpoint (steps: 2, 4, 6)"),
         workdir="trained", damage=truncate_checkpoint_data),
    Case("evaluate_damaged_tokenizer", EVALUATE, (),
         ("tokenizer", "cannot be read", "restore it"), workdir="trained",
         damage=corrupt_tokenizer),
    Case("evaluate_with_another_tokenizer", EVALUATE, (),
         ("vocabulary sizes source=200", "expects source=300"), workdir="trained",
         damage=swap_tokenizer),
    Case("evaluate_unknown_split", EVALUATE, ("--split=train",), ("--split 'train'", "test or dev"),
         workdir="trained"),
    Case("evaluate_bad_checkpoint_value", EVALUATE, ("--checkpoint=newest",),
         ("--checkpoint 'newest' is not understood", "latest, best, a step number, or avg:K"),
         workdir="trained"),
    Case("evaluate_best_without_keep_best", EVALUATE, ("--checkpoint=best",),
         ("has no best checkpoint", "without train.keep_best", "latest, a step number or avg:K"),
         workdir="trained"),
    Case("evaluate_checkpoint_step_missing", EVALUATE, ("--checkpoint=7",),
         ("no checkpoint at step 7", "available steps: 2, 4, 6, 8"), workdir="trained"),
    Case("evaluate_average_of_too_many", EVALUATE, ("--checkpoint=avg:9",),
         ("needs 9 checkpoints", "has 4", "smaller K"), workdir="trained"),
    Case("evaluate_outdir_is_a_file", EVALUATE, ("--outdir={files}/empty.tsv",),
         ("--outdir", "not a writable directory", "choose another"), workdir="trained"),
    Case("evaluate_input_file_missing", EVALUATE, ("--input={files}/no_such.txt",),
         ("--input", "no_such.txt", "No such file", "check the path"), workdir="trained"),
]  # fmt: skip


def program_flags(case: Case, workdir: str, files: str) -> list[str]:
    flags = [f.format(files=files, workdir=workdir) for f in case.flags]
    if case.program == TRAIN and "--config" not in flags:
        flags = [*tiny_flags(), *flags]
    if not any(f.startswith("--workdir") for f in flags):
        flags += ["--workdir", workdir]
    return flags


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_input_is_a_one_line_error_with_status_2_that_leaves_the_workdir_alone(
    case, tmp_path, files, other_tokenizer
):
    workdir = str(tmp_path / "run")
    if case.workdir == "trained":
        copy_of_reference(workdir)
        if case.damage:
            case.damage(workdir, other_tokenizer)
    elif case.workdir == "file":
        with open(workdir, "w") as f:
            f.write("notes")
    else:
        os.makedirs(workdir)
        with open(os.path.join(workdir, "notes.txt"), "w") as f:
            f.write("kept")
    before = snapshot(str(tmp_path))

    run = run_program(case.program, program_flags(case, workdir, files), env=dict(case.env))

    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    for fragment in case.expect:
        assert fragment in lines[0]
    assert changed_files(before, snapshot(str(tmp_path))) == []


# ------------------------------------------------------------------- the dev split


def test_a_mistyped_dev_path_stops_training_before_anything_is_written(tmp_path):
    workdir = tmp_path / "run"
    flags = tiny_flags(train__eval_every=4, data__dev=str(tmp_path / "dve.tsv"))

    run = train(workdir, *flags)

    assert run.returncode == 2, run.stderr
    assert (
        run.stderr.strip()
        == f"error: {tmp_path}/dve.tsv: no such data file; check --config.data paths"
    )
    # No tokenizer trained, no config, no checkpoint, no training step logged.
    assert sorted(os.listdir(workdir)) == [".lock"]
    assert "step" not in run.stdout


def test_malformed_dev_lines_skipped_are_said_once_in_the_first_dev_record(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text(
        "tu vako ta sul dormirit.\tYou slept on the road.\n"
        "no tab on this line\n"
        "nos vilu.\tWe will.\n"
        "\tan empty source\n"
    )
    workdir = tmp_path / "run"
    flags = tiny_flags(
        4, train__eval_every=2, data__dev=str(dev), data__skip_malformed=True,
        eval__beam_size=1, eval__max_extra_length=4,
    )  # fmt: skip

    run = train(workdir, *flags)

    assert run.returncode == 0, run.stderr
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        dev_records = [r for r in map(json.loads, f) if r.get("split") == "dev"]
    assert [r["step"] for r in dev_records] == [2, 4]
    assert dev_records[0]["lines_skipped"] == 2 and "bleu" in dev_records[0]
    assert "lines_skipped" not in dev_records[1]
    assert run.stdout.count("lines_skipped 2") == 1


def test_training_files_without_a_dev_file_train_without_dev_evaluation(tmp_path):
    from jaxtrans.data.translation import demo as demo_corpus

    pairs = demo_corpus.demo_split("train", size=300, seed=0, held_out_sizes=(0, 0))
    corpus = tmp_path / "train.tsv"
    corpus.write_text("".join(f"{p.source}\t{p.target}\n" for p in pairs))
    workdir = tmp_path / "run"

    run = train(workdir, *tiny_flags(4, train__eval_every=2, data__train=str(corpus)))

    assert run.returncode == 0, run.stderr
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # training records only
