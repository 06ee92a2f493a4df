"""BERT model behaviour beyond Hugging Face parity: what must not matter, and the options
Hugging Face has no counterpart for (Pre-LN, other positions, bfloat16)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrans.models.bert.bert_model import (
    BertConfig,
    BertForClassification,
    BertForPretraining,
    BertModel,
)

SMALL = BertConfig(
    vocab_size=40, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=12, num_labels=3
)
IDS = np.array([[4, 9, 10, 11, 5, 12, 13, 5, 0, 0], [4, 20, 21, 5, 22, 5, 0, 0, 0, 0]], np.int32)
TYPES = np.array([[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0, 0, 0]], np.int32)
REAL = IDS != 0


def init_apply(model, *args, **kwargs):
    variables = model.init(jax.random.key(0), *args)
    return variables, model.apply(variables, *args, **kwargs)


@pytest.mark.slow
def test_padding_tokens_do_not_change_the_real_positions():
    variables, (sequence, pooled) = init_apply(BertModel(SMALL), IDS, TYPES)
    # Whatever sits at padded positions (ids, token types) is never attended to.
    noisy_ids = np.where(REAL, IDS, 33)
    noisy_types = np.where(REAL, TYPES, 1)
    mask = REAL.astype(np.int32)
    other, other_pooled = BertModel(SMALL).apply(variables, noisy_ids, noisy_types, mask)
    np.testing.assert_allclose(np.asarray(other)[REAL], np.asarray(sequence)[REAL], atol=1e-6)
    np.testing.assert_allclose(other_pooled, pooled, atol=1e-6)


@pytest.mark.slow
def test_token_types_and_positions_reach_the_output():
    variables, (sequence, _) = init_apply(BertModel(SMALL), IDS, TYPES)
    swapped, _ = BertModel(SMALL).apply(variables, IDS, 1 - TYPES)
    assert not np.allclose(np.asarray(swapped)[REAL], np.asarray(sequence)[REAL], atol=1e-3)
    shifted, _ = BertModel(SMALL).apply(variables, IDS, TYPES, positions=np.full(IDS.shape, 3))
    assert not np.allclose(np.asarray(shifted)[REAL], np.asarray(sequence)[REAL], atol=1e-3)


@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
def test_other_position_kinds_have_no_learned_table(position):
    cfg = SMALL.replace(position=position)
    variables, (sequence, _) = init_apply(BertModel(cfg), IDS, TYPES)
    assert "position_embeddings" not in variables["params"]
    assert sequence.shape == (2, 10, 16) and np.all(np.isfinite(sequence))


def test_pre_ln_adds_a_final_norm_and_changes_the_function():
    post_vars, (post, _) = init_apply(BertModel(SMALL), IDS, TYPES)
    pre_model = BertModel(SMALL.replace(norm="pre"))
    pre_vars = pre_model.init(jax.random.key(0), IDS, TYPES)
    assert "final_norm" in pre_vars["params"]["encoder"]
    assert "final_norm" not in post_vars["params"]["encoder"]
    # The same weights, arranged as Pre-LN, compute something else.
    encoder = {
        **post_vars["params"]["encoder"],
        "final_norm": pre_vars["params"]["encoder"]["final_norm"],
    }
    shared = {"params": {**post_vars["params"], "encoder": encoder}}
    pre, _ = pre_model.apply(shared, IDS, TYPES)
    assert not np.allclose(pre, post, atol=1e-3)


@pytest.mark.slow
def test_dropout_acts_only_when_not_deterministic():
    cfg = SMALL.replace(dropout_rate=0.3, attention_dropout_rate=0.3)
    model = BertForClassification(cfg)
    variables = model.init(jax.random.key(0), IDS, TYPES)
    first = model.apply(variables, IDS, TYPES, deterministic=True)
    np.testing.assert_array_equal(first, model.apply(variables, IDS, TYPES))
    a = model.apply(variables, IDS, TYPES, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = model.apply(variables, IDS, TYPES, deterministic=False, rngs={"dropout": jax.random.key(2)})
    assert not np.allclose(a, b) and a.shape == (2, 3)


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_parameters_and_logits():
    model = BertForPretraining(SMALL.replace(dtype="bfloat16"))
    variables, (mlm, nsp) = init_apply(model, IDS, TYPES, None, np.array([[1, 2], [1, 4]]))
    leaves = jax.tree_util.tree_leaves(jax.tree_util.tree_map(jnp.asarray, variables))
    assert {leaf.dtype for leaf in leaves} == {jnp.dtype("float32")}
    assert mlm.dtype == nsp.dtype == jnp.float32 and mlm.shape == (2, 2, 40)
    full, _ = BertForPretraining(SMALL).apply(
        variables, IDS, TYPES, None, np.array([[1, 2], [1, 4]])
    )
    np.testing.assert_allclose(mlm, full, atol=0.1)  # bfloat16 rounding, same function


def test_sequences_longer_than_the_position_table_are_rejected():
    model = BertModel(SMALL)
    variables = model.init(jax.random.key(0), IDS)
    with pytest.raises(ValueError, match="max_len"):
        model.apply(variables, np.ones((1, 13), np.int32))


def test_config_rejects_impossible_sizes():
    with pytest.raises(ValueError, match="num_labels"):
        BertConfig(num_labels=0)
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(d_model=30, num_heads=4)
