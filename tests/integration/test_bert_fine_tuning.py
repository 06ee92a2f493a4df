"""BERT fine-tuning in the training loop: from a Hugging Face checkpoint and from a
pretraining workdir, classification reports checked against NumPy, init_from errors.
(Pretraining: test_bert_pretraining.py.)"""

import dataclasses
import json
import os
import sys

import bert_training_runs
from bert_training_runs import (
    PRETRAINING_STEPS,
    TINY_PRETRAINING,
    assert_trees_equal,
    checkpoint_params,
    log_softmax,
    read_records,
    tiny_pretraining_config,
)
from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model is built here, not fetched

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers

from jaxtrans.data.bert.classification import EncodeExample, pad_example, read_labelled_texts
from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_model import BertForClassification, BertModel
from jaxtrans.tasks import evaluate_workdir, load_task, train_and_evaluate
from jaxtrans.tasks.bert.bert_task import FINE_TUNING_FIELDS, bert_config

sys.path.insert(0, REPO)

# The shared fixtures, named here so that pytest finds them in this module: the module's
# compilation cache (autouse) and the tiny pretraining run.
compilation_cache = bert_training_runs.compilation_cache
pretrained = bert_training_runs.pretrained

from configs import bert_classify  # noqa: E402


def classification_config(init_from, train, dev, **overrides):
    config = bert_classify.get_config()
    config.init_from = str(init_from)
    config.data.classification_train = str(train)
    config.data.classification_dev = str(dev)
    config.update_from_flattened_dict(
        {
            "data.max_seq_length": 24,
            "data.batch_size": 16,
            "model.dtype": "float32",  # the recipe's bfloat16 off: a CPU's float32
            "data.read_threads": 1,
            "optimizer.schedule": "constant",
            "optimizer.learning_rate": 3e-3,
            "train.log_every": 1,
            "train.checkpoint_every": 100,
            "train.async_checkpoints": False,
            "train.compilation_cache_dir": TINY_PRETRAINING["train.compilation_cache_dir"],
            "eval.batch_size": 16,
            **overrides,
        }
    )
    return config


WORDS = ["the", "a", "movie", "film", "plot", "actor", "was", "is", "very", "quite"]


def write_sentiment_tsv(path, rows: int, seed: int) -> None:
    """label pos iff the text holds "good", neg iff it holds "bad"; filler words around."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(rows):
        label = "pos" if i % 2 else "neg"
        words = list(rng.choice(WORDS, size=6)) + ["good" if label == "pos" else "bad"]
        rng.shuffle(words)
        lines.append(f"{label}\t{' '.join(words)}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def huggingface_checkpoint(tmp_path_factory):
    """A small random BertForPreTraining saved with save_pretrained, plus its vocab.txt;
    every parameter is perturbed so that a weight left at its initial value shows. Its
    shapes are the tiny pretraining model's, so the two fine-tuning runs compile once."""
    directory = tmp_path_factory.mktemp("hf_bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", *WORDS]
    vocab += [f"[unused{i}]" for i in range(TINY_PRETRAINING["data.vocab_size"] - len(vocab))]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=TINY_PRETRAINING["model.d_model"],
        num_attention_heads=TINY_PRETRAINING["model.num_heads"],
        intermediate_size=TINY_PRETRAINING["model.d_ff"],
        num_hidden_layers=TINY_PRETRAINING["model.num_layers"],
        max_position_embeddings=TINY_PRETRAINING["model.max_len"],
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    model.eval().save_pretrained(directory)
    return model, directory


@pytest.fixture(scope="module")
def sentiment_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sentiment")
    write_sentiment_tsv(directory / "train.tsv", 64, seed=0)
    write_sentiment_tsv(directory / "dev.tsv", 20, seed=1)
    return directory / "train.tsv", directory / "dev.tsv"


def test_fine_tuning_from_huggingface_starts_from_exactly_its_weights(
    huggingface_checkpoint, sentiment_files, tmp_path
):
    reference, directory = huggingface_checkpoint
    task = load_task(classification_config(directory, *sentiment_files), str(tmp_path))
    fresh = jax.jit(lambda key: nn.unbox(task.init_params(key)))(jax.random.key(0))
    params = task.initial_params(fresh)

    state = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
    bert = params["bert"]
    np.testing.assert_array_equal(
        bert["word_embeddings"]["embedding"], state["bert.embeddings.word_embeddings.weight"]
    )
    np.testing.assert_array_equal(
        bert["encoder"]["layer_0"]["feed_forward"]["wi"]["kernel"],
        state["bert.encoder.layer.0.intermediate.dense.weight"].T,
    )
    np.testing.assert_array_equal(
        bert["encoder"]["layer_0"]["self_attention_norm"]["bias"],
        state["bert.encoder.layer.0.attention.output.LayerNorm.bias"],
    )
    np.testing.assert_array_equal(bert["pooler"]["kernel"], state["bert.pooler.dense.weight"].T)
    # Every encoder weight: our encoder with the grafted weights computes Hugging Face's.
    ids = np.array([[2, 5, 9, 12, 3, 6, 7, 3, 0, 0], [2, 8, 6, 3, 0, 0, 0, 0, 0, 0]])
    types = np.array([[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0] * 10])
    mask = (ids != 0).astype(np.int32)
    encoder = jax.jit(BertModel(task.model_config).apply)
    sequence, pooled = encoder({"params": bert}, ids, types, mask)
    with torch.no_grad():
        expected = reference.bert(
            input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
            attention_mask=torch.tensor(mask),
        )  # fmt: skip
    np.testing.assert_allclose(sequence, expected.last_hidden_state.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, expected.pooler_output.numpy(), atol=1e-5, rtol=0)
    # The new classifier head keeps its fresh initialisation.
    assert_trees_equal(params["classifier"], fresh["classifier"])
    assert task.model_config.num_labels == 2 and task.labels == ["neg", "pos"]
    # The tokenizer is the checkpoint's vocabulary, copied into the workdir.
    assert (tmp_path / "bert_tokenizer" / "vocab.txt").read_text() == (
        directory / "vocab.txt"
    ).read_text()
    assert task.tokenizer.encode("the good movie") == [7, 5, 9]


def test_fine_tuning_from_huggingface_lowers_the_loss_on_a_labelled_tsv(
    huggingface_checkpoint, sentiment_files, tmp_path
):
    _, directory = huggingface_checkpoint
    config = classification_config(directory, *sentiment_files)
    config.train.num_steps = 30
    config.train.eval_every = 30
    train_and_evaluate(config, str(tmp_path))
    losses = [r["loss"] for r in read_records(tmp_path)]
    assert len(losses) == 30
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    (dev,) = read_records(tmp_path, "dev")
    assert dev["accuracy"] >= 0.9 and dev["f1"] >= 0.9, dev


def test_pretraining_with_a_huggingface_vocabulary_keeps_a_copy_in_the_workdir(
    huggingface_checkpoint, tmp_path
):
    _, directory = huggingface_checkpoint
    config = tiny_pretraining_config(1)
    config.data.hf_checkpoint = str(directory)
    task = load_task(config, str(tmp_path))
    assert isinstance(task.tokenizer, WordPieceTokenizer)
    copied = tmp_path / "bert_tokenizer" / "vocab.txt"
    assert copied.read_text() == (directory / "vocab.txt").read_text()
    assert (task.model_config.vocab_size, task.model_config.pad_id) == (200, 0)
    assert task.tokenizer.encode("a good plot") == [8, 5, 11]


def write_animal_tsv(path, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    names, colors = ["Mira", "Tomas", "Lena", "Oskar"], ["brown", "red", "grey", "white"]
    lines = []
    for i in range(rows):
        animal = ["fox", "owl"][i % 2]
        name, color = rng.choice(names), rng.choice(colors)
        lines.append(f"{animal}\t{name} is a small {animal} with {color} fur.\t{name} is happy.")
    path.write_text("\n".join(lines) + "\n")


def test_fine_tuning_from_a_pretraining_workdir_grafts_its_encoder_and_tokenizer(
    pretrained, tmp_path
):
    write_animal_tsv(tmp_path / "train.tsv", 32, seed=0)
    write_animal_tsv(tmp_path / "dev.tsv", 20, seed=1)
    workdir = tmp_path / "run"
    config = classification_config(pretrained, tmp_path / "train.tsv", tmp_path / "dev.tsv")
    task = load_task(config, str(workdir))
    fresh = jax.jit(lambda key: nn.unbox(task.init_params(key)))(jax.random.key(1))
    params = task.initial_params(fresh)
    assert_trees_equal(params["bert"], checkpoint_params(pretrained, PRETRAINING_STEPS)["bert"])
    assert (workdir / "bert_tokenizer" / "spm.model").read_bytes() == (
        pretrained / "bert_tokenizer" / "spm.model"
    ).read_bytes()
    # Shapes from the checkpoint; regularisation from the fine-tuning config.
    source = json.loads((pretrained / "config.json").read_text())["model"]
    ours = dataclasses.asdict(task.model_config)
    for field in set(source) - set(FINE_TUNING_FIELDS) - {"num_labels"}:
        assert ours[field] == source[field], field
    assert (ours["attention_dropout_rate"], source["attention_dropout_rate"]) == (0.1, 0.0)


@pytest.fixture(scope="module")
def fine_tuned(pretrained, tmp_path_factory):
    """Three fine-tuning steps from the pretraining workdir, with dev and test files."""
    directory = tmp_path_factory.mktemp("fine_tuned")
    for name, rows, seed in (("train", 32, 0), ("dev", 20, 1), ("test", 11, 2)):
        write_animal_tsv(directory / f"{name}.tsv", rows, seed)
    config = classification_config(pretrained, directory / "train.tsv", directory / "dev.tsv")
    config.data.classification_test = str(directory / "test.tsv")
    config.train.num_steps = 3
    config.train.eval_every = 3
    train_and_evaluate(config, str(directory / "run"))
    return directory


@pytest.mark.parametrize("split", ["dev", "test"])
def test_classification_report_equals_numpy_accuracy_f1_and_loss(fine_tuned, split):
    workdir = fine_tuned / "run"
    report = evaluate_workdir(str(workdir), split=split)
    assert json.loads((workdir / "eval" / f"{split}-step3.json").read_text()) == report

    with open(workdir / "config.json") as f:
        run_config = json.load(f)
    model_config = bert_config(run_config["model"])
    labels = run_config["data"]["labels"].split(",")
    assert labels == report["labels"] == ["fox", "owl"]
    from jaxtrans.tasks.bert.bert_init import load_run_tokenizer

    tokenizer = load_run_tokenizer(workdir)
    encode = EncodeExample(tokenizer, labels, 24)
    rows = [pad_example(encode(e), 24, 0) for e in read_labelled_texts(fine_tuned / f"{split}.tsv")]
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    logits = jax.jit(BertForClassification(model_config).apply)(
        {"params": checkpoint_params(workdir, 3)},
        batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
    )  # fmt: skip
    gold, predicted = batch["label"], np.asarray(logits).argmax(-1)
    true_positive = np.sum((predicted == 1) & (gold == 1))
    f1 = 2 * true_positive / max(np.sum(predicted == 1) + np.sum(gold == 1), 1)
    loss = -log_softmax(logits)[np.arange(len(gold)), gold].mean()
    assert report["examples"] == len(rows)
    assert report["accuracy"] == pytest.approx(np.mean(predicted == gold), abs=1e-6)
    assert report["f1"] == pytest.approx(f1, abs=1e-6)
    assert report["loss"] == pytest.approx(loss, rel=1e-5)
    if split == "dev":
        (dev,) = read_records(workdir, "dev")
        assert dev["accuracy"] == pytest.approx(report["accuracy"], abs=1e-6)


def make_init_source(kind: str, directory):
    """A directory that is not something to fine-tune from."""
    directory.mkdir()
    saved = {
        "translation": {"task": "translation", "model": {}},
        "untrained": {"task": "bert_pretraining", "model": {}},
        "roberta": {"model_type": "roberta"},
    }.get(kind)
    if saved:
        (directory / "config.json").write_text(json.dumps(saved))
    return directory / "no_such_dir" if kind == "missing" else directory


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "no such directory"),
        ("empty", "no config.json"),
        ("translation", "is a translation workdir"),
        ("untrained", "no checkpoint"),
        ("roberta", "only 'bert' checkpoints"),
    ],
)
def test_a_wrong_init_from_is_a_one_line_user_error(kind, message, sentiment_files, tmp_path):
    source = make_init_source(kind, tmp_path / "source")
    config = classification_config(source, *sentiment_files)
    with pytest.raises(UserError) as error:
        load_task(config, str(tmp_path / "run"))
    text = str(error.value)
    assert message in text and f"--config.init_from={source}" in text and "\n" not in text
    assert not (tmp_path / "run").exists()


def test_fine_tuning_without_init_from_is_a_user_error(sentiment_files, tmp_path):
    config = classification_config("", *sentiment_files)
    with pytest.raises(UserError, match="init_from is required"):
        load_task(config, str(tmp_path))
