"""jaxtrans BERT with weights loaded by from_huggingface equals Hugging Face's BERT.

The reference checkpoints are built here from random weights with ``transformers``
(no network): every parameter, biases and LayerNorm included, is perturbed away from
its initial value so that a mis-mapped tensor cannot hide behind a zero or a one.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built and read locally

import jax
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file, save_file

from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
from jaxtrans.models.bert.bert_model import (
    BertForClassification,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForTokenClassification,
    BertModel,
)
from jaxtrans.models.layer_stacks import graft_params

TOL = 1e-5
SMALL = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=24,
    type_vocab_size=2,
)


def perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model.eval()


def save_reference(cls, directory, seed: int = 0, **overrides):
    config = transformers.BertConfig(**{**SMALL, **overrides}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = perturbed(cls(config), seed)
    model.save_pretrained(directory)
    return model


def inputs(seed: int = 0):
    """A padded batch with segments A and B: ids, token types and attention mask [3, 12]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL["vocab_size"], size=(3, 12))
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids = np.where(mask == 1, ids, 0)
    types = np.zeros_like(ids)
    types[0, 6:] = 1
    types[1, 4:9] = 1
    return ids, types, mask


def torch_inputs(seed: int = 0) -> dict:
    ids, types, mask = inputs(seed)
    return dict(
        input_ids=torch.tensor(ids),
        token_type_ids=torch.tensor(types),
        attention_mask=torch.tensor(mask),
    )


def assert_close(ours, theirs: torch.Tensor):
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=0, atol=TOL)


@pytest.fixture(scope="module", params=["gelu", "gelu_new"])
def pretraining_checkpoint(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"bert_{request.param}")
    model = save_reference(transformers.BertForPreTraining, directory, hidden_act=request.param)
    return model, directory


def test_config_follows_the_checkpoint(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    cfg = from_huggingface(directory).config
    expected_activation = {"gelu": "gelu", "gelu_new": "gelu_tanh"}[reference.config.hidden_act]
    assert (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.d_ff) == (
        99,
        32,
        2,
        4,
        37,
    )
    assert (cfg.max_len, cfg.layer_norm_epsilon, cfg.norm) == (24, 1e-12, "post")
    assert cfg.activation == expected_activation


def test_sequence_and_pooled_output_equal_huggingface(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    ids, types, mask = inputs()
    sequence, pooled = BertModel(pretrained.config).apply(
        {"params": pretrained.params["bert"]}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference.bert(**torch_inputs())
    assert_close(sequence, expected.last_hidden_state)
    assert_close(pooled, expected.pooler_output)


def test_mlm_and_nsp_logits_equal_huggingface(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    ids, types, mask = inputs()
    mlm, nsp = BertForPretraining(pretrained.config).apply(
        {"params": pretrained.params}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference(**torch_inputs())
    assert_close(mlm, expected.prediction_logits)
    assert_close(nsp, expected.seq_relationship_logits)


def test_mlm_logits_at_masked_positions_equal_huggingface(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    ids, types, mask = inputs()
    positions = np.array([[1, 7, 11], [2, 3, 8], [0, 4, 4]])
    mlm, _ = BertForPretraining(pretrained.config).apply(
        {"params": pretrained.params}, ids, types, mask, positions
    )
    with torch.no_grad():
        full = reference(**torch_inputs()).prediction_logits
    expected = torch.stack([full[b, torch.tensor(positions[b])] for b in range(3)])
    assert_close(mlm, expected)


def test_padding_comes_from_pad_ids_when_no_mask_is_given(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    ids, types, _ = inputs()  # padding is id 0, the checkpoint's pad_token_id
    sequence, _ = BertModel(pretrained.config).apply(
        {"params": pretrained.params["bert"]}, ids, types
    )
    with torch.no_grad():
        expected = reference.bert(**torch_inputs()).last_hidden_state
    assert_close(sequence, expected)


def test_legacy_pytorch_bin_with_gamma_beta_names_loads_the_same(tmp_path):
    reference = save_reference(transformers.BertForPreTraining, tmp_path / "new")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "config.json").write_text((tmp_path / "new" / "config.json").read_text())
    state = {}
    for name, tensor in reference.state_dict().items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma")
        state[name.replace("LayerNorm.bias", "LayerNorm.beta")] = tensor.clone()
    torch.save(state, legacy / "pytorch_model.bin")

    new = from_huggingface(tmp_path / "new").params
    old = from_huggingface(legacy).params
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(old)
    for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(old), strict=True):
        np.testing.assert_array_equal(a, b)


def test_sharded_safetensors_load_the_same(pretraining_checkpoint, tmp_path):
    _, directory = pretraining_checkpoint
    state = load_file(directory / "model.safetensors")
    names = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, tmp_path / shard)
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    whole, sharded = from_huggingface(directory).params, from_huggingface(tmp_path).params
    for a, b in zip(
        jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(sharded), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_classification_logits_equal_huggingface(tmp_path):
    reference = save_reference(transformers.BertForSequenceClassification, tmp_path, num_labels=3)
    pretrained = from_huggingface(tmp_path)
    assert pretrained.config.num_labels == 3
    ids, types, mask = inputs(1)
    logits = BertForClassification(pretrained.config).apply(
        {"params": pretrained.params}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference(**torch_inputs(1)).logits
    assert_close(logits, expected)


def test_token_classification_logits_equal_huggingface(tmp_path):
    reference = save_reference(transformers.BertForTokenClassification, tmp_path, num_labels=5)
    pretrained = from_huggingface(tmp_path)
    assert pretrained.config.num_labels == 5
    assert "pooler" not in pretrained.params["bert"]  # saved without one, as HF builds it
    ids, types, mask = inputs(2)
    logits = BertForTokenClassification(pretrained.config).apply(
        {"params": pretrained.params}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference(**torch_inputs(2)).logits
    assert logits.shape == (3, 12, 5)
    assert_close(logits, expected)


def test_question_answering_logits_equal_huggingface(tmp_path):
    reference = save_reference(transformers.BertForQuestionAnswering, tmp_path)
    pretrained = from_huggingface(tmp_path)
    ids, types, mask = inputs(3)
    start, end = BertForQuestionAnswering(pretrained.config).apply(
        {"params": pretrained.params}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference(**torch_inputs(3))
    assert start.shape == end.shape == (3, 12)
    assert_close(start, expected.start_logits)
    assert_close(end, expected.end_logits)


def test_graft_puts_the_encoder_into_a_new_classifier(pretraining_checkpoint):
    reference, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    model = BertForClassification(pretrained.config.replace(num_labels=5))
    ids, types, mask = inputs()
    fresh = model.init(jax.random.key(0), ids, types, mask)["params"]
    params = graft_params(fresh, {"bert": pretrained.params["bert"]})

    # The classifier head keeps its fresh values (and logical-axis boxes) ...
    assert params["classifier"] is fresh["classifier"]
    # ... and the encoder now gives Hugging Face's pooled output.
    _, pooled = BertModel(pretrained.config).apply(
        {"params": jax.tree_util.tree_map(np.asarray, params["bert"])}, ids, types, mask
    )
    with torch.no_grad():
        expected = reference.bert(**torch_inputs()).pooler_output
    assert_close(pooled, expected)


def test_graft_rejects_a_shape_mismatch(pretraining_checkpoint):
    _, directory = pretraining_checkpoint
    pretrained = from_huggingface(directory)
    model = BertModel(pretrained.config.replace(vocab_size=100))
    fresh = model.init(jax.random.key(0), np.ones((1, 4), np.int32))["params"]
    with pytest.raises(UserError, match="word_embeddings/embedding"):
        graft_params(fresh, pretrained.params["bert"])


def test_missing_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="config.json not found"):
        from_huggingface(tmp_path / "nowhere")


def test_missing_weights_are_a_user_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", **SMALL}))
    with pytest.raises(UserError, match="no model.safetensors or pytorch_model.bin"):
        from_huggingface(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "roberta"}, "only 'bert'"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"is_decoder": True}, "decoder"),
        ({"hidden_act": "silu"}, "hidden_act"),
    ],
)
def test_unsupported_architectures_are_user_errors(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", **SMALL, **change}))
    with pytest.raises(UserError, match=message):
        from_huggingface(tmp_path)
