"""SearchOptions: one frozen object of decoding settings, checked with one-line errors, a
pytree whose static part shapes a decoder's program and whose numbers are traced."""

import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.errors import UserError
from jaxtrans.inference import stored_decoders
from jaxtrans.inference.decoding import beam_decode
from jaxtrans.inference.options import DEFAULT_OPTIONS, PENALTY_FORMS, SearchOptions
from jaxtrans.models import Transformer


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(beam_size=0), r"^batch_size=64, beam_size=0, max_extra_length=50, "),
        (dict(batch_size=0), r"^batch_size=0, .*each must be at least 1$"),
        (dict(max_extra_length=0), r"max_extra_length=0, .*each must be at least 1$"),
        (dict(length_multiple=0), r"length_multiple=0: each must be at least 1$"),
        (dict(alpha=-1.0), r"^alpha=-1.0: the length penalty exponent must be >= 0$"),
        (dict(penalty_form="wu"), r"^penalty_form='wu': use one of gnmt, hf$"),
        (dict(temperature=-0.1), r"^temperature=-0.1: must be >= 0 \(0: greedy\)$"),
        (dict(top_k=2.5), r"^top_k=2.5: must be a whole number >= 0"),
        (dict(top_p=0.0), r"^top_p=0.0: must be in \(0, 1\]"),
        (dict(repetition_penalty=0.0), r"^repetition_penalty=0.0: must be > 0 \(1.0: none\)$"),
        (dict(no_repeat_ngram_size=-1), r"^no_repeat_ngram_size=-1: must be a whole number"),
        (dict(no_repeat_ngram_size=1.5), r"^no_repeat_ngram_size=1.5: must be a whole number"),
    ],
)
def test_unusable_settings_are_one_line_user_errors(bad, message):
    with pytest.raises(UserError, match=message) as error:
        SearchOptions(**bad).check()
    assert "\n" not in str(error.value)


def test_the_defaults_and_the_settings_a_user_may_give_pass_the_check():
    DEFAULT_OPTIONS.check()
    SearchOptions(beam_size=1, alpha=0.0, penalty_form="hf", length_multiple=8).check()
    SearchOptions(sampling=True, temperature=0.0, top_k=5, top_p=0.9, seed=3).check()
    SearchOptions(repetition_penalty=0.8, no_repeat_ngram_size=3).check()
    assert SearchOptions() == DEFAULT_OPTIONS and PENALTY_FORMS == ("gnmt", "hf")


def test_options_are_frozen_and_replace_makes_a_new_object():
    options = SearchOptions()
    with pytest.raises(AttributeError):
        options.beam_size = 2  # type: ignore[misc]
    changed = options.replace(beam_size=2, alpha=1.0)
    assert (changed.beam_size, changed.alpha, options.beam_size) == (2, 1.0, 4)


def test_the_numbers_are_leaves_and_the_rest_is_the_tree():
    options = SearchOptions(alpha=0.3, temperature=0.7, top_k=5, top_p=0.9, seed=2)
    leaves, tree = jax.tree.flatten(options)
    assert leaves == [0.3, 0.7, 5, 0.9, 2]
    assert jax.tree.unflatten(tree, leaves) == options
    # Another static setting is another tree (another program); another number is not.
    for changed in (dict(beam_size=2), dict(penalty_form="hf"), dict(no_repeat_ngram_size=2)):
        assert jax.tree.structure(options.replace(**changed)) != tree
    assert jax.tree.structure(options.replace(alpha=0.9, seed=7)) == tree


def test_a_decoder_program_is_one_for_every_setting_the_shapes_already_carry():
    a = SearchOptions(batch_size=8, max_extra_length=3, length_multiple=4, alpha=1, top_k=2.0)
    b = SearchOptions(batch_size=2, max_extra_length=9, alpha=0.25, top_k=7)
    assert jax.tree.structure(a.for_decoder()) == jax.tree.structure(b.for_decoder())
    types = [type(x) for x in jax.tree.leaves(a.for_decoder())]
    assert types == [float, float, int, float, int]
    assert a.for_decoder().alpha == 1.0 and a.for_decoder().top_k == 2


def _beam_inputs():
    config = tiny_transformer_config("rope", vocab=40)
    source = np.array([[5, 9, 12, 3, 0, 0], [7, 8, 3, 0, 0, 0]], np.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(1), source, source))["params"]
    return config, params, source, np.array([9, 6], np.int32)


@pytest.mark.slow
def test_alpha_is_traced_one_program_serves_every_alpha_and_a_beam_size_is_another():
    config, params, source, lengths = _beam_inputs()
    common = dict(config=config, max_len=9)
    before = beam_decode._cache_size()
    outputs = {
        alpha: beam_decode(
            params, source, lengths, SearchOptions(beam_size=3, alpha=alpha), **common
        )
        for alpha in (0.0, 0.6, 2.0)
    }
    assert beam_decode._cache_size() - before == 1
    beam_decode(params, source, lengths, SearchOptions(beam_size=2, alpha=0.6), **common)
    assert beam_decode._cache_size() - before == 2
    # The traced alpha is used: the scores are the log-probabilities over the penalties.
    scores = {alpha: np.asarray(found[1]) for alpha, found in outputs.items()}
    assert not np.allclose(scores[0.0], scores[2.0])


@pytest.mark.slow
def test_a_stored_beam_decoder_reads_its_options_back_and_decodes_as_the_jitted_one(
    tmp_path, monkeypatch
):
    """The options are serialised with the program (their static part in its tree): a
    fresh process reads it back, and another beam size is another stored program."""
    monkeypatch.setattr(stored_decoders, "store_directory", lambda: str(tmp_path))
    config, params, source, lengths = _beam_inputs()
    static = ("config", "max_len")

    def fresh():
        return stored_decoders.StoredJit(beam_decode.__wrapped__, static)

    options = SearchOptions(beam_size=3, alpha=0.6, penalty_form="hf")
    stored = fresh()(params, source, lengths, options, config=config, max_len=9)
    assert len(os.listdir(tmp_path)) == 1
    again = fresh()(params, source, lengths, options.replace(alpha=1.5), config=config, max_len=9)
    assert len(os.listdir(tmp_path)) == 1  # alpha is traced: the same program
    plain = jax.jit(beam_decode.__wrapped__, static_argnames=static)
    for got, alpha in ((stored, 0.6), (again, 1.5)):
        want = plain(
            params, source, lengths, options.replace(alpha=alpha), config=config, max_len=9
        )
        for x, y in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    fresh()(params, source, lengths, options.replace(beam_size=2), config=config, max_len=9)
    assert len(os.listdir(tmp_path)) == 2
