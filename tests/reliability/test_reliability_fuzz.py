"""Seeded fuzz of bad input through the real train.py and evaluate.py.

Every case ends with exit status 0 (the input is accepted; malformed lines skipped with
data.skip_malformed are counted, where metrics.jsonl logs the count) or 2 (one line on
stderr, ``error: ...``, naming the file, the line or the flag), as its kind expects: 2 for
input that is invalid (an impossible size, a mistyped flag), 0 for input that is valid,
either where it depends (damaged data that skip_malformed may skip); never a traceback, and never
changes a checkpoint already in the workdir (sizes, times and SHA-256 before and after); a
case refused with status 2 changes no file of the workdir at all.

    pytest tests/reliability/test_reliability_fuzz.py           # the first 18 cases of seed 0
    JAXTRANS_FUZZ_COUNT=300 pytest tests/reliability/test_reliability_fuzz.py
    JAXTRANS_FUZZ_SEED=7 ...             # other cases
    JAXTRANS_FUZZ_REPORT=fuzz.jsonl ...  # one record per case: outcome, status, seconds, error

The cases come from tests/helpers/fuzz_cases.py (case i is the same for any count); the programs
run as forks of tests/helpers/program_server.py, and the trained workdir is a copy of the reference
run of tests/helpers/reliability_runs.py (8 steps, checkpoints 2, 4, 6, 8). Most cases stop before
anything compiles; accepted training runs reuse the reference run's compiled step.
"""

import collections
import json
import os
import shutil
import sys
import time

import pytest
from fuzz_cases import ACCEPTED, REFUSED, FuzzCase, make_cases
from fuzz_mutations import HF_FILES, damaged
from paths import REPO
from reliability_runs import (
    changed_files,
    copy_of_reference,
    reference_workdir,
    run_program,
    scratch,
    snapshot,
    tiny_flags,
    train_records,
)

SEED = int(os.environ.get("JAXTRANS_FUZZ_SEED", "0"))
COUNT = int(os.environ.get("JAXTRANS_FUZZ_COUNT", "18"))
CASES = make_cases(SEED, COUNT)
# A run still going after this long is a failure (a hang) and is killed.
TIMEOUT_S = 180
RESULTS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def report():
    """Counts by outcome at the end (shown with -s), and JAXTRANS_FUZZ_REPORT's records."""
    yield
    counts = collections.Counter(r["outcome"] for r in RESULTS)
    seconds = sum(r["seconds"] for r in RESULTS)
    print(f"\nfuzz seed {SEED}: {len(RESULTS)} cases in {seconds:.0f} s of runs: {dict(counts)}")
    if os.environ.get("JAXTRANS_FUZZ_REPORT"):
        with open(os.environ["JAXTRANS_FUZZ_REPORT"], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in RESULTS)


# ------------------------------------------------------------------ setting a case up


def bert_template() -> str:
    """A BERT pretraining workdir without checkpoints: config.json and a WordPiece
    tokenizer (the vocabulary of fuzz_mutations.HF_FILES), made once per session."""
    path = os.path.join(scratch(), "fuzz-bert-workdir")
    if os.path.isdir(path):
        return path
    from jaxtrans.models.bert.bert_model import BertConfig
    from jaxtrans.tasks.bert.bert_task import resolve_run_config
    from jaxtrans.workdirs.workdir import save_run_config

    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import bert_demo

    hf = json.loads(HF_FILES["config.json"])
    model = BertConfig(vocab_size=hf["vocab_size"], d_model=8, num_heads=2, d_ff=16, num_layers=1)
    building = path + ".tmp"
    os.makedirs(os.path.join(building, "bert_tokenizer"))
    save_run_config(building, resolve_run_config(bert_demo.get_config(), model))
    for name in ("vocab.txt", "tokenizer_config.json"):
        with open(os.path.join(building, "bert_tokenizer", name), "wb") as f:
            f.write(HF_FILES[name])
    os.rename(building, path)
    return path


def set_up(case: FuzzCase, root: str) -> tuple[str, str]:
    """The case's input files and workdir under ``root``: (workdir, inputs)."""
    inputs, workdir = os.path.join(root, "inputs"), os.path.join(root, "run")
    os.makedirs(inputs)
    for name, content in case.inputs:
        os.makedirs(os.path.dirname(os.path.join(inputs, name)), exist_ok=True)
        with open(os.path.join(inputs, name), "wb") as f:
            f.write(content)
    if case.workdir == "trained":
        copy_of_reference(workdir)
    elif case.workdir == "tokenizer":
        shutil.copytree(os.path.join(reference_workdir(), "tokenizer"), f"{workdir}/tokenizer")
    elif case.workdir == "bert":
        shutil.copytree(bert_template(), workdir)
    for target, mutation in case.damage:
        damage(os.path.join(workdir, target), mutation, inputs, f"{SEED}-{case.number}-damage")
    return workdir, inputs


def damage(path: str, mutation: str, inputs: str, seed: str) -> None:
    if mutation.startswith("data.test="):  # config.json names a damaged test file
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config["data"]["test"] = os.path.join(inputs, mutation.removeprefix("data.test="))
        content = json.dumps(config).encode()
    else:
        text = b""
        if os.path.isfile(path):
            with open(path, "rb") as f:
                text = f.read()
        content = damaged(text, mutation, seed)
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)
    if content is not None:
        with open(path, "wb") as f:
            f.write(content)


def base_flags(case: FuzzCase, inputs: str) -> list[str]:
    if case.base == "tiny":
        return tiny_flags(1)
    if case.base == "resume":  # the reference run's own command: its 8 steps are done
        return tiny_flags()
    if case.base == "bert":
        overrides = {
            "init_from": f"{inputs}/hf",
            "data.classification_train": f"{inputs}/train.tsv",
            "data.max_seq_length": 16,
            "data.batch_size": 4,
            "train.num_steps": 1,
            "train.eval_every": 0,
            "train.compilation_cache_dir": os.path.join(scratch(), "xla"),
        }
        flags = [f"--config.{key}={value}" for key, value in overrides.items()]
        return ["--config", "configs/bert_classify.py", *flags]
    return []


def program_flags(case: FuzzCase, workdir: str, inputs: str) -> list[str]:
    flags = [*base_flags(case, inputs), *(f.replace("{inputs}", inputs) for f in case.flags)]
    if not any(f.startswith("--workdir") for f in flags):
        flags += ["--workdir", workdir]
    return flags


def state(workdir: str) -> tuple[dict, dict]:
    """(every file of the workdir, the files of its checkpoints/) as snapshot() sees them."""
    if not os.path.isdir(workdir):
        return {}, {}
    files = snapshot(workdir)
    return files, {path: v for path, v in files.items() if path.startswith("checkpoints/")}


# ------------------------------------------------------------------------- judging


def line_counts(path: str) -> tuple[int, int]:
    """(lines, malformed lines) of a training file, split and parsed as the reader does."""
    from jaxtrans.data.translation.text_files import LineFormat, MalformedLine, parse_line

    fmt = LineFormat(kind="jsonl" if ".jsonl" in path else "tsv")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    lines = lines[:-1] + ([lines[-1]] if lines[-1] else [])
    malformed = 0
    for raw in lines:
        try:
            parse_line(raw, fmt)
        except MalformedLine:
            malformed += 1
    return len(lines), malformed


def uncounted(case: FuzzCase, workdir: str, inputs: str) -> str:
    """A problem if a run that read every line once did not count the malformed ones."""
    records = train_records(workdir)
    if records and not any("pairs_malformed" in r for r in records):
        return "metrics.jsonl counts no pairs_malformed"
    counts = [line_counts(os.path.join(inputs, name)) for name, _ in case.inputs]
    lines, malformed = sum(c[0] for c in counts), sum(c[1] for c in counts)
    read = max((r.get("pairs_read", 0) for r in records), default=0)
    skipped = max((r.get("pairs_malformed", 0) for r in records), default=0)
    if read >= lines and skipped < malformed:  # the first epoch has read each line once
        return f"{read} pairs read, {skipped} malformed counted, but {malformed} are malformed"
    return ""


def problems_of(case: FuzzCase, status: int, stderr: str, workdir: str, inputs: str, before):
    """What is wrong with how the run ended (empty: nothing)."""
    problems = []
    if status not in (0, 2):
        problems.append(f"exit status {status}")
    elif case.expect == REFUSED and status != 2:
        problems.append("invalid input accepted (exit 0, expected a one-line error)")
    elif case.expect == ACCEPTED and status != 0:
        problems.append("valid input refused (expected exit 0)")
    if "Traceback" in stderr:
        problems.append("a traceback on stderr")
    lines = stderr.strip().splitlines()
    if status == 2:
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"{len(lines)} lines on stderr, not one 'error: ...' line")
        elif not any(name in lines[0] for name in case.names):
            problems.append(f"the error names none of {case.names}")
    after = state(workdir)
    if changed_files(before[1], after[1]):
        problems.append(f"changed checkpoint files {changed_files(before[1], after[1])[:3]}")
    if status == 2 and changed_files(before[0], after[0]):
        problems.append(f"refused, but changed {changed_files(before[0], after[0])[:3]}")
    if status == 0 and case.counted and os.path.exists(os.path.join(workdir, "metrics.jsonl")):
        problems += [p for p in [uncounted(case, workdir, inputs)] if p]
    return problems


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_fuzz_bad_input_ends_with_status_0_or_a_one_line_error_and_keeps_checkpoints(
    case, tmp_path
):
    workdir, inputs = set_up(case, str(tmp_path))
    before = state(workdir)
    started = time.monotonic()
    try:
        run = run_program(case.program, program_flags(case, workdir, inputs), timeout=TIMEOUT_S)
        status, stderr = run.returncode, run.stderr
    except TimeoutError:
        status, stderr = None, f"still running after {TIMEOUT_S} s (killed)"
    seconds = time.monotonic() - started
    problems = problems_of(case, status, stderr, workdir, inputs, before)
    outcome = "bad" if problems else f"exit {status}"
    last = (stderr.strip().splitlines() or [""])[-1][:300]
    RESULTS.append(
        {"case": case.id, "outcome": outcome, "status": status, "seconds": round(seconds, 1),
         "problems": problems, "stderr": last}
    )  # fmt: skip
    assert not problems, f"{case.id}: {'; '.join(problems)}\n{stderr[-3000:]}"


def test_the_cases_send_input_files_as_drawn_and_draw_every_mutation_kind():
    """The first 300 cases of seed 0 (any count starts with them): a damaged --input file
    goes to evaluate.py with its bytes as drawn (not UTF-8 where its mutation says so), and
    absurd decoding sizes and counted malformed training lines are among them."""
    cases = make_cases(0, 300)
    not_utf8 = [c for c in cases if c.mutation.startswith("input_not_utf8:")]
    assert len(not_utf8) > 10
    for case in not_utf8:
        ((_, content),) = case.inputs
        with pytest.raises(UnicodeDecodeError):
            content.decode("utf-8")
    assert any(c.mutation == "eval_huge_sizes" for c in cases)
    assert any(c.counted for c in cases)
    # Each expected outcome is drawn, and an impossible size is always refused.
    assert {c.expect for c in cases} == {REFUSED, ACCEPTED, ""}
    assert all(c.expect == REFUSED for c in cases if c.mutation == "size_impossible")
