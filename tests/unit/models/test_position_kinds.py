"""The models and exporters ask each position kind rather than naming it: an exporter
given a kind its format cannot express refuses it in one line, for every registered kind
and for a kind with a bias on the attention scores (tests/helpers/position_kinds.py);
such a kind decodes from the cache as it computes teacher-forced."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from position_kinds import DistancePenalty

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import cross_attention_cache, init_cache, make_step_fn
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.bert import bert_to_huggingface
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.ctranslate2_spec import check_positions
from jaxtrans.models.marian import marian_to_huggingface
from jaxtrans.nn.positions import ENCODINGS

VOCAB = 23


@pytest.fixture
def with_bias_kind(monkeypatch):
    """ENCODINGS with the test kind that biases attention scores, for one test."""
    monkeypatch.setitem(ENCODINGS, DistancePenalty.name, DistancePenalty)


def transformer_config(position: str, **changes) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ff=32, num_encoder_layers=2,
        num_decoder_layers=2, max_len=16, position=position, dropout_rate=0.0,
        attention_dropout_rate=0.0, activation_dropout_rate=0.0, **changes,
    )  # fmt: skip


def refusal(check, config) -> str | None:
    """The one-line UserError ``check(config)`` raises, None when it accepts."""
    try:
        check(config)
    except UserError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(f"model.position={config.position!r}")
        return message
    return None


@pytest.mark.usefixtures("with_bias_kind")
@pytest.mark.parametrize("name", sorted({*ENCODINGS, DistancePenalty.name}))
def test_each_exporter_accepts_the_kinds_it_can_write_and_refuses_the_rest_in_one_line(name):
    config = transformer_config(name)
    marian = refusal(marian_to_huggingface.check_exportable, config)
    assert (marian is None) == (name == "sinusoidal")
    ctranslate2 = refusal(check_positions, config)
    # CTranslate2 writes a table added to the embeddings and RoPE, not a score bias.
    assert (ctranslate2 is None) == (name != DistancePenalty.name)
    if ctranslate2 is not None:
        assert "bias on the attention scores" in ctranslate2
    bert = BertConfig(d_model=16, num_heads=2, d_ff=32, num_layers=1, vocab_size=VOCAB)
    refused = refusal(bert_to_huggingface.check_exportable, bert.replace(position=name))
    assert (refused is None) == (name == "learned")


@pytest.mark.slow
@pytest.mark.usefixtures("with_bias_kind")
def test_a_score_bias_decodes_from_the_cache_as_teacher_forcing_computes():
    config = transformer_config(DistancePenalty.name)
    rng = np.random.default_rng(0)
    source = jnp.asarray(rng.integers(4, VOCAB, size=(2, 7)), jnp.int32).at[1, 5:].set(0)
    target = jnp.asarray(rng.integers(4, VOCAB, size=(2, 6)), jnp.int32).at[:, 0].set(2)
    model = Transformer(config)
    params = nn.unbox(model.init(jax.random.key(0), source, target))["params"]
    params = jax.tree.map(lambda p: 3 * p, params)  # outputs that differ between positions
    forced = np.asarray(model.apply({"params": params}, source, target))

    memory = model.apply({"params": params}, source, method=Transformer.encode)
    memory_cache = cross_attention_cache(config, params, memory, source)
    cache = init_cache(config, params, memory_cache, source, max_len=8)
    step = make_step_fn(config, params, memory_cache, source)
    for t in range(target.shape[1]):
        logits, cache = step(cache, target[:, t], jnp.int32(t))
        np.testing.assert_allclose(np.asarray(logits), forced[:, t], atol=2e-4, rtol=1e-4)
    # The bias matters: without it (sinusoids) the teacher-forced logits differ.
    other = Transformer(config.replace(position="sinusoidal"))
    assert not np.allclose(other.apply({"params": params}, source, target), forced, atol=1e-2)
