"""decoding_settings: one SearchOptions built from what is given, else the run config's eval
section, else SearchOptions' defaults; each default defined once."""

import dataclasses

import ml_collections
import pytest

from jaxtrans.errors import UserError
from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.tasks.translation.decoding_settings import (
    SECTION_FIELDS,
    Decoding,
    decoding_settings,
)
from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig, eval_section


def run(**evaluation) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"eval": evaluation})


def test_without_a_setting_anywhere_the_options_are_the_defaults():
    assert decoding_settings(ml_collections.ConfigDict()) == Decoding(DEFAULT_OPTIONS, 0)
    assert decoding_settings(ml_collections.ConfigDict({"eval": eval_section()})).options == (
        DEFAULT_OPTIONS
    )


@pytest.mark.parametrize("name, value", [("repetition_penalty", 1.3), ("no_repeat_ngram_size", 3)])
def test_a_logits_processor_comes_from_the_given_value_then_the_eval_section(name, value):
    assert getattr(decoding_settings(run(**{name: value})).options, name) == value
    given = {"repetition_penalty": 0.7, "no_repeat_ngram_size": 2}[name]
    assert getattr(decoding_settings(run(**{name: value}), **{name: given}).options, name) == given
    # None (a flag not given) is no value: the section's.
    assert getattr(decoding_settings(run(**{name: value}), **{name: None}).options, name) == value


def test_every_search_field_of_the_eval_section_is_read_from_it():
    section = {"beam_size": 3, "alpha": 1.5, "penalty_form": "hf", "max_extra_length": 7,
               "batch_size": 5, "repetition_penalty": 1.1, "no_repeat_ngram_size": 4}  # fmt: skip
    assert set(section) == set(SECTION_FIELDS)
    assert decoding_settings(run(**section)).options == SearchOptions(**section)
    # Sampling's settings and length_multiple are given, never read from the section.
    given = dict(sampling=True, temperature=0.5, top_k=3, top_p=0.8, seed=9, length_multiple=4)
    options = decoding_settings(run(**{**section, "beam_size": 1}), **given).options
    assert {k: getattr(options, k) for k in given} == given


def test_values_take_their_defaults_types_and_names_that_are_no_setting_are_ignored():
    options = decoding_settings(run(alpha=1, repetition_penalty=2), top_k=2.0, prefix="the").options
    assert (options.alpha, options.repetition_penalty, options.top_k) == (1.0, 2.0, 2)
    assert [type(options.alpha), type(options.repetition_penalty), type(options.top_k)] == [
        float, float, int,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "section, given, message",
    [
        ({"repetition_penalty": 0.0}, {}, r"^repetition_penalty=0.0: must be > 0"),
        ({}, {"no_repeat_ngram_size": -2}, r"^no_repeat_ngram_size=-2: must be a whole number"),
        ({"beam_size": 0}, {}, r"beam_size=0, .*each must be at least 1$"),
        ({"penalty_form": "wu"}, {}, r"^eval.penalty_form='wu': use gnmt"),
    ],
)
def test_unusable_settings_from_either_place_are_one_line_errors(section, given, message):
    with pytest.raises(UserError, match=message) as error:
        decoding_settings(run(**section), **given)
    assert "\n" not in str(error.value)


def test_the_eval_sections_search_defaults_are_search_options_defaults():
    section = dataclasses.asdict(TranslationEvalConfig())
    for name in SECTION_FIELDS:
        assert section[name] == getattr(DEFAULT_OPTIONS, name), name
