"""evaluate.py on a workdir whose config.json holds a field of the wrong type: one line
naming the file, the field, the value and the type expected, exit status 2, when the
workdir is loaded (before a tokenizer, a model or a checkpoint is read: the workdirs here
hold only their config.json)."""

import json

import pytest

from jaxtrans.errors import UserError
from jaxtrans.models import TransformerConfig
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.programs.evaluate import main
from jaxtrans.tasks.run_config import bert_run_config, complete_run_config, translation_run_config
from jaxtrans.tasks.saved_run_config import check_saved_run_config
from jaxtrans.tasks.translation.translation_task import TranslationTask


def saved_config(task: str = "translation") -> dict:
    """The config.json a run of ``task`` writes (the vocabulary sizes filled in)."""
    config = (translation_run_config() if task == "translation" else bert_run_config()).to_dict()
    config["task"] = task
    config["model"].update(vocab_size=300)
    if task == "translation":  # a run on local files
        config["model"].update(target_vocab_size=None)
        config["data"].update(tfds_name="", train="train.tsv", test="test.tsv")
    return config


def workdir_with(tmp_path, section: str, key: str, value, task: str = "translation") -> str:
    config = saved_config(task)
    config[section][key] = value
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(workdir)


def refusal(capsys, workdir: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate.py", "--workdir", workdir])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


WRONG_TYPES = [
    ("model", "d_model", "512", 'model.d_model="512" is a string; expected a whole number'),
    ("model", "num_heads", 8.5, "model.num_heads=8.5 is a number; expected a whole number"),
    ("model", "dropout_rate", "x", 'model.dropout_rate="x" is a string; expected a number'),
    ("model", "num_encoder_layers", [6], "num_encoder_layers=[6] is an array; expected a whole"),
    ("model", "layer_norm_epsilon", None, "layer_norm_epsilon=null is null; expected a number"),
    ("model", "tie_output", 1, "model.tie_output=1 is a number; expected true or false"),
    ("model", "target_vocab_size", "300", "expected a whole number or null"),
    ("model", "activation", 3, "model.activation=3 is a number; expected a string"),
    ("data", "max_source_length", "32", 'data.max_source_length="32" is a string'),
    ("data", "demo_test_size", 8.5, "data.demo_test_size=8.5 is a number; expected a whole"),
    ("data", "test", 3, "data.test=3 is a number; expected a string"),
    ("data", "reverse", "false", 'data.reverse="false" is a string; expected true or false'),
    ("eval", "beam_size", "4", 'eval.beam_size="4" is a string; expected a whole number'),
    ("eval", "alpha", [0.6], "eval.alpha=[0.6] is an array; expected a number"),
    ("train", "num_steps", None, "train.num_steps=null is null; expected a whole number"),
    ("train", "label_smoothing", "0.1", 'train.label_smoothing="0.1" is a string'),
    ("optimizer", "learning_rate", {"peak": 1}, 'learning_rate={"peak": 1} is an object'),
    ("mesh", "data", "all", 'mesh.data="all" is a string; expected a whole number'),
]


@pytest.mark.parametrize(
    "section, key, value, says", WRONG_TYPES, ids=[f"{s}.{k}" for s, k, *_ in WRONG_TYPES]
)
def test_a_field_of_the_wrong_type_is_one_line_naming_file_field_value_and_type(
    tmp_path, capsys, section, key, value, says
):
    workdir = workdir_with(tmp_path, section, key, value)
    err = refusal(capsys, workdir)
    assert f"{workdir}/config.json: " in err and says in err, err


@pytest.mark.parametrize(
    "section, key, value, says",
    [
        ("model", "num_layers", "2", 'model.num_layers="2" is a string; expected a whole'),
        ("data", "masked_lm_prob", "0.15", 'data.masked_lm_prob="0.15" is a string'),
        ("eval", "num_batches", 1.5, "eval.num_batches=1.5 is a number; expected a whole"),
    ],
)
def test_a_bert_workdirs_fields_are_checked_by_its_own_sections(
    tmp_path, capsys, section, key, value, says
):
    workdir = workdir_with(tmp_path, section, key, value, task="bert_pretraining")
    err = refusal(capsys, workdir)
    assert f"{workdir}/config.json: " in err and says in err, err


WRONG_VALUES = [
    # Each failed later without naming config.json (the first with a JAX traceback).
    ("data", "max_source_length", -7, "data.max_source_length=-7"),
    ("data", "demo_test_size", -7, "data.demo_test_size=-7: a size, count or seed"),
    ("eval", "beam_size", 0, "eval.beam_size=0: use a value >= 1"),
    ("eval", "alpha", -1, "eval.alpha=-1: use a value >= 0"),
    ("eval", "penalty_form", "24", "eval.penalty_form='24': use one of gnmt, hf"),
    ("data", "test", "24", "data.test: 24: unknown data file type"),
]


@pytest.mark.parametrize(
    "section, key, value, says", WRONG_VALUES, ids=[f"{s}.{k}" for s, k, *_ in WRONG_VALUES]
)
def test_a_value_a_restored_run_cannot_use_is_refused_at_load_naming_the_file(
    tmp_path, capsys, section, key, value, says
):
    workdir = workdir_with(tmp_path, section, key, value)
    err = refusal(capsys, workdir)
    assert f"{workdir}/config.json: " in err and says in err, err


def test_a_model_without_a_shape_field_is_refused_naming_it(tmp_path, capsys):
    config = saved_config()
    del config["model"]["d_model"]
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert "the model section has no d_model" in refusal(capsys, str(tmp_path))


def test_values_of_the_right_type_pass_whatever_json_makes_of_them():
    """An int for a float (JSON writes 1.0 as 1), null where None is allowed, an old
    attention_impl name, a key no field has: the values' own checks judge them."""
    import ml_collections

    config = saved_config()
    config["model"].update(dropout_rate=0, rope_base=10000, attention_impl="fused")
    config["train"].update(keep_checkpoints=None)
    config["data"]["a_key_of_another_version"] = [1, 2]
    run_config = complete_run_config(ml_collections.ConfigDict(config))
    check_saved_run_config(run_config, TranslationTask.shape_fields, "config.json")


def test_model_configs_built_from_a_mapping_check_the_types_first():
    with pytest.raises(ValueError, match=r'^d_model="512" is a string; expected a whole number$'):
        TransformerConfig.from_dict({"d_model": "512"})
    with pytest.raises(ValueError, match="classifier_dropout_rate=.* expected a number or null"):
        BertConfig.from_dict({"classifier_dropout_rate": "0.1"})
    assert TransformerConfig.from_dict({"layer_norm_epsilon": 1}).layer_norm_epsilon == 1


def test_a_user_error_names_the_top_level_seed_too(tmp_path):
    import ml_collections

    config = saved_config()
    config["seed"] = "0"
    with pytest.raises(UserError, match='x/config.json: seed="0" is a string; expected a whole'):
        check_saved_run_config(ml_collections.ConfigDict(config), (), "x/config.json")
