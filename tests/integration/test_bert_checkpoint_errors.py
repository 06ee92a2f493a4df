"""Damaged or hostile Hugging Face checkpoint directories and WordPiece files: each is a
one-line UserError naming the file (and the shard or field), never a traceback, and an
index never makes the loader read a file outside the checkpoint directory."""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import numpy as np
import pytest
from safetensors.numpy import save_file

from jaxtrans.data.tokenizers.wordpiece import WordPieceTokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_from_huggingface import from_huggingface, shard_files
from jaxtrans.tasks.bert import bert_init

# A BERT config.json small enough to build in a test (no weights are read before it).
CONFIG = {
    "model_type": "bert",
    "vocab_size": 12,
    "hidden_size": 8,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "num_hidden_layers": 1,
    "max_position_embeddings": 16,
}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##s", "d", "e", "f"]
INDEXES = ["model.safetensors.index.json", "pytorch_model.bin.index.json"]


def checkpoint_dir(path, config=CONFIG, index=None, shards=()):
    """A checkpoint directory: config.json, vocab.txt and an optional index naming
    ``shards`` (index: its file name)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    if index:
        weight_map = {f"tensor_{i}": shard for i, shard in enumerate(shards)}
        (path / index).write_text(json.dumps({"weight_map": weight_map}))
    return path


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------- sharded weights


@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize(
    "shard", ["../outside.safetensors", "../../etc/passwd", "/etc/passwd", "a/../../x.bin"]
)
def test_a_shard_named_outside_the_checkpoint_directory_is_refused(tmp_path, index, shard):
    # A readable weights file really is there, so only the check can stop the read.
    save_file({"x": np.zeros(2, np.float32)}, tmp_path / "outside.safetensors")
    directory = checkpoint_dir(tmp_path / "ckpt", index=index, shards=["ok.bin", shard])
    (directory / "ok.bin").write_bytes(b"")

    with pytest.raises(UserError) as error:
        from_huggingface(directory)
    text = one_line(error)
    assert str(directory / index) in text and repr(shard) in text
    assert "outside" in text and "refusing to read it" in text


def test_shards_in_the_directory_may_be_links_as_in_the_hugging_face_cache(tmp_path):
    # The hub cache: snapshots/<rev>/model-00001-of-00001.safetensors -> ../../blobs/<sha>
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    (blobs / "abc").write_bytes(b"")
    index = INDEXES[0]
    directory = checkpoint_dir(snapshot, index=index, shards=["model-00001-of-00001.safetensors"])
    os.symlink("../../blobs/abc", directory / "model-00001-of-00001.safetensors")
    assert shard_files(directory, directory / index) == [
        directory / "model-00001-of-00001.safetensors"
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"weight_map": ', "is not valid JSON"),
        ('["model-1.safetensors"]', 'no "weight_map" object'),
        ('{"weight_map": {"a": 3}}', "names the shard 3"),
        ('{"weight_map": {"a": "missing.safetensors"}}', "is not a file"),
    ],
)
def test_a_damaged_index_is_a_user_error_naming_it(tmp_path, text, message):
    directory = checkpoint_dir(tmp_path)
    (directory / INDEXES[0]).write_text(text)
    with pytest.raises(UserError) as error:
        from_huggingface(directory)
    assert message in one_line(error) and INDEXES[0] in str(error.value)


@pytest.mark.parametrize(
    "name, content",
    [
        ("model.safetensors", b"\x00\x01 not safetensors"),
        ("model.safetensors", b""),
        ("pytorch_model.bin", b"PK\x03\x04 not a zip"),
        ("pytorch_model.bin", b""),
    ],
)
def test_damaged_weight_files_are_user_errors_naming_them(tmp_path, name, content):
    directory = checkpoint_dir(tmp_path)
    (directory / name).write_bytes(content)
    with pytest.raises(UserError) as error:
        from_huggingface(directory)
    assert f"{directory / name} cannot be read" in one_line(error)


def test_sharded_pytorch_weights_load_the_same_as_safetensors(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = {k: v for k, v in CONFIG.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**config))
    model.save_pretrained(tmp_path / "whole")
    state = model.state_dict()
    names = sorted(state)
    sharded = checkpoint_dir(tmp_path / "sharded", index=INDEXES[1])
    weight_map = {}
    for i, keys in enumerate((names[::2], names[1::2])):
        shard = f"pytorch_model-0000{i + 1}-of-00002.bin"
        torch.save({k: state[k].clone() for k in keys}, sharded / shard)
        weight_map.update(dict.fromkeys(keys, shard))
    (sharded / INDEXES[1]).write_text(json.dumps({"weight_map": weight_map}))

    whole, parts = from_huggingface(tmp_path / "whole"), from_huggingface(sharded)
    flat = lambda tree, path="": (  # noqa: E731
        {k: v for key, sub in tree.items() for k, v in flat(sub, f"{path}/{key}").items()}
        if isinstance(tree, dict)
        else {path: tree}
    )
    expected, loaded = flat(whole.params), flat(parts.params)
    assert expected.keys() == loaded.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(loaded[key], value)


def test_weights_of_another_shape_than_config_json_are_a_user_error(tmp_path):
    directory = checkpoint_dir(tmp_path)
    save_file({"bert.encoder.layer.0.attention.self.query.weight": np.zeros((3, 3))},
              directory / "model.safetensors")  # fmt: skip
    with pytest.raises(UserError) as error:
        from_huggingface(directory)
    assert "do not fit its config.json" in one_line(error)


# ------------------------------------------------------------- a damaged config.json

BAD_CONFIGS = [
    ("not_json", b'{"model_type": "bert", ', "is not valid JSON"),
    ("latin1", '{"model_type": "bert", "name": "caf\xe9"}'.encode("latin-1"), "not valid JSON"),
    ("an_array", b'["bert"]', "an array, not an object"),
    ("no_hidden_size", {**CONFIG, "hidden_size": None}, "no hidden_size"),
    ("string_size", {**CONFIG, "hidden_size": "8"}, "hidden_size='8'"),
    ("zero_heads", {**CONFIG, "num_attention_heads": 0}, "num_attention_heads=0"),
    ("float_layers", {**CONFIG, "num_hidden_layers": 1.5}, "num_hidden_layers=1.5"),
    ("heads_not_dividing", {**CONFIG, "num_attention_heads": 3}, "not divisible"),
    ("dropout_above_one", {**CONFIG, "hidden_dropout_prob": 2}, "hidden_dropout_prob=2"),
    ("labels_a_list", {**CONFIG, "id2label": ["neg", "pos"]}, "id2label="),
    ("activation_a_list", {**CONFIG, "hidden_act": ["gelu"]}, "hidden_act=['gelu']"),
    ("negative_pad_id", {**CONFIG, "pad_token_id": -1}, "pad_token_id=-1"),
]


def write_config(directory, content) -> None:
    if isinstance(content, dict):
        content = json.dumps({k: v for k, v in content.items() if v is not None}).encode()
    (directory / "config.json").write_bytes(content)


@pytest.mark.parametrize("name, content, message", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_damaged_config_json_is_a_user_error_naming_file_and_field(
    tmp_path, name, content, message
):
    directory = checkpoint_dir(tmp_path)
    write_config(directory, content)
    with pytest.raises(UserError) as error:
        from_huggingface(directory)
    text = one_line(error)
    assert text.startswith(str(directory / "config.json")) and message in text

    # The same file as --config.init_from of a fine-tuning run.
    with pytest.raises(UserError) as error:
        bert_init.init_source(str(directory))
    text = one_line(error)
    assert f"--config.init_from={directory}" in text and message in text


@pytest.mark.parametrize(
    "model, message",
    # (BlockConfig names no field for num_heads=0: its d_model % num_heads divides by zero.)
    [({"num_heads": 0}, "model: "), ("a string", "model: "), ({"d_model": "wide"}, "model: ")],
)
def test_a_damaged_model_section_of_a_bert_workdir_to_start_from_is_a_user_error(
    tmp_path, model, message
):
    (tmp_path / "checkpoints" / "2").mkdir(parents=True)
    (tmp_path / "config.json").write_text(json.dumps({"task": "bert_pretraining", "model": model}))
    with pytest.raises(UserError) as error:
        bert_init.init_source(str(tmp_path))
    assert str(tmp_path / "config.json") in one_line(error) and message in str(error.value)


# ---------------------------------------------------------------- WordPiece files

BAD_TOKENIZER_CONFIGS = [
    ("not_json", b'{"do_lower_case": tru', "is not valid JSON"),
    ("utf16", '{"do_lower_case": false}'.encode("utf-16"), "is not valid JSON"),
    ("an_array", b"[true]", "holds an array, not an object"),
    ("string_option", b'{"do_lower_case": "yes"}', "do_lower_case='yes'"),
    ("number_option", b'{"strip_accents": 1}', "strip_accents=1"),
    ("null_option", b'{"tokenize_chinese_chars": null}', "tokenize_chinese_chars=None"),
]


@pytest.mark.parametrize(
    "name, content, message", BAD_TOKENIZER_CONFIGS, ids=[c[0] for c in BAD_TOKENIZER_CONFIGS]
)
def test_a_damaged_tokenizer_config_json_is_a_user_error_naming_it(
    tmp_path, name, content, message
):
    directory = checkpoint_dir(tmp_path)
    (directory / "tokenizer_config.json").write_bytes(content)
    with pytest.raises(UserError) as error:
        WordPieceTokenizer.from_huggingface(directory)
    text = one_line(error)
    assert str(directory / "tokenizer_config.json") in text and message in text


def test_tokenizer_config_options_that_are_valid_are_honoured(tmp_path):
    directory = checkpoint_dir(tmp_path)
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": False, "strip_accents": None, "unknown_key": [1, 2]})
    )
    assert WordPieceTokenizer.from_huggingface(directory).encode("A a") == [1, 5]


@pytest.mark.parametrize(
    "content, message",
    [(b"[PAD]\n\xff\xfe[UNK]\n", "is not UTF-8 text"), (b"\x00\x01\x02", "lacks the BERT")],
)
def test_a_damaged_vocab_txt_is_a_user_error_naming_it(tmp_path, content, message):
    directory = checkpoint_dir(tmp_path)
    (directory / "vocab.txt").write_bytes(content)
    with pytest.raises(UserError) as error:
        WordPieceTokenizer.from_huggingface(directory)
    assert str(directory / "vocab.txt") in one_line(error) and message in str(error.value)


def test_damaged_tokenizer_files_are_refused_before_they_are_copied_into_a_workdir(tmp_path):
    source = checkpoint_dir(tmp_path / "ckpt")
    (source / "tokenizer_config.json").write_text("{")
    workdir = tmp_path / "run"
    with pytest.raises(UserError, match="tokenizer_config.json is not valid JSON"):
        bert_init.install_tokenizer(bert_init.huggingface_tokenizer_files(source), workdir)
    assert not bert_init.tokenizer_dir(workdir).exists()


def test_a_damaged_sentencepiece_model_of_a_bert_workdir_is_a_user_error(tmp_path):
    directory = bert_init.tokenizer_dir(tmp_path)
    directory.mkdir()
    (directory / "spm.model").write_bytes(b"not a model")
    with pytest.raises(UserError) as error:
        bert_init.load_run_tokenizer(tmp_path)
    assert "spm.model cannot be read as a SentencePiece model" in one_line(error)


# ------------------------------------------------------------- through the real programs


def assert_one_line_error(run, *fragments: str) -> None:
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_train_py_refuses_a_shard_outside_the_checkpoint_with_status_2(tmp_path):
    from reliability_runs import run_program, scratch

    save_file({"x": np.zeros(2, np.float32)}, tmp_path / "outside.safetensors")
    index = INDEXES[0]
    source = checkpoint_dir(tmp_path / "ckpt", index=index, shards=["../outside.safetensors"])
    (tmp_path / "train.tsv").write_text("".join(f"{i % 2}\ta b c d\n" for i in range(8)))
    flags = {
        "init_from": source,
        "data.classification_train": tmp_path / "train.tsv",
        "data.max_seq_length": 16,
        "data.batch_size": 4,
        "train.num_steps": 1,
        "train.eval_every": 0,
        "train.compilation_cache_dir": os.path.join(scratch(), "xla"),
    }
    run = run_program(
        "train.py",
        ["--config", "configs/bert_classify.py", "--workdir", str(tmp_path / "run")]
        + [f"--config.{key}={value}" for key, value in flags.items()],
    )
    assert_one_line_error(run, str(source / index), "'../outside.safetensors'", "refusing")


def test_evaluate_py_on_a_bert_workdir_with_a_damaged_tokenizer_config_exits_2(tmp_path):
    from paths import REPO
    from reliability_runs import run_program

    from jaxtrans.models.bert.bert_model import BertConfig
    from jaxtrans.tasks.bert.bert_task import resolve_run_config
    from jaxtrans.workdirs.workdir import save_run_config

    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import bert_demo

    model = BertConfig(vocab_size=len(VOCAB), d_model=8, num_heads=2, d_ff=16, num_layers=1)
    save_run_config(str(tmp_path), resolve_run_config(bert_demo.get_config(), model))
    tokenizer = bert_init.tokenizer_dir(tmp_path)
    tokenizer.mkdir()
    (tokenizer / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    config_file = tokenizer / "tokenizer_config.json"
    config_file.write_text('{"do_lower_case": "no"}')

    run = run_program("evaluate.py", ["--workdir", str(tmp_path)])
    assert_one_line_error(run, str(config_file), "do_lower_case='no'")
