"""CTranslate2's translate_batch settings that make it search as jaxtrans does
(jaxtrans.tasks.translation.ctranslate2_decoding): what each is set to, and why."""

import pytest

from jaxtrans.errors import UserError
from jaxtrans.inference.options import SearchOptions
from jaxtrans.tasks.translation.ctranslate2_decoding import search_options

HF = SearchOptions(beam_size=4, alpha=0.6, penalty_form="hf")


def test_the_length_penalty_is_hf_alpha_counting_the_end_token():
    settings = search_options(HF, max_length=40)
    assert settings["length_penalty"] == 0.6 and settings["return_end_token"] is True
    # jaxtrans may end at once; no logits processor unless the options hold one.
    assert settings["min_decoding_length"] == 0 and settings["max_decoding_length"] == 40
    assert settings["repetition_penalty"] == 1.0 and settings["no_repeat_ngram_size"] == 0


def test_the_logits_processors_are_carried_to_translate_batch():
    greedy = HF.replace(beam_size=1, repetition_penalty=1.3, no_repeat_ngram_size=2)
    settings = search_options(greedy, max_length=40)
    assert (settings["repetition_penalty"], settings["no_repeat_ngram_size"]) == (1.3, 2)
    assert isinstance(settings["no_repeat_ngram_size"], int)


def test_with_a_length_penalty_the_search_runs_to_the_limit_unless_patience_is_given():
    exact = search_options(HF.replace(alpha=1.0), max_length=40)
    assert exact["patience"] == 40.0
    fast = search_options(HF.replace(alpha=1.0), max_length=40, patience=1)
    assert fast["patience"] == 1.0
    # Without one, CTranslate2's early stop (the best candidate ended) is already exact.
    assert search_options(HF.replace(alpha=0.0), 40)["patience"] == 1.0


def test_the_gnmt_penalty_is_refused_where_it_would_change_the_search():
    with pytest.raises(UserError, match="penalty_form='hf'"):
        search_options(HF.replace(penalty_form="gnmt"), max_length=40)
    # alpha 0, or greedy search, has no penalty to express.
    assert search_options(SearchOptions(alpha=0.0), 40)["length_penalty"] == 0.0
    assert search_options(SearchOptions(beam_size=1), 40)["beam_size"] == 1


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(penalty_form="nope"), "penalty_form='nope'"),
        (dict(repetition_penalty=-1.0), "repetition_penalty=-1.0"),
    ],
)
def test_unusable_options_are_a_user_error(bad, message):
    with pytest.raises(UserError, match=message):
        search_options(HF.replace(**bad), 40)


def test_logits_processors_are_refused_in_beam_search():
    """CTranslate2's beam search renormalises the processed logits; jaxtrans's does not."""
    for processors in (dict(repetition_penalty=1.3), dict(no_repeat_ngram_size=2)):
        with pytest.raises(UserError, match="renormalises") as error:
            search_options(HF.replace(**processors), 40)
        assert "\n" not in str(error.value)
