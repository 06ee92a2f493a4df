"""The evaluate.py program on a small workdir: reports, averaged checkpoints, files, plots
(ensembles: test_evaluate_ensemble.py)."""

import io
import json
import shutil

import jax
import ml_collections
import numpy as np
import pytest
import sacrebleu
from evaluate_runs import LINES, evaluate, make_saved_run

from jaxtrans.data.translation.sources import load_split
from jaxtrans.errors import UserError
from jaxtrans.inference.options import SearchOptions
from jaxtrans.tasks import restore_task
from jaxtrans.tasks.translation.decoding_settings import decoding_name, decoding_settings


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    return make_saved_run(tmp_path_factory)


@pytest.fixture(scope="module")
def workdir(saved_run):
    return saved_run[0]


def test_evaluate_reports_bleu_of_the_latest_checkpoint(workdir, tmp_path):
    evaluate(f"--workdir={workdir}", "--split=dev", f"--outdir={tmp_path}", "--max_extra_length=4")
    # Beam 2 from the run config's eval section; max_extra_length differs from it.
    report = json.loads((tmp_path / "dev-step200-beam2-maxextra4.json").read_text())
    assert (report["step"], report["split"], report["checkpoint"]) == (200, "dev", "step 200")
    assert report["beam_size"] == 2
    assert (report["num_sentences"], report["lines_read"], report["lines_skipped"]) == (6, 6, 0)
    data_config = ml_collections.ConfigDict(json.loads((workdir / "config.json").read_text())).data
    references = [pair.target for pair in load_split(data_config, "dev")]
    hypotheses = (tmp_path / "dev-step200-beam2-maxextra4.hyp.txt").read_text().splitlines()
    assert report["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score


def test_averaged_checkpoints_get_their_own_report(workdir, tmp_path):
    evaluate(
        f"--workdir={workdir}", "--split=test", "--checkpoint=avg:2", f"--outdir={tmp_path}",
        "--beam_size=1", "--max_extra_length=4",
    )  # fmt: skip
    report = json.loads((tmp_path / "test-step200-avg2-greedy-maxextra4.json").read_text())
    assert report["checkpoint"] == "average of steps [100, 200]"
    assert not (tmp_path / "test-step200-greedy-maxextra4.json").exists()


def test_greedy_and_beam_reports_of_one_checkpoint_both_survive(workdir, tmp_path):
    for beam in ("1", "4"):
        evaluate(f"--workdir={workdir}", f"--outdir={tmp_path}", f"--beam_size={beam}",
                 "--max_extra_length=4")  # fmt: skip
    greedy = json.loads((tmp_path / "test-step200-greedy-maxextra4.json").read_text())
    beam = json.loads((tmp_path / "test-step200-beam4-maxextra4.json").read_text())
    assert (greedy["beam_size"], beam["beam_size"]) == (1, 4)
    assert greedy["hypotheses_file"] == "test-step200-greedy-maxextra4.hyp.txt"
    assert beam["hypotheses_file"] == "test-step200-beam4-maxextra4.hyp.txt"
    names = {path.name for path in tmp_path.iterdir()}
    for stem in ("test-step200-greedy-maxextra4", "test-step200-beam4-maxextra4"):
        assert {f"{stem}.json", f"{stem}.md", f"{stem}.hyp.txt"} <= names


def test_logits_processors_get_a_report_of_their_own_that_records_them(workdir, tmp_path):
    processors = ["--repetition_penalty=1.2", "--no_repeat_ngram_size=3"]
    evaluate(f"--workdir={workdir}", f"--outdir={tmp_path}", "--beam_size=2",
             "--max_extra_length=4", *processors)  # fmt: skip
    report = json.loads((tmp_path / "test-step200-beam2-maxextra4-rep1.2-norep3.json").read_text())
    assert (report["repetition_penalty"], report["no_repeat_ngram_size"]) == (1.2, 3)


def test_a_length_penalty_of_its_own_gets_a_report_of_its_own(workdir, tmp_path):
    for alpha in ("0.6", "1.0"):  # 0.6: the run config's (the default)
        evaluate(f"--workdir={workdir}", f"--outdir={tmp_path}", "--beam_size=2",
                 f"--alpha={alpha}", "--max_extra_length=4")  # fmt: skip
    assert json.loads((tmp_path / "test-step200-beam2-maxextra4.json").read_text())["alpha"] == 0.6
    other = json.loads((tmp_path / "test-step200-beam2-alpha1.0-maxextra4.json").read_text())
    assert other["alpha"] == 1.0


def test_skipped_malformed_test_lines_are_counted_in_the_report(saved_run, tmp_path, capsys):
    workdir = tmp_path / "run"
    shutil.copytree(saved_run[0], workdir)
    lines = ["ta ovo\tthe egg", "no tab here", "sul\tthe road", "\tempty source",
             "tu vako\tyou slept", '{"not": "tsv"}']  # fmt: skip
    test_file = tmp_path / "test.tsv"
    test_file.write_text("".join(line + "\n" for line in lines))
    config = json.loads((workdir / "config.json").read_text())
    config["data"].update(test=str(test_file), skip_malformed=True)
    (workdir / "config.json").write_text(json.dumps(config))

    evaluate(f"--workdir={workdir}", f"--outdir={tmp_path}", "--beam_size=1",
             "--max_extra_length=4")  # fmt: skip

    stem = "test-step200-greedy-maxextra4"
    report = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (report["lines_read"], report["lines_skipped"], report["num_sentences"]) == (6, 3, 3)
    assert len((tmp_path / f"{stem}.hyp.txt").read_text().splitlines()) == 3
    said = "3 sentences (6 lines read, 3 malformed skipped)"
    assert f"| sentences | {said} |" in (tmp_path / f"{stem}.md").read_text()
    assert said in capsys.readouterr().out


def test_input_file_is_translated_line_by_line(workdir, tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("hello\n\nthe small cat\nok\nyes, no\nstop\n")
    evaluate(f"--workdir={workdir}", f"--input={source}", f"--output={output}",
             "--beam_size=1", "--max_extra_length=4")  # fmt: skip
    assert len(output.read_text().splitlines()) == 6


def test_sampling_stdin_prints_a_line_per_input_the_same_for_the_same_seed(
    workdir, monkeypatch, capsys
):
    lines = "hello\nthe small cat\nok\nyes, no\n"

    def sample(*flags: str) -> list[str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
        evaluate(f"--workdir={workdir}", "--input=-", "--sampling", "--max_extra_length=6", *flags)
        return capsys.readouterr().out.splitlines()

    first = sample("--seed=1")
    assert len(first) == 4
    assert sample("--seed=1") == first
    # An untrained model samples its 200 tokens nearly uniformly: seed 2 differs.
    assert sample("--seed=2") != first
    # Temperature 0 is greedy search.
    greedy = sample("--temperature=0")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    evaluate(f"--workdir={workdir}", "--input=-", "--beam_size=1", "--max_extra_length=6")
    assert capsys.readouterr().out.splitlines() == greedy
    for flags, said in (
        (["--beam_size=4"], "error: sampling with beam_size=4: "),
        (["--top_p=0"], "error: top_p=0.0: must be in (0, 1]"),
    ):
        with pytest.raises(SystemExit):
            sample(*flags)
        assert capsys.readouterr().err.startswith(said)


def test_a_sampled_split_gets_a_report_of_its_own_with_its_settings(workdir, tmp_path):
    def report(*flags: str) -> dict:
        evaluate(f"--workdir={workdir}", "--split=dev", f"--outdir={tmp_path}", "--sampling",
                 "--max_extra_length=4", *flags)  # fmt: skip
        name = "dev-step200-sample-t0.7-k0-p0.9-s1-maxextra4"
        return json.loads((tmp_path / f"{name}.json").read_text()), tmp_path / f"{name}.hyp.txt"

    first, hypotheses = report("--temperature=0.7", "--top_p=0.9", "--seed=1")
    assert first["beam_size"] == 1 and first["num_sentences"] == 6
    assert first["sampling"] == {"temperature": 0.7, "top_k": 0, "top_p": 0.9, "seed": 1}
    drawn = hypotheses.read_text()
    again, _ = report("--temperature=0.7", "--top_p=0.9", "--seed=1")
    assert hypotheses.read_text() == drawn and again["bleu"] == first["bleu"]


def translate_file(workdir, tmp_path, lines: list[str], *flags: str) -> list[str]:
    """The output lines of evaluate.py --input over ``lines``."""
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines))
    evaluate(f"--workdir={workdir}", f"--input={source}", f"--output={output}",
             "--max_extra_length=4", *flags)  # fmt: skip
    return output.read_text().splitlines()


def test_nbest_input_answers_a_json_list_a_line_headed_by_the_plain_translation(workdir, tmp_path):
    plain = translate_file(workdir, tmp_path, LINES, "--beam_size=3")
    listed = translate_file(workdir, tmp_path, LINES, "--beam_size=3", "--nbest=3")
    answers = [json.loads(line) for line in listed]
    assert [answer["source"] for answer in answers] == LINES
    for answer, translation in zip(answers, plain, strict=True):
        hypotheses = answer["hypotheses"]
        assert len(hypotheses) == 3 and len({h["text"] for h in hypotheses}) > 1
        assert hypotheses[0]["text"] == translation
        scores = [h["score"] for h in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert all(h["logprob"] <= h["score"] < 0 for h in hypotheses)  # penalty > 1: alpha 0.6


def test_a_split_with_nbest_writes_the_lists_beside_the_same_report(workdir, tmp_path):
    for outdir, flags in ((tmp_path / "plain", []), (tmp_path / "nbest", ["--nbest=2"])):
        evaluate(f"--workdir={workdir}", "--split=dev", f"--outdir={outdir}",
                 "--max_extra_length=4", *flags)  # fmt: skip
    stem = "dev-step200-beam2-maxextra4"  # nbest does not change the report's name
    plain = json.loads((tmp_path / "plain" / f"{stem}.json").read_text())
    report = json.loads((tmp_path / "nbest" / f"{stem}.json").read_text())
    assert (report["bleu"], report["chrf"]) == (plain["bleu"], plain["chrf"])
    assert (report["nbest"], report["nbest_file"]) == (2, f"{stem}.nbest.jsonl")
    assert "nbest" not in plain and not (tmp_path / "plain" / f"{stem}.nbest.jsonl").exists()
    hypotheses = (tmp_path / "nbest" / f"{stem}.hyp.txt").read_text().splitlines()
    lists = [json.loads(line) for line in (tmp_path / "nbest" / f"{stem}.nbest.jsonl").open()]
    assert len(lists) == report["num_sentences"] == 6
    assert [listed["hypotheses"][0]["text"] for listed in lists] == hypotheses
    assert all(len(listed["hypotheses"]) == 2 for listed in lists)


@pytest.mark.parametrize("decoding", [["--beam_size=1"], ["--beam_size=2"], ["--sampling"]])
def test_prefix_flags_force_how_each_translation_starts(workdir, tmp_path, decoding):
    for line in translate_file(workdir, tmp_path, LINES, "--prefix=the small", *decoding):
        assert line.startswith("the small")
    tabbed = ["hello\tthe man", "ok\t", "yes, no\ta dog"]
    forced = translate_file(workdir, tmp_path, tabbed, "--prefix_from_input", *decoding)
    assert forced[0].startswith("the man") and forced[2].startswith("a dog")
    # An empty prefix is none (a sample too: sentence i draws with its own key).
    plain = translate_file(workdir, tmp_path, [line.split("\t")[0] for line in tabbed], *decoding)
    assert forced[1] == plain[1] and forced[0] != plain[0]


def test_plot_attention_writes_the_pictures(workdir, tmp_path):
    png = tmp_path / "attn.png"
    evaluate(f"--workdir={workdir}", "--plot_attention=the small cat", f"--output={png}",
             "--beam_size=1", "--max_extra_length=4")  # fmt: skip
    for path in (png, tmp_path / "attn-masks.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "flags",
    [
        ["--split=dev"],  # no --workdir
        ["--workdir={missing}"],
        ["--workdir={workdir}", "--checkpoint=300"],
        ["--workdir={workdir}", "--checkpoint=avg:3"],
        ["--workdir={workdir}", "--split=train"],
        ["--workdir={workdir}", "--output=x.txt"],
        ["--workdir={workdir}", "--input={workdir}/config.json", "--sampling", "--beam_size=4"],
        ["--workdir={workdir}", "--input={workdir}/config.json", "--sampling", "--top_p=0"],
        ["--workdir={workdir}", "--input={workdir}/config.json", "--nbest=3"],  # beam 2
        ["--workdir={workdir}", "--input={workdir}/config.json", "--sampling", "--nbest=1"],
        ["--workdir={workdir}", "--prefix=the"],  # no --input
        ["--workdir={workdir}", "--repetition_penalty=0"],
        ["--workdir={workdir}", "--no_repeat_ngram_size=-1"],
        ["--workdir={workdir}", "--input=-", "--prefix=a", "--prefix_from_input"],
        ["--workdir={workdir}", "--input={workdir}/config.json", "--prefix_from_input"],  # no TAB
        ["--ensemble={workdir}", "--checkpoint=100"],  # each member names its own
        ["--ensemble={workdir}", "--workdir={workdir}"],
        ["--ensemble={workdir}", "--plot_attention=the cat"],
        ["--ensemble={workdir},{workdir}:avg:x"],
        ["--ensemble={workdir},"],
        ["--ensemble={workdir},{missing}"],
        ["--ensemble={workdir},{workdir}:300"],
    ],
)
def test_bad_requests_exit_with_status_2(workdir, tmp_path, flags, capsys):
    flags = [f.format(workdir=workdir, missing=tmp_path / "nothing") for f in flags]
    with pytest.raises(SystemExit) as exit_info:
        evaluate(*flags)
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: ") and "\n" not in message


def refusal(capsys, *flags: str) -> str:
    """The one line evaluate.py exits with, status 2."""
    with pytest.raises(SystemExit) as exit_info:
        evaluate(*flags)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize(
    "flag, said",
    [
        ("--beam_size=100000", "beam_size=100000 is wider than the target vocabulary"),
        ("--nbest=1000000000", "nbest=1000000000: the list is drawn from the beam"),
        ("--max_extra_length=1000000000", "learned positions end at model.max_len=64"),
        ("--batch_size=1000000000", "GiB a decoding batch may take"),
    ],
)
def test_decoding_sizes_beyond_the_model_are_refused_in_one_line(workdir, tmp_path, flag, said,
                                                                 capsys):  # fmt: skip
    source = tmp_path / "input.txt"
    source.write_text("hello world\n", encoding="utf-8")
    assert said in refusal(capsys, f"--workdir={workdir}", f"--input={source}", flag)
    assert said in refusal(capsys, f"--workdir={workdir}", f"--outdir={tmp_path}", flag)
    assert not list(tmp_path.glob("*.json"))  # refused before decoding the split


@pytest.mark.parametrize(
    "content, line",
    [
        (b"hello\n\xe9t\xe9\n", 2),  # latin-1
        ("日本\n".encode()[:-2] + b"\n", 1),  # a character cut short
        ("hello\n".encode("utf-16"), 1),
    ],
)
def test_an_input_file_that_is_not_utf8_is_refused_naming_its_line(workdir, tmp_path, content,
                                                                  line, capsys):  # fmt: skip
    source = tmp_path / "input.txt"
    source.write_bytes(content)
    said = refusal(capsys, f"--workdir={workdir}", f"--input={source}")
    assert said.startswith(f"error: --input {source}:{line}: not UTF-8 text (byte ")


def test_stdin_that_is_not_utf8_is_refused_like_a_file(workdir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hello\n\xff\n")))
    said = refusal(capsys, f"--workdir={workdir}", "--input=-")
    assert said.startswith("error: --input -:2: not UTF-8 text (byte 6)")


def test_restored_parameters_are_those_saved(saved_run):
    workdir, saved = saved_run
    restored = restore_task(str(workdir)).restore_params("100")
    assert restored.step == 100
    for a, b in zip(jax.tree.leaves(restored.params), jax.tree.leaves(saved[100]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_report_names_tell_every_decoding_that_changes_the_output_apart():
    run = SearchOptions()
    names = {
        decoding_name(run.replace(**changed), run): changed
        for changed in (
            {}, {"beam_size": 1}, {"beam_size": 2}, {"alpha": 1.0}, {"alpha": 0.65},
            {"max_extra_length": 10}, {"beam_size": 1, "max_extra_length": 10},
            {"alpha": 1.0, "max_extra_length": 10}, {"penalty_form": "hf"},
            {"alpha": 1.0, "penalty_form": "hf"}, {"repetition_penalty": 1.2},
            {"no_repeat_ngram_size": 3}, {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3},
            {"beam_size": 1, "max_extra_length": 10, "repetition_penalty": 0.9},
        )
    }  # fmt: skip
    assert list(names) == [
        "beam4", "greedy", "beam2", "beam4-alpha1.0", "beam4-alpha0.65", "beam4-maxextra10",
        "greedy-maxextra10", "beam4-alpha1.0-maxextra10", "beam4-hf", "beam4-alpha1.0-hf",
        "beam4-rep1.2", "beam4-norep3", "beam4-rep1.2-norep3", "greedy-maxextra10-rep0.9",
    ]  # fmt: skip
    # Greedy search has no length penalty, and batch_size changes no output.
    assert decoding_name(run.replace(beam_size=1, alpha=1.0), run) == "greedy"
    assert decoding_name(run.replace(beam_size=1, penalty_form="hf"), run) == "greedy"
    assert decoding_name(run.replace(batch_size=8), run) == "beam4"


def test_decoding_settings_come_from_flags_then_the_config_then_the_defaults():
    config = ml_collections.ConfigDict({"eval": {"alpha": 1.0, "penalty_form": "hf"}})
    settings = decoding_settings(config, alpha=0.8, beam_size=None, no_repeat_ngram_size=2)
    want = SearchOptions(alpha=0.8, penalty_form="hf", no_repeat_ngram_size=2)
    assert settings == (want, 0)
    assert decoding_settings(ml_collections.ConfigDict()).options == SearchOptions()
    config.eval.repetition_penalty = 1.3  # the eval section holds the processors too
    assert decoding_settings(config).options.repetition_penalty == 1.3
    config.eval.penalty_form = "GNMT"
    with pytest.raises(UserError, match=r"eval.penalty_form='GNMT': use gnmt .* or hf"):
        decoding_settings(config)
