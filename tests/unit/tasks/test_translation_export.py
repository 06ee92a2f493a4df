"""The generation_config.json of a Marian export: how transformers' generate() decodes it by
default, from the run's eval section."""

import types

import ml_collections

from jaxtrans.tasks.translation.translation_export import generation_config

HF_CONFIG = {"vocab_size": 100, "pad_token_id": 99, "max_position_embeddings": 64}


def run_with_eval(**evaluation) -> types.SimpleNamespace:
    config = ml_collections.ConfigDict({"eval": evaluation})
    return types.SimpleNamespace(run_config=config)


def test_an_hf_penalty_run_exports_its_alpha_as_length_penalty():
    settings = generation_config(
        run_with_eval(penalty_form="hf", alpha=1.3, beam_size=5), HF_CONFIG
    )
    assert settings["length_penalty"] == 1.3 and settings["num_beams"] == 5


def test_a_gnmt_penalty_run_leaves_generates_own_length_penalty():
    # ((5 + len) / 6) ** alpha has no generate() setting: none is written.
    settings = generation_config(run_with_eval(penalty_form="gnmt", alpha=0.6), HF_CONFIG)
    assert "length_penalty" not in settings and settings["num_beams"] == 4


def test_the_logits_processors_are_exported_where_they_are_on():
    settings = generation_config(
        run_with_eval(repetition_penalty=1.2, no_repeat_ngram_size=3), HF_CONFIG
    )
    assert (settings["repetition_penalty"], settings["no_repeat_ngram_size"]) == (1.2, 3)
    plain = generation_config(run_with_eval(), HF_CONFIG)
    assert "repetition_penalty" not in plain and "no_repeat_ngram_size" not in plain


def test_an_older_run_without_an_eval_section_takes_the_defaults():
    settings = generation_config(
        types.SimpleNamespace(run_config=ml_collections.ConfigDict()), HF_CONFIG
    )
    assert settings["num_beams"] == 4 and "length_penalty" not in settings
    assert settings["decoder_start_token_id"] == settings["pad_token_id"] == 99
