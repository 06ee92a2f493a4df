"""A Marian (opus-mt) directory as a translation run: asked with no training (evaluate.py
--init_from, Translator.load), fine-tuned through train.py and resumed after kill -9,
scored, and exported back to a Marian directory; every translation compared with
transformers' MarianMTModel.generate on the same text, through MarianTokenizer.

The Marian directories are random-weight models built in the test (helpers/marian_directories.py);
nothing is downloaded."""

import json
import os
import signal

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax
import numpy as np
import pytest
import torch
import transformers
from marian_directories import GERMAN, SPANISH, corpus, marian_model_directory
from paths import REPO
from reliability_runs import checkpoint_leaves, run_program, scratch, server, train_records
from reliability_runs import without_timing as untimed

import jaxtrans
from jaxtrans.data.tokenizers.marian_tokenizer import read_marian
from jaxtrans.errors import UserError
from jaxtrans.models.marian.marian_from_huggingface import from_huggingface
from jaxtrans.tasks.translation import translation_init
from jaxtrans.vocab import BOS_ID, PAD_ID

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
SENTENCES = GERMAN[:8]
MAX_EXTRA = 10
STEPS = 6


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """German -> Spanish, random weights; EOS biased so that some translations end at
    once and others run to their length limit."""
    path = tmp_path_factory.mktemp("opus") / "opus-mt-de-es"
    return marian_model_directory(path, corpus(GERMAN), corpus(SPANISH), eos_bias=7.0)


def marian_translate(path, sentences, num_beams: int = 1) -> list[str]:
    """transformers' way, one sentence at a time: jaxtrans's length limit (source ids +
    MAX_EXTRA), beam search with length_penalty 1.0 run until no beam can improve."""
    tokenizer = transformers.MarianTokenizer.from_pretrained(path)
    model = transformers.MarianMTModel.from_pretrained(path).eval()
    out = []
    for sentence in sentences:
        inputs = tokenizer([sentence], return_tensors="pt")
        with torch.no_grad():
            tokens = model.generate(
                **inputs, num_beams=num_beams, do_sample=False, length_penalty=1.0,
                early_stopping="never", forced_eos_token_id=None,
                max_new_tokens=inputs["input_ids"].shape[1] + MAX_EXTRA,
            )  # fmt: skip
        out.append(tokenizer.decode(tokens[0], skip_special_tokens=True))
    return out


def refused(capsys, main, *flags) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["program", *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


# ------------------------------------------------------------------ asked as it is


def test_evaluate_init_from_translates_input_as_marian_generate(marian, tmp_path):
    from jaxtrans.programs.evaluate import main

    source = tmp_path / "input.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "output.txt"
    main(["evaluate.py", "--init_from", marian, "--input", str(source), "--output",
          str(output), "--beam_size", "1", "--max_extra_length", str(MAX_EXTRA)])  # fmt: skip
    got = output.read_text(encoding="utf-8").splitlines()
    expected = marian_translate(marian, SENTENCES)
    assert got == expected
    assert "" in expected and any(len(t) > 20 for t in expected)  # both ways of ending


def test_translator_load_beam_search_equals_marian_generate(marian):
    translator = jaxtrans.Translator.load(marian)
    assert translator.settings().options.penalty_form == "hf"  # transformers' default
    got = translator.translate(SENTENCES, beam_size=4, max_extra_length=MAX_EXTRA)
    expected = marian_translate(marian, SENTENCES, num_beams=4)
    assert got == expected
    assert "" in expected and any(len(t) > 20 for t in expected)  # both ways of ending


def test_a_split_of_a_marian_directory_is_scored_like_a_trained_run(marian, tmp_path):
    from jaxtrans.programs.evaluate import main

    test = tmp_path / "test.tsv"
    test.write_text(
        "".join(f"{g}\t{s}\n" for g, s in zip(GERMAN, SPANISH, strict=True)), encoding="utf-8"
    )
    outdir = tmp_path / "reports"
    main(["evaluate.py", "--init_from", marian, "--config",
          f"{REPO}/configs/marian_finetune.py", f"--config.data.test={test}",
          "--config.model.dtype=float32",
          "--outdir", str(outdir), "--beam_size", "1"])  # fmt: skip
    (report,) = [json.loads(p.read_text()) for p in outdir.glob("test-step0-*.json")]
    assert report["num_sentences"] == len(GERMAN)
    assert "the weights of" in report["checkpoint"]
    hypotheses = (outdir / report["hypotheses_file"]).read_text(encoding="utf-8").splitlines()
    assert hypotheses[:3] == jaxtrans.Translator.load(marian).translate(GERMAN[:3], beam_size=1)


def test_an_untrained_marian_directory_is_refused_where_it_cannot_serve(marian, capsys, tmp_path):
    from jaxtrans.programs.evaluate import main

    assert "one set of weights" in refused(
        capsys, main, "--init_from", marian, "--checkpoint", "3", "--input", "-"
    )
    assert "model_type='marian'; only 'bert' checkpoints" in refused(
        capsys, main, "--init_from", marian, "--task", "bert_pretraining", "--input", "-"
    )
    with pytest.raises(UserError, match="no config.json; is this a jaxtrans workdir"):
        jaxtrans.Translator.load(str(tmp_path))


# ------------------------------------------------------------------ fine-tuned


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs")
    lines = [
        f"{g}\t{s}\n"
        for g, s in zip(corpus(GERMAN, 200), corpus(SPANISH, 200, seed=1), strict=True)
    ]
    for split, part in (("train", lines), ("dev", lines[:20]), ("test", lines[20:40])):
        (folder / f"{split}.tsv").write_text("".join(part), encoding="utf-8")
    return folder


def fine_tuning_flags(marian, pair_files) -> list[str]:
    values = {
        "init_from": marian,
        "data.train": pair_files / "train.tsv",
        "data.dev": pair_files / "dev.tsv",
        "data.test": pair_files / "test.tsv",
        "data.batch_size": 4,
        "data.max_source_length": 48,
        "data.max_target_length": 48,
        "model.dropout_rate": 0.1,  # resuming must repeat the dropout masks too
        "model.dtype": "float32",  # the recipe's bfloat16 off: compared with transformers
        "optimizer.learning_rate": 1e-3,
        "optimizer.warmup_steps": 2,
        "train.num_steps": STEPS,
        "train.log_every": 1,
        "train.checkpoint_every": 2,
        "train.eval_every": 0,
        "train.compilation_cache_dir": os.path.join(scratch(), "xla"),
    }
    flags = [f"--config.{key}={value}" for key, value in values.items()]
    return ["--config", "configs/marian_finetune.py", *flags]


@pytest.fixture(scope="module")
def fine_tuned(marian, pair_files, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fine-tuned") / "run"
    run = run_program(
        "train.py", [*fine_tuning_flags(marian, pair_files), "--workdir", str(workdir)]
    )
    assert run.returncode == 0, run.stderr
    return workdir


def test_fine_tuning_starts_from_the_directorys_weights_and_vocabulary(marian, fine_tuned):
    from jaxtrans.tasks import restore_task

    task = restore_task(str(fine_tuned))
    config, params = from_huggingface(marian)
    assert task.model_config.replace(dropout_rate=0.0) == config.replace(dropout_rate=0.0)
    assert task.model_config.dropout_rate == 0.1  # a fine-tuning field of the run
    assert task.tokenizer.encode_source(SENTENCES[0]) == (
        read_marian(marian).encode_source(SENTENCES[0])
    )
    start = task.initial_params(jax.tree.map(np.zeros_like, params))
    for got, want in zip(jax.tree.leaves(start), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    records = train_records(str(fine_tuned))
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert records[-1]["loss"] < records[0]["loss"]


def test_a_killed_fine_tuning_run_resumes_bitwise(marian, pair_files, fine_tuned, tmp_path):
    workdir = tmp_path / "killed"
    flags = [*fine_tuning_flags(marian, pair_files), "--workdir", str(workdir)]
    run = server().start("train.py", flags, stdout=str(tmp_path / "out"),
                         stderr=str(tmp_path / "err"))  # fmt: skip
    # Saving checkpoint 4 waits for checkpoint 2's asynchronous write: by step 5 it is whole.
    run.wait_for_output(f"step {5:>7}/")
    os.kill(run.pid, signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    rerun = run_program("train.py", flags)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming from checkpoint" in rerun.stdout
    assert [untimed(r) for r in train_records(str(workdir))] == [
        untimed(r) for r in train_records(str(fine_tuned))
    ]
    for got, want in zip(
        checkpoint_leaves(str(workdir), STEPS), checkpoint_leaves(str(fine_tuned), STEPS),
        strict=True,
    ):  # fmt: skip
        np.testing.assert_array_equal(got, want)


def test_the_fine_tuned_run_exports_to_a_marian_directory_transformers_translates_alike(
    fine_tuned, tmp_path, capsys
):
    from jaxtrans.programs.export import main

    output = tmp_path / "exported"
    main(["export", "--workdir", str(fine_tuned), "--output", str(output)])
    assert "Hugging Face Marian" in capsys.readouterr().out
    ours = jaxtrans.Translator.load(str(fine_tuned))
    assert ours.translate(SENTENCES, beam_size=1, max_extra_length=MAX_EXTRA) == (
        marian_translate(str(output), SENTENCES)
    )
    # And jaxtrans reads its own export back to the same parameters, but for the padding
    # row of each token table: Marian has no row of its own for padding (its pad is its
    # decoder start), so the start row stands in for it, zero in the embedding tables (the
    # decoder starts from a zero vector). Padding is never predicted.
    _, params = from_huggingface(str(output))
    vocab_size = ours.task.model_config.vocab_size
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(ours.params), strict=True):
        want = np.array(want)
        if want.shape[0] == vocab_size:  # a token table: embeddings, final_logits_bias
            want[PAD_ID] = want[BOS_ID] = 0 if want.ndim == 2 else want[BOS_ID]
        np.testing.assert_array_equal(got, want)


def test_a_scanned_fine_tuning_run_trains_and_exports_as_the_per_layer_run(
    marian, pair_files, tmp_path, capsys
):
    """model.scan_layers=True, without dropout (so that the steps are the same however the
    layers are computed): the per-layer run's losses, and python -m jaxtrans.export writes
    the per-layer run's Marian directory (to float32 rounding), which transformers loads
    whole (that an export translates alike is the test above's)."""
    from jaxtrans.programs.export import main
    from jaxtrans.tasks import restore_task

    runs = {}
    for name, scan in (("scanned", True), ("per-layer", False)):
        runs[name] = tmp_path / name
        flags = [*fine_tuning_flags(marian, pair_files), "--config.model.dropout_rate=0.0",
                 "--config.train.num_steps=3", f"--config.model.scan_layers={scan}",
                 "--workdir", str(runs[name])]  # fmt: skip
        assert run_program("train.py", flags).returncode == 0
        main(["export", "--workdir", str(runs[name]), "--output", str(tmp_path / f"{name}-hf")])
    losses, expected = ([r["loss"] for r in train_records(str(runs[n]))] for n in runs)
    assert len(losses) == 3 and len(set(losses)) == 3
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=0)
    assert "Hugging Face Marian" in capsys.readouterr().out
    ours, theirs = tmp_path / "scanned-hf", tmp_path / "per-layer-hf"
    exported, info = transformers.MarianMTModel.from_pretrained(ours, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}  # no missing or unexpected tensors
    expected = transformers.MarianMTModel.from_pretrained(theirs).state_dict()
    assert exported.state_dict().keys() == expected.keys()
    for name, tensor in exported.state_dict().items():
        # Not the key biases: softmax ignores a constant added to every score, so their
        # gradient is rounding noise, which Adam scales up to steps of the learning rate.
        if not name.endswith("k_proj.bias"):
            np.testing.assert_allclose(tensor.numpy(), expected[name].numpy(), atol=1e-6,
                                       err_msg=name)  # fmt: skip
    assert restore_task(str(runs["scanned"])).model_config.scan_layers


def test_a_run_trained_from_nothing_exports_too(tmp_path, capsys):
    """The demo's SentencePiece run (interleaved sinusoids, Marian's LayerNorm epsilon and
    zero decoder start)."""
    from tiny_configs import TINY_TRANSLATION

    from jaxtrans.programs.export import main

    workdir = tmp_path / "demo"
    values = {**TINY_TRANSLATION, "train.num_steps": 20, "model.layer_norm_epsilon": 1e-5,
              "model.decoder_start_embedding": "zero",
              "train.compilation_cache_dir": os.path.join(scratch(), "xla")}  # fmt: skip
    flags = ["--config", "configs/demo.py", *(f"--config.{k}={v}" for k, v in values.items())]
    assert run_program("train.py", [*flags, "--workdir", str(workdir)]).returncode == 0
    output = tmp_path / "exported"
    main(["export", "--workdir", str(workdir), "--output", str(output)])
    sentences = ["ke tafo miro lesa .", "miro ke lesa .", "ke lesa tafo miro miro ."]
    ours = jaxtrans.Translator.load(str(workdir))
    assert ours.translate(sentences, beam_size=1, max_extra_length=MAX_EXTRA) == (
        marian_translate(str(output), sentences)
    )


def test_settings_a_directory_decides_are_refused_when_contradicted(marian):
    with pytest.raises(UserError, match=r"model.d_model=64 contradicts .* d_model=32"):
        translation_init.pretrained_model_config(marian, {"d_model": 64})
    config = translation_init.pretrained_model_config(
        marian, {"d_model": None, "dropout_rate": 0.3, "d_ff": 64}
    )
    assert (config.d_model, config.dropout_rate) == (32, 0.3)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--config.init_from="], "--config.init_from is required"),
        (["--config.data.tokenizer=sentencepiece2"], "uses that directory's tokenizer"),
        (["--config.model.d_model=64"], "d_model"),
    ],
)
def test_bad_fine_tuning_settings_are_one_line_errors(marian, pair_files, tmp_path, extra, says):
    workdir = tmp_path / "run"
    run = run_program("train.py", [*fine_tuning_flags(marian, pair_files), *extra,
                                   "--workdir", str(workdir)])  # fmt: skip
    assert run.returncode == 2, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("error:")]
    assert says in line
    assert not (workdir / "checkpoints").exists()


def test_a_bert_directory_is_not_a_translation_model(tmp_path, pair_files):
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32)  # fmt: skip
    transformers.BertModel(config).save_pretrained(tmp_path / "bert")
    with pytest.raises(UserError, match="holds a bert model"):
        translation_init.check_directory(str(tmp_path / "bert"), "--config.init_from")
