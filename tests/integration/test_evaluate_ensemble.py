"""evaluate.py --ensemble on the small saved run (tests/helpers/evaluate_runs.py): reports
of one and two members, input lines with n-best lists and prefixes, members that cannot
decode together."""

import json
import shutil

import pytest
from evaluate_runs import LINES, evaluate, make_saved_run

from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
from jaxtrans.tasks import restore_task


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    return make_saved_run(tmp_path_factory)


@pytest.fixture(scope="module")
def workdir(saved_run):
    return saved_run[0]


def test_an_ensemble_of_one_reports_as_its_model_and_of_two_lists_its_members(workdir, tmp_path):
    flags = ("--split=dev", f"--outdir={tmp_path}", "--max_extra_length=4")
    evaluate(f"--workdir={workdir}", *flags)
    evaluate(f"--ensemble={workdir}", *flags)
    evaluate(f"--ensemble={workdir}:100,{workdir}:avg:2", *flags)
    alone = tmp_path / "dev-step200-beam2-maxextra4"
    [one] = [p.with_suffix("") for p in tmp_path.glob("dev-ensemble1-*-beam2-maxextra4.json")]
    [two] = [p.with_suffix("") for p in tmp_path.glob("dev-ensemble2-*-beam2-maxextra4.json")]
    hypotheses = alone.with_suffix(".hyp.txt").read_text()
    assert one.with_suffix(".hyp.txt").read_text() == hypotheses
    single, report = (json.loads(path.with_suffix(".json").read_text()) for path in (alone, one))
    assert report["bleu"] == single["bleu"] and report["step"] == 200
    assert report["members"] == [{"path": str(workdir), "checkpoint": "step 200"}]
    report = json.loads(two.with_suffix(".json").read_text())
    assert report["members"] == [
        {"path": str(workdir), "checkpoint": "step 100"},
        {"path": str(workdir), "checkpoint": "average of steps [100, 200]"},
    ]
    assert report["checkpoint"].startswith("ensemble of 2: ") and report["num_sentences"] == 6
    markdown = two.with_suffix(".md").read_text()
    assert markdown.startswith("# dev, an ensemble of 2: BLEU") and "| member 2 |" in markdown


def test_an_ensemble_answers_input_lines_with_nbest_lists_and_prefixes(workdir, tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    evaluate(f"--ensemble={workdir}:100,{workdir}", f"--input={source}", f"--output={output}",
             "--max_extra_length=4", "--nbest=2", "--prefix=the small")  # fmt: skip
    answers = [json.loads(line) for line in output.read_text().splitlines()]
    assert [answer["source"] for answer in answers] == LINES
    for answer in answers:
        assert len(answer["hypotheses"]) == 2
        assert all(h["text"].startswith("the small") for h in answer["hypotheses"])


@pytest.fixture(scope="module")
def other_tokenizer_run(saved_run, tmp_path_factory):
    """A copy of the saved run whose tokenizer was trained otherwise (BPE), of the same size."""
    workdir = tmp_path_factory.mktemp("other") / "run"
    shutil.copytree(saved_run[0], workdir)
    shutil.rmtree(workdir / "tokenizer")
    data_config = get_data_config()
    data_config.update(vocab_size=200, demo_train_size=2000, spm_model_type="bpe")
    tokenizer = load_or_train_tokenizer(data_config, str(workdir))
    assert (
        tokenizer.source_vocab_size == restore_task(str(saved_run[0])).tokenizer.source_vocab_size
    )
    return workdir


def test_members_with_different_tokenizers_are_a_one_line_error(workdir, other_tokenizer_run,
                                                                capsys):  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        evaluate(f"--ensemble={workdir},{other_tokenizer_run}:100", "--split=dev")
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message
    assert f"members {workdir} and {other_tokenizer_run} have different tokenizers" in message
