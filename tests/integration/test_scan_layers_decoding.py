"""Cached decoding with scanned layer stacks (config.scan_layers): greedy and beam search
through the scanned decoder, and translation (which decodes a scanned model layer by
layer), give the per-layer loop's tokens for the same parameters, stacked."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.decoding import beam_decode, greedy_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.layer_stacks import stack_layers
from jaxtrans.vocab import EOS_ID, PAD_ID


def decoding_model() -> tuple[TransformerConfig, dict]:
    """A tiny model whose EOS copies the last token's output weights, so hypotheses end
    at varied steps (random tiny models emit EOS first or never)."""
    config = tiny_transformer_config("rope", 13, num_encoder_layers=2, num_decoder_layers=3)
    source = jnp.ones((1, 4), jnp.int32)
    params = nn.unbox(Transformer(config).init(jax.random.key(1), source, source))["params"]
    kernel, bias = params["output"]["kernel"], params["output"]["bias"]
    params["output"] = {
        "kernel": kernel.at[:, EOS_ID].set(kernel[:, -1]),
        "bias": bias.at[EOS_ID].set(bias[-1] + 0.01),
    }
    return config, params


def decoding_sources() -> jnp.ndarray:
    rng = np.random.default_rng(0)
    source = rng.integers(3, 13, size=(6, 6))
    source[0, 4:] = PAD_ID
    source[2, 2:] = PAD_ID
    return jnp.asarray(source, jnp.int32)


def test_scanned_greedy_and_beam_decoding_give_the_loops_tokens():
    config, params = decoding_model()
    scanned, stacked = config.replace(scan_layers=True), stack_layers(params)
    source, lengths = decoding_sources(), jnp.full((6,), 10, jnp.int32)
    greedy = greedy_decode(params, source, lengths, config=config, max_len=10)
    np.testing.assert_array_equal(
        greedy_decode(stacked, source, lengths, config=scanned, max_len=10), greedy
    )
    beam = SearchOptions(beam_size=3)
    tokens, scores = beam_decode(params, source, lengths, beam, config=config, max_len=10)
    scanned_tokens, scanned_scores = beam_decode(
        stacked, source, lengths, beam, config=scanned, max_len=10
    )
    np.testing.assert_array_equal(scanned_tokens, tokens)
    np.testing.assert_allclose(scanned_scores, scores, atol=1e-5, rtol=0)
    assert len({tuple(row) for row in np.asarray(greedy)}) > 1  # not one repeated output


def test_translating_with_a_scanned_model_decodes_layer_by_layer_to_the_same_tokens():
    config, params = decoding_model()
    sources = [[5, 6, 7, EOS_ID], [8, 9, EOS_ID], [10, 11, 12, 4, 5, EOS_ID]]  # vocabulary 13
    for beam_size in (1, 3):
        options = SearchOptions(beam_size=beam_size, max_extra_length=6)
        looped = translate_ids(config, params, sources, options)
        scanned = translate_ids(
            config.replace(scan_layers=True), stack_layers(params), sources, options
        )
        assert scanned == looped
