"""Asking BERT models (evaluate.py --input): filling [MASK] and labelling texts give what
Hugging Face's own models give on the same Hugging Face directory, through the program
and through the task API."""

import io
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import numpy as np
import pytest
import torch
import transformers

from jaxtrans.data import reserved_pieces as reserved
from jaxtrans.data.tokenizers.bert_tokenizer import SentencePieceBertTokenizer
from jaxtrans.data.tokenizers.sentencepiece_training import train_sentencepiece
from jaxtrans.errors import UserError
from jaxtrans.programs.evaluate import main
from jaxtrans.tasks import pretrained_task
from jaxtrans.tasks.bert.bert_predict import encode_pair

TOL = 1e-5
VOCAB = [
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "is", "the", "capital", "of"),
    *("france", ".", "city", "river", "a", "big", "small", "rome", "italy", "berlin"),
    *("germany", "##s", ",", "and"),
]
SMALL = dict(
    vocab_size=len(VOCAB),
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=128,
)
LINES = [
    "Paris is the [MASK] of France .",
    "rome is the [MASK] of [MASK] , and berlin\tthe [MASK] of germany",
    "a big [MASK]",
]


def save_model(cls, directory, seed, **config):
    """A random ``cls`` (every weight perturbed, so that no mis-mapped bias hides), saved
    with its tokenizer (vocab.txt, tokenizer_config.json)."""
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    transformers.BertTokenizerFast(str(directory / "vocab.txt")).save_pretrained(directory)
    torch.manual_seed(seed)
    hf_config = transformers.BertConfig(**SMALL, **config, attn_implementation="eager")
    model = cls(hf_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    model.save_pretrained(directory)
    return model.eval()


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("masked_lm")
    return directory, save_model(transformers.BertForMaskedLM, directory, seed=0)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    directory = tmp_path_factory.mktemp("classifier")
    labels = {0: "neg", 1: "neutral", 2: "pos"}
    model = save_model(
        transformers.BertForSequenceClassification, directory, seed=1, id2label=labels
    )
    return directory, model


def huggingface_inputs(directory, line):
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)
    return tokenizer, tokenizer(*line.split("\t"), return_tensors="pt")


def huggingface_fill_mask(directory, model, line):
    """[(position, [(token, probability)] * 5)] for each [MASK], as transformers gives it."""
    tokenizer, inputs = huggingface_inputs(directory, line)
    with torch.no_grad():
        probabilities = model(**inputs).logits.softmax(-1)[0]
    ids = inputs["input_ids"][0]
    found = []
    for position in (ids == tokenizer.mask_token_id).nonzero()[:, 0].tolist():
        top = probabilities[position].topk(5)
        tokens = tokenizer.convert_ids_to_tokens(top.indices.tolist())
        found.append((position, list(zip(tokens, top.values.tolist(), strict=True))))
    return found


def assert_fill_mask_equal(record, expected):
    masks = [(m["position"], m["predictions"]) for m in record["masks"]]
    assert [position for position, _ in masks] == [position for position, _ in expected]
    for (_, predictions), (_, reference) in zip(masks, expected, strict=True):
        assert [p["token"] for p in predictions] == [token for token, _ in reference]
        got = [p["probability"] for p in predictions]
        np.testing.assert_allclose(got, [p for _, p in reference], atol=TOL, rtol=0)


def run_evaluate_py(monkeypatch, capsys, stdin: str, *flags: str) -> list[dict]:
    """evaluate.py with ``stdin`` as --input -; the JSON objects it printed."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    capsys.readouterr()
    main(["evaluate.py", *flags, "--input", "-"])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_fill_mask_through_evaluate_py_equals_transformers_masked_lm(
    masked_lm, monkeypatch, capsys
):
    directory, model = masked_lm
    records = run_evaluate_py(
        monkeypatch, capsys, "Paris is the [MASK] of France .\n",
        "--init_from", str(directory), "--task", "bert_pretraining",
    )  # fmt: skip
    assert len(records) == 1 and records[0]["text"] == "Paris is the [MASK] of France ."
    assert records[0]["masks"][0]["position"] == 4  # [CLS] paris is the [MASK]
    assert_fill_mask_equal(records[0], huggingface_fill_mask(directory, model, LINES[0]))


def test_fill_mask_of_several_masks_and_sentence_pairs_through_the_task_api(masked_lm):
    directory, model = masked_lm
    task = pretrained_task("bert_pretraining", str(directory))
    records = [json.loads(line) for line in task.predict(LINES, options={"batch_size": 2})]
    assert records[1]["text_b"] == "the [MASK] of germany"
    assert [len(r["masks"]) for r in records] == [1, 3, 1]
    for record, line in zip(records, LINES, strict=True):
        assert_fill_mask_equal(record, huggingface_fill_mask(directory, model, line))
    ids = [p["id"] for p in records[0]["masks"][0]["predictions"]]
    assert [p["token"] for p in records[0]["masks"][0]["predictions"]] == [VOCAB[i] for i in ids]


def test_a_line_without_mask_or_with_two_tabs_is_an_error_naming_it(masked_lm):
    task = pretrained_task("bert_pretraining", str(masked_lm[0]))
    with pytest.raises(UserError, match=r"--input line 2 has no \[MASK\]"):
        task.predict(["the [MASK] of france", "the capital of france"])
    with pytest.raises(UserError, match="--input line 1 has 2 TABs"):
        task.predict(["a\tb\tc [MASK]"])
    with pytest.raises(UserError, match="line 1 is 302 tokens .*data.max_seq_length=128"):
        task.predict(["[MASK] " + "big " * 299])


def test_evaluate_py_refuses_a_line_without_mask_with_one_line(masked_lm, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"no mask here\n")))
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate.py", "--init_from", str(masked_lm[0]), "--task", "bert_pretraining",
              "--input", "-"])  # fmt: skip
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "error: --input line 1 has no [MASK]; write [MASK] where a token is to be predicted\n"
    )


def test_classification_labels_equal_transformers_sequence_classification(classifier):
    directory, model = classifier
    lines = ["paris is the capital of france .", "rome , italy\tberlin , germany", "a big city"]
    task = pretrained_task("bert_classification", str(directory))
    records = [json.loads(line) for line in task.predict(lines)]
    for record, line in zip(records, lines, strict=True):
        _, inputs = huggingface_inputs(directory, line)
        with torch.no_grad():
            expected = model(**inputs).logits.softmax(-1)[0].numpy()
        got = [record["probabilities"][label] for label in ("neg", "neutral", "pos")]
        np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
        assert record["label"] == model.config.id2label[int(expected.argmax())]
        assert record["probability"] == pytest.approx(expected.max(), abs=TOL)
    assert records[1]["text"] == "rome , italy" and records[1]["text_b"] == "berlin , germany"


def test_classification_through_evaluate_py_to_an_output_file(classifier, tmp_path):
    directory, model = classifier
    source, output = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("paris is a city\nrome\n")
    main(["evaluate.py", "--init_from", str(directory), "--task", "bert_classification",
          f"--input={source}", f"--output={output}", "--batch_size=1"])  # fmt: skip
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["text"] for r in records] == ["paris is a city", "rome"]
    assert all(r["label"] in ("neg", "neutral", "pos") for r in records)


def test_mask_is_one_piece_for_sentencepiece_and_wordpiece(masked_lm, tmp_path):
    model_file = tmp_path / "spm.model"
    sentences = ["the capital of france is paris", "rome is a big city"] * 50
    train_sentencepiece(
        sentences, model_file, vocab_size=40, model_type="unigram", character_coverage=1.0
    )
    sentencepiece = SentencePieceBertTokenizer(model_file)
    ids = encode_pair(sentencepiece, "the [MASK] of france", "[MASK]", masks=True)["input_ids"]
    # No word-boundary piece of its own before the mask ("▁the ▁ [MASK]", which encoding
    # the whole text gives): "▁the [MASK] ▁of", as the masked training examples are.
    the, of_france = sentencepiece.encode("the"), sentencepiece.encode("of france")
    expected = [reserved.CLS_ID, *the, reserved.MASK_ID, *of_france, reserved.SEP_ID]
    assert ids.tolist() == [*expected, reserved.MASK_ID, reserved.SEP_ID]
    assert sentencepiece.id_to_piece(sentencepiece.encode("the [MASK]")[-2]) == "▁"
    assert sentencepiece.id_to_piece(reserved.MASK_ID) == "[MASK]"
    wordpiece = pretrained_task("bert_pretraining", str(masked_lm[0])).tokenizer
    reference = transformers.BertTokenizerFast.from_pretrained(masked_lm[0])
    row = encode_pair(wordpiece, "Paris [MASK]x [MASK].", "a[MASK]", masks=True)
    assert row["input_ids"].tolist() == reference("Paris [MASK]x [MASK].", "a[MASK]")["input_ids"]
