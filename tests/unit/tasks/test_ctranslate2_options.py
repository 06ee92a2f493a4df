"""CTranslate2's translate_batch settings that make it search as jaxtrans does
(jaxtrans.tasks.translation.ctranslate2_decoding): what each is set to, and why."""

import pytest

from jaxtrans.errors import UserError
from jaxtrans.tasks.translation.ctranslate2_decoding import search_options


def test_the_length_penalty_is_hf_alpha_counting_the_end_token():
    options = search_options(beam_size=4, alpha=0.6, penalty_form="hf", max_length=40)
    assert options["length_penalty"] == 0.6 and options["return_end_token"] is True
    # jaxtrans may end at once; no logits processors unless asked.
    assert options["min_decoding_length"] == 0 and options["max_decoding_length"] == 40
    assert options["repetition_penalty"] == 1.0 and options["no_repeat_ngram_size"] == 0


def test_with_a_length_penalty_the_search_runs_to_the_limit_unless_patience_is_given():
    exact = search_options(beam_size=4, alpha=1.0, penalty_form="hf", max_length=40)
    assert exact["patience"] == 40.0
    fast = search_options(beam_size=4, alpha=1.0, penalty_form="hf", max_length=40, patience=1)
    assert fast["patience"] == 1.0
    # Without one, CTranslate2's early stop (the best candidate ended) is already exact.
    assert search_options(4, 0.0, "hf", 40)["patience"] == 1.0


def test_the_gnmt_penalty_is_refused_where_it_would_change_the_search():
    with pytest.raises(UserError, match="penalty_form='hf'"):
        search_options(beam_size=4, alpha=0.6, penalty_form="gnmt", max_length=40)
    # alpha 0, or greedy search, has no penalty to express.
    assert search_options(4, 0.0, "gnmt", 40)["length_penalty"] == 0.0
    assert search_options(1, 0.6, "gnmt", 40)["beam_size"] == 1


def test_an_unknown_penalty_form_is_a_user_error():
    with pytest.raises(UserError, match="penalty_form='nope'"):
        search_options(4, 0.6, "nope", 40)


def test_logits_processors_are_passed_on_in_greedy_search_and_refused_in_beam_search():
    greedy = search_options(1, 0.0, "hf", 40, repetition_penalty=1.3, no_repeat_ngram_size=2)
    assert greedy["repetition_penalty"] == 1.3 and greedy["no_repeat_ngram_size"] == 2
    # CTranslate2's beam search renormalises the processed logits; jaxtrans's does not.
    for settings in (dict(repetition_penalty=1.3), dict(no_repeat_ngram_size=2)):
        with pytest.raises(UserError, match="renormalises") as error:
            search_options(4, 0.6, "hf", 40, **settings)
        assert "\n" not in str(error.value)
