"""The model section of every config is its model dataclass's defaults plus the values
the config writes down: jaxtrans/config_sections.py and the recipes it must still give."""

import sys

import pytest
from paths import REPO

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from configs import (  # noqa: E402
    base,
    bert_base,
    bert_classify,
    bert_demo,
    bert_ner,
    bert_ner_demo,
    bert_qa,
    bert_qa_demo,
    big,
    demo,
    marian_finetune,
    small_data,
    translation2019zh,
)
from jaxtrans.config_sections import dataclass_section  # noqa: E402
from jaxtrans.models import BertConfig, TransformerConfig  # noqa: E402
from jaxtrans.nn import BlockConfig  # noqa: E402
from jaxtrans.tasks.translation.translation_init import FINE_TUNING_FIELDS  # noqa: E402


def test_section_holds_every_field_with_its_default():
    assert dataclass_section(BlockConfig).to_dict() == vars(BlockConfig())


def test_overrides_change_only_their_fields():
    section = dataclass_section(BlockConfig, layer_norm_epsilon=1e-6, d_model=256)
    assert section.layer_norm_epsilon == 1e-6 and section.d_model == 256
    assert section.to_dict() == vars(BlockConfig(layer_norm_epsilon=1e-6, d_model=256))


def test_exclude_and_only_choose_the_fields():
    assert "remat" not in dataclass_section(BlockConfig, exclude=("remat",))
    only = dataclass_section(BlockConfig, only=("dtype", "d_model"))
    assert only.to_dict() == {"d_model": 512, "dtype": "float32"}


@pytest.mark.parametrize(
    "arguments",
    [{"exclude": ("d_modle",)}, {"only": ("d_modle",)}, {"d_modle": 256}],
    ids=["exclude", "only", "override"],
)
def test_unknown_field_names_are_refused(arguments):
    with pytest.raises(ValueError, match=r"BlockConfig has no fields \['d_modle'\]"):
        dataclass_section(BlockConfig, **arguments)


def test_an_override_of_a_left_out_field_is_refused():
    with pytest.raises(ValueError, match="leaves out: \\['remat'\\]"):
        dataclass_section(BlockConfig, exclude=("remat",), remat=True)
    with pytest.raises(ValueError, match="leaves out: \\['remat'\\]"):
        dataclass_section(BlockConfig, only=("dtype",), remat=True)


def test_override_values_are_checked_by_the_dataclass():
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        dataclass_section(BlockConfig, num_heads=7)


@pytest.mark.parametrize(
    "config, model_class, run_time_fields",
    [
        (base, TransformerConfig, {"vocab_size", "target_vocab_size", "pad_id", "decode"}),
        (big, TransformerConfig, {"vocab_size", "target_vocab_size", "pad_id", "decode"}),
        (demo, TransformerConfig, {"vocab_size", "target_vocab_size", "pad_id", "decode"}),
        (bert_base, BertConfig, {"vocab_size", "pad_id"}),
        (bert_demo, BertConfig, {"vocab_size", "pad_id"}),
    ],
    ids=["base", "big", "demo", "bert_base", "bert_demo"],
)
def test_model_section_is_every_field_not_set_at_run_time(config, model_class, run_time_fields):
    model = config.get_config().model
    assert set(model.keys()) == set(vars(model_class())) - run_time_fields
    model_class.from_dict(model.to_dict())  # a valid model


def test_fine_tuning_sets_only_regularisation_and_compute_fields():
    model = bert_classify.get_config().model
    assert set(model.keys()) == {
        "dropout_rate",
        "attention_dropout_rate",
        "activation_dropout_rate",
        "classifier_dropout_rate",
        "attention_impl",
        "remat",
        "scan_layers",
        "dtype",
        "param_dtype",
    }
    assert model.to_dict() == {key: getattr(BertConfig(dtype="bfloat16"), key) for key in model}


def test_marian_fine_tuning_leaves_dropout_to_the_directory_unless_set():
    model = marian_finetune.get_config().model
    assert set(model.keys()) == set(FINE_TUNING_FIELDS)
    for name in ("dropout_rate", "attention_dropout_rate", "activation_dropout_rate"):
        assert model[name] is None  # the directory's config.json decides
        model[name] = 0.2  # a float placeholder: --config.model.NAME=0.2 sets it


TRANSFORMER_BASE = {  # Vaswani et al. 2017, Table 3 "base", with tensor2tensor's epsilon
    "d_model": 512,
    "num_heads": 8,
    "d_ff": 2048,
    "num_encoder_layers": 6,
    "num_decoder_layers": 6,
    "dropout_rate": 0.1,  # P_drop: residual branches and embeddings only, as fairseq's
    "attention_dropout_rate": 0.0,
    "activation_dropout_rate": 0.0,
    "activation": "relu",
    "norm": "post",
    "position": "sinusoidal",
    "layer_norm_epsilon": 1e-6,
    "share_embeddings": True,
    "tie_output": True,
}


def test_base_is_the_papers_base_model():
    model = base.get_config().model
    assert {key: model[key] for key in TRANSFORMER_BASE} == TRANSFORMER_BASE


def test_big_is_the_papers_big_model():
    model = big.get_config().model
    expected = TRANSFORMER_BASE | {"d_model": 1024, "num_heads": 16, "d_ff": 4096}
    expected |= {"dropout_rate": 0.3}
    assert {key: model[key] for key in expected} == expected


def test_bert_base_is_released_bert_base():
    model = bert_base.get_config().model
    expected = {
        "d_model": 768,
        "num_heads": 12,
        "d_ff": 3072,
        "num_layers": 12,
        "type_vocab_size": 2,
        "dropout_rate": 0.1,
        "attention_dropout_rate": 0.1,
        "activation_dropout_rate": 0.0,
        "activation": "gelu",
        "norm": "post",
        "position": "learned",
        "max_len": 512,
        "layer_norm_epsilon": 1e-12,
    }
    assert {key: model[key] for key in expected} == expected


# The recipes meant for GPUs and TPUs, and those sized for a CPU.
ACCELERATOR = [base, big, translation2019zh, marian_finetune, bert_base, bert_classify,
               bert_ner, bert_qa]  # fmt: skip
CPU = [demo, small_data, bert_demo, bert_ner_demo, bert_qa_demo]


@pytest.mark.parametrize("config", ACCELERATOR, ids=lambda c: c.__name__.split(".")[-1])
def test_accelerator_recipes_compute_in_bfloat16_on_float32_parameters_with_rbg(config):
    run = config.get_config()
    assert (run.model.dtype, run.model.param_dtype) == ("bfloat16", "float32")
    assert run.train.dropout_rng_impl == "rbg"
    assert run.model.attention_impl == "auto"


@pytest.mark.parametrize("config", CPU, ids=lambda c: c.__name__.split(".")[-1])
def test_cpu_recipes_keep_float32_and_threefry(config):
    run = config.get_config()
    assert (run.model.dtype, run.model.param_dtype) == ("float32", "float32")
    assert run.train.dropout_rng_impl == "threefry"


def test_the_bert_recipes_keep_berts_attention_dropout():
    # attention_probs_dropout_prob 0.1 (docs/bert.md): their attention runs xla.
    for config in (bert_base, bert_classify, bert_ner, bert_qa):
        assert config.get_config().model.attention_dropout_rate == 0.1
