"""Export to Hugging Face (python -m jaxtrans.export): transformers' BertFor* classes load
what is written and compute what jaxtrans computes; from_huggingface gives a workdir's
parameters back; the tokenizer files give the run's ids (a trained run's here, any
tokenizer kind in test_bert_export_tokenizers.py); bad input is one line, exit 2, nothing
written."""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers
from tiny_configs import REPO, TINY_PRETRAINING

from jaxtrans.data.tokenizers.bert_tokenizer import SentencePieceBertTokenizer
from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
from jaxtrans.models.bert.bert_model import (
    BertConfig,
    BertForClassification,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForTokenClassification,
)
from jaxtrans.programs.export import main
from jaxtrans.tasks import restore_task, train_and_evaluate
from jaxtrans.tasks.bert.bert_export import write_model_files

TOL = 1e-5
SMALL = dict(vocab_size=99, d_model=32, num_heads=4, d_ff=37, num_layers=2, max_len=24)
# head kind: (jaxtrans model, transformers class, activation, labels)
HEADS = {
    "pretraining": (BertForPretraining, transformers.BertForPreTraining, "gelu", None),
    "classification": (
        BertForClassification, transformers.BertForSequenceClassification, "gelu_tanh",
        ["neg", "neutral", "pos"],
    ),
    "token_classification": (
        BertForTokenClassification, transformers.BertForTokenClassification, "relu",
        ["O", "B-LOC", "I-LOC", "B-PER"],
    ),
    "question_answering": (
        BertForQuestionAnswering, transformers.BertForQuestionAnswering, "gelu", None,
    ),
}  # fmt: skip


def padded_batch():
    """Ids, token types and attention mask [3, 12]: both segments, two padded rows."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, SMALL["vocab_size"], size=(3, 12))
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids = np.where(mask == 1, ids, 0)
    types = np.zeros_like(ids)
    types[0, 6:] = 1
    types[1, 4:9] = 1
    return ids, types, mask


def random_params(model, seed):
    """Random parameters of ``model``'s shapes, N(0, 0.1) (LayerNorm scales 1 + N(0, 0.1)):
    no zero bias or unit scale, so that a tensor exported under the wrong name cannot go
    unnoticed. Drawn with NumPy for the shapes of ``init`` (traced, not run: faster)."""
    ids = np.ones((1, 4), np.int32)
    shapes = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.key(0), ids))["params"])
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        offset = 1.0 if path[-1].key == "scale" else 0.0
        return (offset + 0.1 * rng.standard_normal(leaf.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


@pytest.mark.parametrize("kind", HEADS)
def test_transformers_loads_the_export_and_computes_what_jaxtrans_computes(kind, tmp_path):
    ours, theirs, activation, labels = HEADS[kind]
    cfg = BertConfig(
        **SMALL, activation=activation, num_labels=len(labels or "xy"), dropout_rate=0.0
    )
    model = ours(cfg)
    params = random_params(model, seed=len(kind))
    write_model_files(tmp_path, params, cfg, theirs.__name__, labels)

    reference, info = theirs.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="eager"
    )
    assert {k: v for k, v in info.items() if v} == {}  # no missing or unexpected tensors
    reference.eval()
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["architectures"] == [theirs.__name__]
    if labels:
        assert reference.config.id2label == dict(enumerate(labels))
    ids, types, mask = padded_batch()
    got = jax.jit(model.apply)({"params": params}, ids, types, mask)
    with torch.no_grad():
        out = reference(
            input_ids=torch.tensor(ids),
            token_type_ids=torch.tensor(types),
            attention_mask=torch.tensor(mask),
        )
    expected = {
        "pretraining": (out.get("prediction_logits"), out.get("seq_relationship_logits")),
        "classification": out.get("logits"),
        "token_classification": out.get("logits"),
        "question_answering": (out.get("start_logits"), out.get("end_logits")),
    }[kind]
    real = mask.astype(bool)
    pairs = zip(got, expected, strict=True) if isinstance(got, tuple) else [(got, expected)]
    for ours_out, theirs_out in pairs:
        ours_out, theirs_out = np.asarray(ours_out), theirs_out.numpy()
        if ours_out.ndim >= 2 and ours_out.shape[:2] == mask.shape:  # per token: real ones
            ours_out, theirs_out = ours_out[real], theirs_out[real]
        np.testing.assert_allclose(ours_out, theirs_out, rtol=0, atol=TOL)


# ---------------------------------------------------------------------------------------
# A trained workdir, through the program


def export(*flags: str) -> None:
    main(["jaxtrans.export", *flags])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """configs/bert_demo.py shrunk (tiny_configs.TINY_PRETRAINING), trained 3 steps: a
    SentencePiece run with a checkpoint at step 3."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import bert_demo

    workdir = tmp_path_factory.mktemp("pretraining")
    config = bert_demo.get_config()
    config.update_from_flattened_dict(
        {**TINY_PRETRAINING, "train.num_steps": 3, "train.eval_every": 0}
    )
    train_and_evaluate(config, str(workdir))
    return workdir


def test_an_exported_pretraining_run_loads_back_to_its_own_parameters(trained, tmp_path, capsys):
    output = tmp_path / "exported"
    export("--workdir", str(trained), "--output", str(output))
    assert "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in output.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip
    task = restore_task(str(trained))
    params = jax.device_get(task.restore_params().params)
    loaded = from_huggingface(output)
    assert loaded.config == task.model_config.replace(
        num_labels=loaded.config.num_labels, classifier_dropout_rate=None
    )
    assert jax.tree.structure(loaded.params) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b, np.float32))
    _, info = transformers.BertForPreTraining.from_pretrained(output, output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}


def test_the_exported_sentencepiece_tokenizer_gives_the_runs_ids(trained, tmp_path):
    output = tmp_path / "exported"
    export("--workdir", str(trained), "--output", str(output))
    ours = SentencePieceBertTokenizer(trained / "bert_tokenizer" / "spm.model")
    theirs = transformers.AutoTokenizer.from_pretrained(output)
    texts = [
        "The old man walked to the river.",
        "  extra   spaces\tand a tab  ",
        "Ｆｕｌｌ-width, café, naïve, 東京 and zzqx?",
        "",
    ]
    for text in texts:
        assert theirs(text, add_special_tokens=False)["input_ids"] == ours.encode(text), text
    pair = theirs("the [MASK] walked", "to the river")
    expected_a = [*ours.encode("the"), ours.mask_id, *ours.encode("walked")]
    b = ours.encode("to the river")
    assert pair["input_ids"] == [ours.cls_id, *expected_a, ours.sep_id, *b, ours.sep_id]
    assert pair["token_type_ids"] == [0] * (len(expected_a) + 2) + [1] * (len(b) + 1)
    assert (theirs.pad_token_id, theirs.mask_token_id) == (ours.pad_id, ours.mask_id)


def fine_tune(root, workdir, **model) -> None:
    """configs/bert_classify.py from the Hugging Face BERT in ``root`` on its train.tsv,
    trained 2 steps without dropout (so that the steps are the same however the layers are
    computed); ``model``: more model fields."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import bert_classify

    config = bert_classify.get_config()
    config.init_from = str(root)
    config.update_from_flattened_dict(
        {
            "data.classification_train": str(root / "train.tsv"), "data.max_seq_length": 16,
            "data.batch_size": 2, "train.num_steps": 2, "train.eval_every": 0,
            "train.log_every": 1, "train.async_checkpoints": False,
            "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0,
            "model.dtype": "float32",  # the recipe's bfloat16 off: compared with transformers
            **{f"model.{key}": value for key, value in model.items()},
        }
    )  # fmt: skip
    train_and_evaluate(config, str(workdir))


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    """configs/bert_classify.py from a random Hugging Face BERT with a WordPiece
    vocabulary, trained 2 steps on a sentence-pair TSV: labels neg, pos."""
    from test_bert_predict import save_model

    root = tmp_path_factory.mktemp("fine_tuned")
    save_model(transformers.BertForMaskedLM, root, seed=3)
    train = root / "train.tsv"
    train.write_text("pos\tparis is the capital\tof france\nneg\trome , italy\nneg\ta city\n")
    fine_tune(root, root / "run")
    return root / "run"


def test_an_exported_classifier_keeps_its_labels_vocabulary_and_predictions(fine_tuned, tmp_path):
    output = tmp_path / "exported"
    export("--workdir", str(fine_tuned), "--output", str(output))
    assert sorted(p.name for p in output.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"
    ]  # fmt: skip
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(output).eval()
    assert type(reference).__name__ == "BertForSequenceClassification"
    assert reference.config.id2label == {0: "neg", 1: "pos"}
    task = restore_task(str(fine_tuned))
    params = jax.device_get(task.restore_params().params)
    for a, b in zip(
        jax.tree.leaves(from_huggingface(output).params), jax.tree.leaves(params), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    line = "rome , italy\tthe capital of france"
    ours = json.loads(task.predict([line])[0])
    tokenizer = transformers.AutoTokenizer.from_pretrained(output)
    assert tokenizer(*line.split("\t"))["input_ids"][1:-1] == [
        *task.tokenizer.encode("rome , italy"), task.tokenizer.sep_id,
        *task.tokenizer.encode("the capital of france"),
    ]  # fmt: skip
    with torch.no_grad():
        theirs = reference(**tokenizer(*line.split("\t"), return_tensors="pt")).logits
    expected = theirs.softmax(-1)[0].numpy()
    got = [ours["probabilities"][label] for label in ("neg", "pos")]
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)


def training_losses(workdir) -> list[float]:
    with open(workdir / "metrics.jsonl") as f:
        return [r["loss"] for r in map(json.loads, f) if "split" not in r]


def test_a_scanned_fine_tuning_run_trains_and_exports_as_the_per_layer_run(fine_tuned, tmp_path):
    """model.scan_layers=True: the per-layer run's losses, and python -m jaxtrans.export
    writes its Hugging Face directory (to float32 rounding), per layer, as transformers
    loads it."""
    scanned = tmp_path / "scanned"
    fine_tune(fine_tuned.parent, scanned, scan_layers=True)
    assert restore_task(str(scanned)).model_config.scan_layers
    losses, expected = training_losses(scanned), training_losses(fine_tuned)
    assert len(losses) == 2 and losses != expected[:1] * 2  # two steps, not one loss twice
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=0)

    export("--workdir", str(scanned), "--output", str(tmp_path / "scanned-hf"))
    export("--workdir", str(fine_tuned), "--output", str(tmp_path / "per-layer-hf"))
    ours, theirs = tmp_path / "scanned-hf", tmp_path / "per-layer-hf"
    names = sorted(p.name for p in theirs.iterdir())
    assert sorted(p.name for p in ours.iterdir()) == names
    for name in names:
        if name != "model.safetensors":
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    reference, info = transformers.BertForSequenceClassification.from_pretrained(
        ours, output_loading_info=True
    )
    assert {k: v for k, v in info.items() if v} == {}  # no missing or unexpected tensors
    per_layer = transformers.BertForSequenceClassification.from_pretrained(theirs)
    expected = per_layer.state_dict()
    assert reference.state_dict().keys() == expected.keys()
    for name, tensor in reference.state_dict().items():
        # Not the key biases: softmax ignores a constant added to every score, so their
        # gradient is rounding noise, which Adam scales up to steps of the learning rate.
        if not name.endswith("self.key.bias"):
            np.testing.assert_allclose(tensor.numpy(), expected[name].numpy(), atol=1e-6,
                                       err_msg=name)  # fmt: skip


# ---------------------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written


def refused(capsys, *flags: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        export(*flags)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.fixture
def pre_ln_workdir(trained, tmp_path):
    """The trained run's config (model.norm='pre' instead) and tokenizer. The setting is
    refused before any checkpoint is read, so it needs none."""
    workdir = tmp_path / "pre_ln"
    workdir.mkdir()
    config = json.loads((trained / "config.json").read_text())
    config["model"]["norm"] = "pre"
    (workdir / "config.json").write_text(json.dumps(config))
    os.symlink(trained / "bert_tokenizer", workdir / "bert_tokenizer")
    return workdir


def test_a_setting_hugging_face_bert_lacks_is_refused(pre_ln_workdir, tmp_path, capsys):
    output = tmp_path / "exported"
    err = refused(capsys, "--workdir", str(pre_ln_workdir), "--output", str(output))
    assert "model.norm='pre'" in err and "Post-LN" in err
    assert not output.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_existing_output_is_never_overwritten(trained, tmp_path, capsys):
    output = tmp_path / "exported"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    err = refused(capsys, "--workdir", str(trained), "--output", str(output))
    assert "exists and is not empty" in err
    assert [p.name for p in output.iterdir()] == ["notes.txt"]
    err = refused(capsys, "--workdir", str(trained), "--output", str(output / "notes.txt"))
    assert "is a file" in err


@pytest.mark.parametrize(
    "flags, says",
    [
        ((), "--workdir is required"),
        (("--workdir", "{run}"), "--output is required"),
        (("--workdir", "{tmp}/nothing", "--output", "{tmp}/out"), "no config.json"),
        (("--workdir", "{run}", "--output", "{tmp}/out", "--checkpoint", "7"), "step 7"),
        (("--workdir", "{run}", "--output", "{tmp}/out", "--nope=1"), "nope"),
    ],
)
def test_bad_flags_are_one_line_errors(trained, tmp_path, capsys, flags, says):
    flags = [f.format(run=trained, tmp=tmp_path) for f in flags]
    assert says in refused(capsys, *flags)
    assert not (tmp_path / "out").exists()
