"""Scanned layer stacks (config.scan_layers): one nn.scan over stacked parameters computes
what the per-layer loop computes, in training, attention plots and Hugging Face
conversion (cached decoding: test_scan_layers_decoding.py).

Every comparison gives the scanned model the loop model's parameters, stacked by
jaxtrans.models.layer_stacks, so any difference is the scan's.
"""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from paths import HELPERS, xla_flags

from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.bert.bert_model import BertConfig, BertForPretraining
from jaxtrans.models.layer_stacks import (
    arrange_layers,
    layout_like,
    stack_layers,
    unstack_layers,
)
from jaxtrans.nn.dropout import Dropout
from jaxtrans.vocab import PAD_ID

NO_DROPOUT = dict(dropout_rate=0.0, attention_dropout_rate=0.0, activation_dropout_rate=0.0)
VOCAB = 29


def transformer_config(**changes) -> TransformerConfig:
    base = dict(
        vocab_size=VOCAB,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=3,
        num_decoder_layers=2,
        max_len=32,
        **NO_DROPOUT,
    )
    return TransformerConfig(**{**base, **changes})


def packed_batch() -> dict[str, np.ndarray]:
    """Two rows: two packed pairs then padding, and one padded pair (segment 0 = padding)."""
    source_segments = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 0, 0, 0]], np.int32)
    target_segments = np.array([[1, 1, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    rng = np.random.default_rng(0)

    def ids(segments):
        return np.where(segments > 0, rng.integers(4, VOCAB, segments.shape), PAD_ID)

    def positions(segments):
        starts = np.maximum.accumulate(
            np.where(np.diff(segments, prepend=-1, axis=1) != 0, np.arange(segments.shape[1]), 0),
            axis=1,
        )
        return np.where(segments > 0, np.arange(segments.shape[1]) - starts, 0).astype(np.int32)

    return {
        "source": ids(source_segments).astype(np.int32),
        "target_in": ids(target_segments).astype(np.int32),
        "target_out": ids(target_segments).astype(np.int32),
        "source_segments": source_segments,
        "target_segments": target_segments,
        "source_positions": positions(source_segments),
        "target_positions": positions(target_segments),
    }


def transformer_params(config: TransformerConfig) -> dict:
    """Per-layer parameters of the loop model."""
    ids = jnp.ones((1, 4), jnp.int32)
    return nn.unbox(Transformer(config).init(jax.random.key(0), ids, ids))["params"]


def transformer_inputs(batch, packed: bool):
    inputs = [batch["source"], batch["target_in"]]
    if packed:
        inputs += [batch[k] for k in ("source_segments", "target_segments")]
        inputs += [batch[k] for k in ("source_positions", "target_positions")]
    return inputs


def loss_fn(config: TransformerConfig, deterministic: bool = True):
    """(params, batch, rng) -> mean cross entropy over the real target tokens."""
    model = Transformer(config)

    def loss(params, batch, rng):
        logits = model.apply(
            {"params": params},
            *transformer_inputs(batch, packed=True),
            deterministic=deterministic,
            rngs={"dropout": rng},
        )
        weights = batch["target_out"] != PAD_ID
        xent = optax.softmax_cross_entropy_with_integer_labels(logits, batch["target_out"])
        return jnp.sum(xent * weights) / jnp.sum(weights)

    return loss


# The conversion.


def test_stacking_gives_a_leading_layer_axis_and_unstacking_restores_every_layer():
    params = transformer_params(transformer_config(norm="pre"))
    stacked = stack_layers(params)
    assert set(stacked["encoder"]) == {"layers", "final_norm"}
    kernel = stacked["encoder"]["layers"]["feed_forward"]["wi"]["kernel"]
    assert kernel.shape == (3, 16, 32)
    np.testing.assert_array_equal(
        kernel[2], params["encoder"]["layer_2"]["feed_forward"]["wi"]["kernel"]
    )
    assert stack_layers(stacked) == stacked  # idempotent
    restored = unstack_layers(stacked)
    assert jax.tree.structure(restored) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_stacking_keeps_numpy_and_logical_axis_boxes():
    layer = {"kernel": nn.Partitioned(np.ones((2, 3), np.float32), ("embed", "mlp"))}
    stacked = stack_layers({"layer_0": layer, "layer_1": layer})["layers"]["kernel"]
    assert stacked.names == ("layers", "embed", "mlp") and isinstance(stacked.value, np.ndarray)
    assert unstack_layers({"layers": {"kernel": stacked}})["layer_1"]["kernel"].names == (
        "embed",
        "mlp",
    )


def test_layer_numbers_with_a_gap_are_refused():
    with pytest.raises(ValueError, match="not numbered"):
        stack_layers({"layer_0": {"w": np.ones(2)}, "layer_2": {"w": np.ones(2)}})


def test_layout_like_and_arrange_follow_the_target_layout():
    params = transformer_params(transformer_config())
    stacked = stack_layers(params)
    assert "layers" in layout_like(params, stacked)["decoder"]
    assert "layer_1" in layout_like(stacked, params)["decoder"]
    assert "layers" in arrange_layers(params, scan_layers=True)["encoder"]
    assert "layer_0" in arrange_layers(stacked, scan_layers=False)["encoder"]


# The Transformer.


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_scanned_transformer_logits_equal_the_loop(norm, packed):
    config = transformer_config(norm=norm)
    params = transformer_params(config)
    inputs = transformer_inputs(packed_batch(), packed)
    expected = Transformer(config).apply({"params": params}, *inputs)
    scanned = Transformer(config.replace(scan_layers=True))
    logits = scanned.apply({"params": stack_layers(params)}, *inputs)
    np.testing.assert_allclose(logits, expected, atol=1e-6, rtol=0)


def test_scanned_parameters_carry_the_layers_logical_axis():
    config = transformer_config(scan_layers=True)
    ids = jnp.ones((1, 4), jnp.int32)
    boxed = Transformer(config).init(jax.random.key(0), ids, ids)["params"]
    for stack in ("encoder", "decoder"):
        leaves = jax.tree.leaves(
            boxed[stack]["layers"], is_leaf=lambda x: isinstance(x, nn.Partitioned)
        )
        assert leaves and all(leaf.names[0] == "layers" for leaf in leaves)
        assert all(
            leaf.value.shape[0] == config.num_encoder_layers
            if stack == "encoder"
            else config.num_decoder_layers
            for leaf in leaves
        )


def train_step(config: TransformerConfig, deterministic: bool = True):
    """One SGD step (learning rate 1): returns (loss, new params - old params = -grads)."""
    loss = loss_fn(config, deterministic)

    @jax.jit
    def step(params, batch, rng):
        value, grads = jax.value_and_grad(loss)(params, batch, rng)
        updates, _ = optax.sgd(1.0).update(grads, optax.sgd(1.0).init(params))
        new = optax.apply_updates(params, updates)
        return value, jax.tree.map(jnp.subtract, new, params)

    return step


def test_scanned_train_step_has_the_loops_loss_and_gradients():
    config = transformer_config()
    params = transformer_params(config)
    batch, rng = packed_batch(), jax.random.key(3)
    loss, delta = train_step(config)(params, batch, rng)
    scanned_loss, scanned_delta = train_step(config.replace(scan_layers=True))(
        stack_layers(params), batch, rng
    )
    np.testing.assert_allclose(scanned_loss, loss, atol=1e-6, rtol=0)
    scanned_delta = unstack_layers(scanned_delta)
    assert jax.tree.structure(scanned_delta) == jax.tree.structure(delta)
    for a, b in zip(jax.tree.leaves(scanned_delta), jax.tree.leaves(delta), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_remat_inside_the_scan_gives_the_same_loss_and_gradients_with_dropout():
    config = transformer_config(scan_layers=True, dropout_rate=0.3, activation_dropout_rate=0.2)
    params = stack_layers(transformer_params(config.replace(scan_layers=False)))
    batch, rng = packed_batch(), jax.random.key(5)
    loss, delta = train_step(config, deterministic=False)(params, batch, rng)
    remat_loss, remat_delta = train_step(config.replace(remat=True), deterministic=False)(
        params, batch, rng
    )
    np.testing.assert_allclose(remat_loss, loss, atol=1e-6, rtol=0)
    for a, b in zip(jax.tree.leaves(remat_delta), jax.tree.leaves(delta), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def keep_masks_per_layer(config: TransformerConfig, params, batch) -> np.ndarray:
    """The first residual dropout's keep mask of every encoder layer, [layers, batch, len, d].

    Dropout(x) = x * Dropout(ones), so intercepting it this way leaves the model as it is
    and exposes the mask it drew.
    """

    def record(next_fun, args, kwargs, context):
        if not isinstance(context.module, Dropout) or context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        x, rest = args[0], args[1:]
        scaled_mask = next_fun(jnp.ones_like(x), *rest, **kwargs)
        context.module.sow("intermediates", "kept", scaled_mask != 0)
        return x * scaled_mask

    with nn.intercept_methods(record):
        _, state = Transformer(config).apply(
            {"params": params},
            *transformer_inputs(batch, packed=True),
            deterministic=False,
            rngs={"dropout": jax.random.key(7)},
            mutable=["intermediates"],
        )
    sown = unstack_layers(state["intermediates"]["encoder"])
    return np.stack(
        [sown[f"layer_{i}"]["Dropout_0"]["kept"][0] for i in range(config.num_encoder_layers)]
    )


def test_every_scanned_layer_draws_its_own_dropout_mask():
    config = transformer_config(scan_layers=True, dropout_rate=0.5)
    params = stack_layers(transformer_params(config.replace(scan_layers=False)))
    masks = keep_masks_per_layer(config, params, packed_batch())
    assert masks.shape[0] == 3 and 0.3 < masks.mean() < 0.7  # real masks, rate 0.5
    for i in range(1, 3):
        assert not np.array_equal(masks[0], masks[i]), f"layers 0 and {i} share a mask"


def test_attention_plots_read_a_scanned_model_layer_by_layer():
    from jaxtrans.inference.plots import translation_attention

    config = transformer_config()
    params = transformer_params(config)
    source, target = [5, 6, 7, 1], [2, 8, 9]
    expected = translation_attention(config, params, source, target)
    scanned = translation_attention(
        config.replace(scan_layers=True), stack_layers(params), source, target
    )
    for name, weights in expected.items():
        assert scanned[name].shape == weights.shape
        np.testing.assert_allclose(scanned[name], weights, atol=1e-6, rtol=0)


# BERT.


def bert_inputs():
    ids = np.array(
        [[4, 9, 10, 11, 5, 12, 13, 5, 0, 0], [4, 20, 21, 5, 22, 5, 0, 0, 0, 0]], np.int32
    )
    types = np.array([[0, 0, 0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 0, 0, 0, 0]], np.int32)
    return ids, types, (ids != 0).astype(np.int32)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_scanned_bert_equals_the_loop(norm):
    config = BertConfig(
        vocab_size=40, d_model=16, num_heads=2, d_ff=32, num_layers=3, max_len=12, norm=norm
    )
    inputs = bert_inputs()
    params = BertForPretraining(config).init(jax.random.key(0), *inputs)["params"]
    params = nn.unbox(params)
    expected = BertForPretraining(config).apply({"params": params}, *inputs)
    scanned = BertForPretraining(config.replace(scan_layers=True))
    outputs = scanned.apply({"params": stack_layers(params)}, *inputs)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_huggingface_bert_loads_into_a_scanned_model_and_exports_back(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
    from jaxtrans.models.bert.bert_to_huggingface import to_state_dict
    from jaxtrans.models.layer_stacks import graft_params

    hf_config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=24, max_position_embeddings=12, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    reference = transformers.BertForPreTraining(hf_config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    reference.save_pretrained(tmp_path)
    pretrained = from_huggingface(tmp_path)
    config = pretrained.config.replace(scan_layers=True)
    inputs = bert_inputs()
    model = BertForPretraining(config)
    fresh = model.init(jax.random.key(0), *inputs)["params"]
    params = nn.unbox(graft_params(fresh, pretrained.params))
    assert params["bert"]["encoder"]["layers"]["feed_forward"]["wi"]["kernel"].shape == (3, 16, 24)
    mlm, nsp = model.apply({"params": params}, *inputs)
    with torch.no_grad():
        ids, types, mask = (torch.tensor(x, dtype=torch.long) for x in inputs)
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask)
    np.testing.assert_allclose(mlm, expected.prediction_logits.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(nsp, expected.seq_relationship_logits.numpy(), atol=1e-5, rtol=0)
    exported = to_state_dict(params, config)
    per_layer = to_state_dict(pretrained.params, pretrained.config)
    assert exported.keys() == per_layer.keys()
    for name, tensor in per_layer.items():
        np.testing.assert_array_equal(exported[name], tensor, err_msg=name)


# Sharding, on 8 forced CPU devices in a subprocess.

SHARDING_SCRIPT = os.path.join(HELPERS, "scan_layers_sharding.py")


@pytest.fixture(scope="module")
def eight_device_run():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags(8)
    result = subprocess.run(
        [sys.executable, SHARDING_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_a_rule_change_changes_the_compiled_sharding_of_the_residual_stream(eight_device_run):
    # batch -> (data, fsdp); embed's fsdp is taken by batch, so the stream is split by rows.
    assert eight_device_run["default"][0] == ["data", "fsdp"]
    assert eight_device_run["default"][1:] in ([], [None], [None, None])
    assert eight_device_run["length_on_tensor"][:2] == [["data", "fsdp"], "tensor"]


def test_a_scanned_train_step_on_a_data_fsdp_tensor_mesh_equals_the_per_layer_step(
    eight_device_run,
):
    # The layers axis stays whole; the kernel's embed and mlp axes split as per layer.
    assert eight_device_run["kernel_spec"] == [None, "fsdp", "tensor"]
    # On a padded batch of varied tokens: the loss, the gradient norm and every updated
    # parameter as one device computes them per layer.
    scanned_loss, loss = eight_device_run["loss"]
    assert scanned_loss == pytest.approx(loss, rel=1e-5, abs=0)
    scanned_norm, norm = eight_device_run["grad_norm"]
    assert scanned_norm == pytest.approx(norm, rel=1e-5, abs=0) and norm > 0.1
    assert eight_device_run["same_structure"]
    # Adam's first step is about the learning rate (1e-3) on every parameter, and a
    # gradient that is rounding noise (see parallel_step.py) can move a parameter by about
    # 1% of that; any real difference moves many by the whole step.
    update = eight_device_run["update"]
    assert update > 5e-4 and eight_device_run["param_difference"] < 0.05 * update
