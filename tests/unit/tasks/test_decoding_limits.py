"""The largest decoding sizes a translation model takes (tasks.translation.decoding_limits):
the beam and n-best list within the target vocabulary, max_extra_length within the learned
positions or a fixed cap, the decoder's cached keys and values within a memory budget;
each refused through decoding_settings with one line naming the limit, and no config
shipped in configs/ near them."""

import importlib
import sys

import ml_collections
import pytest
from paths import REPO

from jaxtrans.errors import UserError
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.decoding_limits import (
    DECODING_MEMORY_GIB,
    MAX_EXTRA_LENGTH,
    cache_bytes_per_token,
    decoding_model,
)
from jaxtrans.tasks.translation.decoding_settings import decoding_settings

SOURCE_LENGTH = 32


def run_config(resolved: bool = True, **model) -> ml_collections.ConfigDict:
    """A translation run config with a 32-wide, 2-decoder-layer model and sources of up to
    SOURCE_LENGTH tokens; ``resolved``: with the vocabulary size the tokenizer decided."""
    section = dict(d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1, num_decoder_layers=2)
    if resolved:
        section.update(vocab_size=300, target_vocab_size=None)
    section.update(model)
    return ml_collections.ConfigDict(
        {
            "model": section,
            "data": {"max_source_length": SOURCE_LENGTH},
            "eval": {"beam_size": 4, "batch_size": 64, "max_extra_length": 50},
        }
    )


def refused(config: ml_collections.ConfigDict, **given) -> str:
    with pytest.raises(UserError) as error:
        decoding_settings(config, **given)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_beam_wider_than_the_target_vocabulary_is_refused_naming_its_size():
    assert decoding_settings(run_config(), beam_size=300).options.beam_size == 300
    message = refused(run_config(), beam_size=301)
    assert "beam_size=301 is wider than the target vocabulary (300 tokens)" in message
    assert "beam_size <= 300" in message
    separate = run_config(target_vocab_size=120, share_embeddings=False, tie_output=False)
    assert "beam_size <= 120" in refused(separate, beam_size=121)


def test_an_nbest_list_longer_than_the_vocabulary_asks_for_a_shorter_list_not_a_wider_beam():
    message = refused(run_config(), nbest=10**9)
    assert message.startswith("nbest=1000000000:") and "nbest <= 300" in message
    # Within the vocabulary, the list is still drawn from the beam.
    assert "give beam_size >= 5" in refused(run_config(), nbest=5)


def test_the_vocabulary_is_not_checked_before_the_tokenizer_has_sized_it():
    # A config at train start (TranslationTask.from_config): no vocab_size yet.
    unresolved = run_config(resolved=False)
    assert decoding_settings(unresolved, beam_size=1000, batch_size=1).options.beam_size == 1000


def test_learned_positions_limit_max_extra_length_to_max_len():
    learned = run_config(position="learned", max_len=64)
    assert decoding_settings(learned, max_extra_length=64).options.max_extra_length == 64
    message = refused(learned, max_extra_length=65)
    assert "learned positions end at model.max_len=64" in message
    assert "max_extra_length <= 64" in message


@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
def test_other_positions_limit_max_extra_length_to_a_fixed_cap(position):
    config = run_config(position=position, max_len=64)
    given = dict(beam_size=1, batch_size=1)
    assert decoding_settings(config, max_extra_length=MAX_EXTRA_LENGTH, **given)
    message = refused(config, max_extra_length=MAX_EXTRA_LENGTH + 1, **given)
    assert f"max_extra_length <= {MAX_EXTRA_LENGTH}" in message and position in message


def test_the_decoder_cache_of_a_batch_must_fit_the_memory_budget():
    # 2 (keys, values) x 2 decoder layers x d_model 32 x 4 bytes (float32) a token.
    per_token = 2 * 2 * 32 * 4
    assert cache_bytes_per_token(TransformerConfig(d_model=32, num_decoder_layers=2)) == per_token
    tokens = SOURCE_LENGTH + 50
    largest = DECODING_MEMORY_GIB * 2**30 // (4 * tokens * per_token)
    assert decoding_settings(run_config(), batch_size=largest).options.batch_size == largest
    message = refused(run_config(), batch_size=largest + 1)
    assert f"beam_size=4 x batch_size={largest + 1} x (data.max_source_length=32" in message
    assert f"over the {DECODING_MEMORY_GIB} GiB" in message
    # bfloat16 keys and values take half the bytes, so twice the batch fits.
    assert decoding_settings(run_config(dtype="bfloat16"), batch_size=2 * largest)


def test_huge_sizes_are_refused_by_the_first_limit_they_pass():
    assert "target vocabulary" in refused(run_config(), beam_size=10**9)
    assert "max_extra_length <=" in refused(run_config(), max_extra_length=10**9)
    assert "GiB" in refused(run_config(), batch_size=10**9)


def test_sizes_below_one_and_invalid_models_are_left_to_their_own_checks():
    # SearchOptions.check refuses sizes below 1; the model's own check a bad model.
    assert "each must be at least 1" in refused(run_config(), beam_size=-(10**6))
    assert decoding_settings(run_config(dtype="float8"), batch_size=10**9)
    assert decoding_settings(ml_collections.ConfigDict(), batch_size=10**9)


@pytest.mark.parametrize("name", ["base", "big", "demo", "small_data", "translation2019zh"])
def test_no_shipped_config_comes_near_the_limits(name):
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    config = importlib.import_module(f"configs.{name}").get_config()
    config.model.vocab_size = config.data.vocab_size  # as the tokenizer resolves it
    assert decoding_model(config) is not None
    settings = decoding_settings(config).options
    assert decoding_settings(
        config,
        beam_size=min(settings.beam_size * 4, config.data.vocab_size),
        batch_size=settings.batch_size * 4,
    )
