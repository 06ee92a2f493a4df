"""The tiny models, configs and tokenizers many tests share.

Tests import them directly: ``from tiny_configs import tiny_transformer_config``.
"""

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from paths import REPO

from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.vocab import PAD_ID


def tiny_transformer_config(
    position: str = "rope", vocab: int = 13, **changes
) -> TransformerConfig:
    """A 16-wide, 1+2-layer Transformer without dropout, untied output: fast to compile
    and deterministic, for decoding, translation and report tests."""
    base = dict(
        vocab_size=vocab,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=2,
        max_len=32,
        position=position,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        activation_dropout_rate=0.0,
        tie_output=False,
    )
    return TransformerConfig(**{**base, **changes})


class WordTokenizer:
    """Each whitespace-separated number is one token id (source and target)."""

    def encode_source(self, text: str) -> list[int]:
        return [int(word) for word in text.split()]

    def decode_target(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))

    encode_target = encode_source
    decode_source = decode_target


# configs/demo.py shrunk to a run of seconds: the overrides, as --config.KEY=VALUE keys.
TINY_TRANSLATION = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "data.demo_train_size": 1500,
    "data.demo_dev_size": 40,
    "data.demo_test_size": 40,
    "data.vocab_size": 300,
    "data.batch_size": 8,
    "data.max_source_length": 24,
    "data.max_target_length": 24,
    "train.log_every": 1,
    "train.eval_every": 0,
    # Batches made in the training process: seconds saved per run (worker processes are
    # tested on their own, tests/unit/data/test_data_workers.py).
    "data.workers": 0,
}

# configs/bert_demo.py shrunk likewise.
TINY_PRETRAINING = {
    "model.d_model": 32,
    "model.num_heads": 2,
    "model.d_ff": 64,
    "model.num_layers": 1,
    "model.max_len": 32,
    # Dropout on, so that resuming must also repeat the dropout masks.
    "model.dropout_rate": 0.1,
    "data.demo_documents": 200,
    "data.vocab_size": 200,
    "data.demo_dev_documents": 20,
    "data.max_seq_length": 32,
    "data.max_predictions_per_seq": 5,
    "data.batch_size": 8,
    "data.read_threads": 1,
    # Constant, so that a shorter run has the same rates as a longer one.
    "optimizer.schedule": "constant",
    "optimizer.learning_rate": 1e-3,
    "train.log_every": 1,
    "train.checkpoint_every": 3,
    "train.eval_every": 6,
    "train.async_checkpoints": False,
    "eval.batch_size": 16,
    "eval.num_batches": 1,
}


def tiny_translation_config(num_steps: int, **overrides) -> ml_collections.ConfigDict:
    """configs/demo.py with TINY_TRANSLATION, ``num_steps`` and ``overrides`` (flattened
    keys, e.g. ``**{"train.checkpoint_every": 3}``)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import demo

    config = demo.get_config()
    config.update_from_flattened_dict(
        {**TINY_TRANSLATION, "train.num_steps": num_steps, **overrides}
    )
    return config


def tiny_translation_models(rows: int):
    """Two tiny translation models, RoPE and learned positions ([(config, params), ...]),
    and a batch of ``rows`` ragged sources [rows, 6] (PAD after each row's end) they share:
    a model alone or the two as an ensemble, for the search tests."""
    rng = np.random.default_rng(4)
    source = rng.integers(3, 11, size=(rows, 6))
    source[np.arange(rows), rng.integers(2, 6, rows)] = PAD_ID
    source = jnp.asarray(np.where(np.cumsum(source == PAD_ID, 1) > 0, PAD_ID, source), jnp.int32)
    models = []
    for seed, position in [(1, "rope"), (2, "learned")]:
        config = tiny_transformer_config(position, vocab=11)
        params = Transformer(config).init(jax.random.key(seed), source, source)["params"]
        models.append((config, nn.unbox(params)))
    return models, source
