"""A Hugging Face BertForTokenClassification directory as a bert_token_classification
model: predicting as transformers does (evaluate.py --init_from --input), evaluating a
CoNLL file, refused without entity tags, and fine-tuned from its encoder with a fresh
tagger. The directories are random models built here; nothing is downloaded."""

import io
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the reference model is built here, not fetched

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers
from compilation_cache_settings import restore_compilation_cache_settings  # noqa: F401
from paths import REPO

from jaxtrans import tasks
from jaxtrans.data.tokenizers.words import split_words
from jaxtrans.errors import UserError
from jaxtrans.inference.entities import entity_spans
from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
from jaxtrans.programs.evaluate import main

sys.path.insert(0, REPO)

from configs import bert_ner, bert_ner_demo  # noqa: E402


def evaluate_py(monkeypatch, capsys, *flags: str, stdin: str = "") -> str:
    """evaluate.py (in this process, to save an interpreter start) -> what it printed."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    main(["evaluate.py", *flags])
    return capsys.readouterr().out


HF_VOCAB = [
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "in", "of", "to", ".", ","),
    *("anna", "berg", "lives", "oslo", "new", "york", "works", "for", "acme", "bank"),
    *("##s", "##er", "##a", "met", "paris", "and"),
]


def save_huggingface_tagger(directory, labels):
    """A random BertForTokenClassification with ``labels`` as id2label, its vocab.txt and
    tokenizer files; the classifier is scaled up so that the argmax is far from ties."""
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(HF_VOCAB) + "\n")
    transformers.BertTokenizerFast(str(directory / "vocab.txt")).save_pretrained(directory)
    config = transformers.BertConfig(
        vocab_size=len(HF_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=128, num_labels=len(labels),
        id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)},
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForTokenClassification(config).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(100.0)
    model.save_pretrained(directory)
    return model


LINES = [
    "Anna Berg lives in Oslo.",
    "Berger works for Acme Bank, New York.",
    "Anna met Annas and the Bergers in Paris",
]


@pytest.mark.parametrize(
    "labels", [["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], ["O", "B-ORG", "I-ORG", "E-ORG", "S-ORG"]]
)
def test_a_huggingface_tagger_predicts_the_argmax_of_transformers_logits(
    tmp_path, labels, monkeypatch, capsys
):
    reference = save_huggingface_tagger(tmp_path / "hf", labels)
    task = tasks.pretrained_task("bert_token_classification", str(tmp_path / "hf"))
    params = task.restore_params().params
    hf_tokenizer = transformers.BertTokenizerFast.from_pretrained(tmp_path / "hf")
    words = [split_words(line) for line in LINES]
    _, windows, batches = task.batched([[w.text for w in ws] for ws in words], "x", False)
    _, ids, probs = task.run(params, windows, batches, [len(ws) for ws in words])
    printed = evaluate_py(
        monkeypatch, capsys, "--init_from", str(tmp_path / "hf"),
        "--task", "bert_token_classification", "--input", "-", stdin="\n".join(LINES),
    )  # fmt: skip
    outputs = [json.loads(line) for line in printed.splitlines()]
    for line, ws, ours, our_probs, output in zip(LINES, words, ids, probs, outputs, strict=True):
        encoded = hf_tokenizer([w.text for w in ws], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            logits = reference(**encoded).logits[0].numpy()
        word_ids = encoded.word_ids()
        first = [i for i, w in enumerate(word_ids) if w is not None and w != word_ids[i - 1]]
        expected = logits[first].argmax(-1)
        assert ours.tolist() == expected.tolist()
        top = np.exp(logits[first] - logits[first].max(-1, keepdims=True))
        np.testing.assert_allclose(our_probs, (top / top.sum(-1, keepdims=True)).max(-1), atol=1e-5)
        spans = entity_spans([labels[i] for i in expected])
        assert [(e["entity"], e["start"], e["end"]) for e in output["entities"]] == [
            (s.type, ws[s.start].start, ws[s.end - 1].end) for s in spans
        ]
        assert all(line[e["start"] : e["end"]] == e["text"] for e in output["entities"])
    assert any(o["entities"] for o in outputs)


def test_a_huggingface_tagger_evaluates_a_conll_file(tmp_path):
    save_huggingface_tagger(tmp_path / "hf", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    (tmp_path / "test.txt").write_text("Anna B-PER\nBerg I-PER\nin O\nOslo B-LOC\n")
    config = bert_ner_demo.get_config()
    config.data.ner_test = str(tmp_path / "test.txt")
    task = tasks.pretrained_task("bert_token_classification", str(tmp_path / "hf"), config)
    report = task.evaluate("test", outdir=str(tmp_path / "eval"))
    assert report["entities"]["gold"] == 2 and report["words"] == 4


@pytest.mark.parametrize(
    "labels, message",
    [
        (["O", "PERSON"], r"'PERSON' is not an entity tag.*id2label"),
        (["LABEL_0", "LABEL_1"], r"tags are not known: a Hugging Face config.json needs id2label"),
    ],
)
def test_a_huggingface_model_without_entity_tags_is_a_user_error(tmp_path, labels, message):
    save_huggingface_tagger(tmp_path / "hf", labels)
    with pytest.raises(UserError, match=message):
        tasks.pretrained_task("bert_token_classification", str(tmp_path / "hf"))


def test_fine_tuning_from_a_huggingface_directory_grafts_its_encoder_and_a_fresh_tagger(
    tmp_path,
):
    save_huggingface_tagger(tmp_path / "hf", ["O", "B-PER", "I-PER"])
    (tmp_path / "train.txt").write_text("Anna B-PER\nlives O\nin O\nOslo B-LOC\n")
    config = bert_ner.get_config()
    config.init_from = str(tmp_path / "hf")
    config.data.ner_train = str(tmp_path / "train.txt")
    config.data.max_seq_length = 16
    task = tasks.load_task(config, str(tmp_path / "run"))
    assert task.labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert (tmp_path / "run" / "bert_tokenizer" / "vocab.txt").is_file()
    fresh = nn.unbox(task.init_params(jax.random.key(0)))
    started = task.initial_params(fresh)
    reference = from_huggingface(tmp_path / "hf").params
    for ours, theirs in zip(
        jax.tree.leaves(started["bert"]), jax.tree.leaves(reference["bert"]), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(ours), theirs)
    assert started["classifier"]["kernel"].shape == (32, 5)
    np.testing.assert_array_equal(started["classifier"]["kernel"], fresh["classifier"]["kernel"])
