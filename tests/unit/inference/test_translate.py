"""Translating sentence lists: batching, padding and ordering must not change a result."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from tiny_configs import WordTokenizer, tiny_transformer_config

from jaxtrans.errors import UserError
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate, translate_ids
from jaxtrans.models import Transformer
from jaxtrans.vocab import EOS_ID

EOS = EOS_ID
CONFIG = tiny_transformer_config()
# A long sentence pads the batch to 16 positions; each short one alone pads to 8.
LONG = "12 11 10 9 8 7 6 5 4 3 12"
SHORT = ["5 6 7", "8 9 10 11 12", "3 4 5 6 7 8", "9 9"]


@functools.cache
def params(eos_bias: float = 0.0) -> dict:
    """Random parameters; eos_bias is added to the EOS logit."""
    if eos_bias:
        out = dict(params())
        out["output"] = {**out["output"], "bias": out["output"]["bias"].at[EOS].add(eos_bias)}
        return out
    source = jnp.ones((1, 4), jnp.int32)
    init = jax.jit(Transformer(CONFIG).init)
    return nn.unbox(init(jax.random.key(3), source, source))["params"]


TRANSLATE = SearchOptions(beam_size=4, alpha=0.6, max_extra_length=3, length_multiple=8)


@pytest.mark.slow
def test_translating_a_batch_equals_translating_each_sentence_alone():
    tokenizer = WordTokenizer()
    options = TRANSLATE.replace(batch_size=4)
    together = translate(CONFIG, params(), tokenizer, [*SHORT, LONG], options)
    alone = [
        translate(CONFIG, params(), tokenizer, [sentence], TRANSLATE.replace(batch_size=1))[0]
        for sentence in SHORT
    ]
    assert together[: len(SHORT)] == alone
    assert len(set(alone)) > 1


@pytest.mark.slow
def test_a_hypothesis_never_exceeds_source_length_plus_max_extra_length():
    # EOS is never chosen, so every hypothesis runs to its limit.
    sources = [[*WordTokenizer().encode_source(s), EOS] for s in [*SHORT, LONG]]
    options = TRANSLATE.replace(batch_size=4)
    hypotheses = translate_ids(CONFIG, params(eos_bias=-1e9), sources, options)
    assert [len(h) for h in hypotheses] == [len(s) + 3 for s in sources]


@pytest.mark.parametrize(
    "bad", [dict(beam_size=0), dict(batch_size=0), dict(max_extra_length=0), dict(alpha=-1.0)]
)
def test_impossible_settings_raise_a_user_error(bad):
    with pytest.raises(UserError):
        translate_ids(CONFIG, params(), [[5, EOS]], SearchOptions(**bad))
