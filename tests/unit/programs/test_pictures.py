"""The pictures draw what the library computes: python -m jaxtrans.plot positions|masks|
schedule|smoothing, and the attention of a translation model and of BERT."""

import functools
import os
import sys
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from tiny_configs import REPO, tiny_transformer_config

from jaxtrans.inference import plots
from jaxtrans.models import Transformer
from jaxtrans.models.bert.bert_model import BertConfig, BertModel
from jaxtrans.nn.attention import attention_weights
from jaxtrans.nn.masks import causal_mask, combine_masks, padding_mask
from jaxtrans.nn.positions import apply_rope, rope_angles, sinusoidal_embedding
from jaxtrans.programs import pictures
from jaxtrans.programs.plot import PICTURE_DPI, PICTURES, main
from jaxtrans.tasks.bert.bert_task import BertTask
from jaxtrans.training.loss import label_smoothed_cross_entropy, smoothed_target_distribution
from jaxtrans.training.optimizer import make_optimizer

# Small shapes, so that each picture is drawn in about a second.
SMALL_VALUES = {"model.d_model": 32, "model.num_heads": 2, "model.max_len": 24,
                "train.num_steps": 500, "optimizer.warmup_steps": 100}  # fmt: skip
SMALL = [f"--config.{key}={value}" for key, value in SMALL_VALUES.items()]
# Figure sizes in inches of each picture (jaxtrans/programs/pictures.py).
INCHES = {"positions": (12, 8), "masks": (12, 7.5), "schedule": (12, 4.5), "smoothing": (10, 4.5)}


def small_config(**overrides):
    """configs/base.py with SMALL_VALUES and ``overrides`` (flattened keys)."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import base

    config = base.get_config()
    config.update_from_flattened_dict({**SMALL_VALUES, **overrides})
    return config


def drawn_images(fig) -> list[np.ndarray]:
    return [np.asarray(image.get_array()) for ax in fig.axes for image in ax.images]


@pytest.mark.slow
@pytest.mark.parametrize("kind", PICTURES)
def test_each_picture_command_writes_a_png_of_its_size(kind, tmp_path, capsys):
    png = tmp_path / f"{kind}.png"
    main(["plot", kind, f"--output={png}", *SMALL])
    assert capsys.readouterr().out.strip() == f"wrote {png}"
    with Image.open(png) as image:
        assert image.format == "PNG"
        assert image.size == tuple(round(i * PICTURE_DPI) for i in INCHES[kind])
        assert np.asarray(image.convert("L")).std() > 0


def test_the_pictures_of_the_command_are_the_ones_drawn():
    assert PICTURES == pictures.KINDS


def test_a_config_file_and_an_unknown_field_are_read_as_train_py_reads_them(tmp_path, capsys):
    png = tmp_path / "lr.png"
    main(["plot", "schedule", "--config", os.path.join(REPO, "configs", "demo.py"),
          "--config.train.num_steps=50", f"--output={png}"])  # fmt: skip
    assert png.exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", "schedule", "--config.train.nope=1"])
    assert exit_info.value.code == 2
    assert "the config has no field train.nope" in capsys.readouterr().err


def test_a_run_directory_named_like_a_picture_is_given_as_dot_slash(tmp_path, monkeypatch):
    (tmp_path / "positions").mkdir()
    (tmp_path / "positions" / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    monkeypatch.chdir(tmp_path)
    main(["plot", "./positions"])
    assert (tmp_path / "positions" / "metrics.png").exists()


def test_the_positions_heatmap_is_the_sinusoidal_table_and_the_rope_angles():
    config = small_config()
    arrays = pictures.positions_arrays(config)
    positions = jnp.arange(24)[None]
    np.testing.assert_array_equal(arrays["table"], sinusoidal_embedding(positions, 32)[0])
    np.testing.assert_array_equal(arrays["rope"], rope_angles(positions, 16)[0])
    table, rope = drawn_images(pictures.draw_positions(arrays))[:2]
    np.testing.assert_array_equal(table, arrays["table"])
    np.testing.assert_allclose(np.exp(1j * rope), np.exp(1j * arrays["rope"]), atol=1e-5)


def test_rope_turns_each_pair_of_dimensions_by_its_drawn_angle():
    head_dim, pair, position = 8, 1, 5
    x = jnp.zeros((1, 1, 1, head_dim)).at[..., pair].set(1.0)
    turned = apply_rope(x, jnp.asarray([[position]]))[0, 0, 0]
    angle = rope_angles(jnp.asarray([[position]]), head_dim)[0, 0, pair]
    np.testing.assert_allclose(turned[pair], jnp.cos(angle), atol=1e-6)
    np.testing.assert_allclose(turned[pair + head_dim // 2], jnp.sin(angle), atol=1e-6)


@pytest.mark.slow
def test_the_mask_panels_are_the_mask_functions_and_the_attention_weights():
    arrays = plots.batch_masks(lengths=(5, 3), length=6, head_dim=4)
    ids = jnp.asarray(arrays["ids"])
    np.testing.assert_array_equal(arrays["padding"], padding_mask(ids)[:, 0, 0])
    np.testing.assert_array_equal(arrays["causal"], causal_mask(6)[0, 0])
    expected = combine_masks(causal_mask(6), padding_mask(ids))[:, 0]
    np.testing.assert_array_equal(arrays["combined"], expected)
    assert arrays["padding"].sum(axis=1).tolist() == [5, 3]
    weights = arrays["weights"]
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-6)
    assert np.all(weights[~arrays["combined"][0]] == 0)
    np.testing.assert_allclose(jax.nn.softmax(arrays["masked_scores"], axis=-1), weights, atol=1e-6)
    drawn = drawn_images(plots.draw_batch_masks(arrays))
    for image, key in zip(drawn, ["padding", "causal", "combined", "scores", "masked_scores",
                                  "weights"], strict=True):  # fmt: skip
        expected = arrays[key][0] if key == "combined" else arrays[key]
        np.testing.assert_array_equal(np.ma.filled(image, -np.inf), expected)


def test_the_mask_weights_are_what_the_library_attention_gives():
    arrays = plots.batch_masks(head_dim=8, seed=3)
    q_key, k_key = jax.random.split(jax.random.key(3))
    q = jax.random.normal(q_key, (1, 8, 1, 8))
    k = jax.random.normal(k_key, (1, 1, 8, 8))
    mask = jnp.asarray(arrays["combined"][:1, None])
    np.testing.assert_array_equal(arrays["weights"], attention_weights(q, k, mask)[0, 0])


@pytest.mark.parametrize("schedule", ["noam", "linear"])
def test_the_schedule_is_the_one_the_optimizer_is_built_with(schedule):
    config = small_config(**{"optimizer.schedule": schedule})
    arrays = pictures.schedule_arrays(config)
    _, built = make_optimizer(config.optimizer, 32, 500)
    np.testing.assert_allclose(arrays["lr"], [built(s) for s in arrays["steps"]], rtol=1e-5)
    assert arrays["steps"][0] == 0 and arrays["steps"][-1] == 499 and 99 in arrays["steps"]
    line = pictures.draw_schedule(arrays).axes[0].lines[0]
    np.testing.assert_array_equal(line.get_ydata(), arrays["lr"])


@pytest.mark.slow
def test_the_smoothed_target_is_the_distribution_the_loss_compares_with():
    logits = jax.random.normal(jax.random.key(0), (2, 3, 12))
    targets = jnp.asarray([[5, 1, 0], [11, 2, 3]])
    weights = jnp.asarray([[1, 1, 0], [1, 1, 1]])
    for smoothing in (0.0, 0.1, 0.2):
        q = smoothed_target_distribution(targets, 12, smoothing)
        cross_entropy = -(q * jax.nn.log_softmax(logits)).sum(-1)
        loss = label_smoothed_cross_entropy(logits, targets, weights, smoothing)["loss"]
        np.testing.assert_allclose(loss, (cross_entropy * weights).sum(), rtol=1e-5)


def test_the_smoothing_bars_are_the_smoothed_targets():
    config = small_config(**{"train.label_smoothing": 0.3})
    arrays = pictures.smoothing_arrays(config)
    assert arrays["smoothing"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    np.testing.assert_allclose(arrays["distributions"].sum(axis=1), 1.0, rtol=1e-6)
    ax = pictures.draw_smoothing(arrays).axes[0]
    heights = np.asarray([bar.get_height() for bar in ax.patches]).reshape(3, 12)
    np.testing.assert_array_equal(heights, arrays["distributions"])
    for s, q in zip(arrays["smoothing"], arrays["distributions"], strict=True):
        expected = smoothed_target_distribution(jnp.asarray(pictures.SMOOTHING_TARGET), 12, s)
        np.testing.assert_array_equal(q, expected)


CONFIG = tiny_transformer_config(position="sinusoidal")


@functools.cache
def transformer_params():
    source = jnp.ones((1, 4), jnp.int32)
    return nn.unbox(jax.jit(Transformer(CONFIG).init)(jax.random.key(3), source, source))["params"]


@pytest.mark.slow
def test_translation_attention_is_what_the_model_sows_and_is_drawn_as_is():
    source, target_in = [5, 6, 7, 8, 1], [2, 9, 10]
    weights = plots.translation_attention(CONFIG, transformer_params(), source, target_in)
    apply = jax.jit(functools.partial(Transformer(CONFIG).apply, mutable=["intermediates"]))
    _, state = apply({"params": transformer_params()}, jnp.asarray([source]),
                     jnp.asarray([target_in]))  # fmt: skip
    sown = state["intermediates"]
    cross = sown["decoder"]["layer_1"]["cross_attention"]["attention_weights"][0][0]
    np.testing.assert_allclose(weights["cross"][1], cross, atol=1e-6)
    assert weights["encoder"].shape == (1, 2, 5, 5)
    assert weights["decoder"].shape == (2, 2, 3, 3)
    assert weights["cross"].shape == (2, 2, 3, 5)
    for kind in ("encoder", "decoder", "cross"):
        np.testing.assert_allclose(weights[kind].sum(axis=-1), 1.0, atol=1e-5)
    future = ~np.tril(np.ones((3, 3), bool))
    assert np.all(weights["decoder"][:, :, future] == 0)
    fig = plots.draw_attention(weights["decoder"], ["a", "b", "c"], ["b", "c", "d"], "t")
    drawn = np.stack(drawn_images(fig)).reshape(weights["decoder"].shape)
    np.testing.assert_array_equal(drawn, weights["decoder"])


BERT = BertConfig(vocab_size=20, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=16,
                  dropout_rate=0.0, attention_dropout_rate=0.0)  # fmt: skip


@pytest.mark.slow
def test_the_bert_task_draws_the_self_attention_the_encoder_sows(tmp_path, capsys, monkeypatch):
    model = BertModel(BERT)
    ids = [4, 9, 10, 11, 5]
    params = nn.unbox(jax.jit(model.init)(jax.random.key(0), jnp.asarray([ids])))["params"]
    drawn = []
    real = plots.bert_attention
    monkeypatch.setattr(
        plots, "bert_attention", lambda *args: drawn.append(real(*args)) or drawn[-1]
    )
    pieces = {4: "[CLS]", 5: "[SEP]", 9: "▁the", 10: "▁cat", 11: "s"}
    tokenizer = types.SimpleNamespace(
        cls_id=4, sep_id=5, mask_id=6, id_to_piece=pieces.get,
        encode=lambda text: [9, 10, 11] if text == "the cats" else [],
    )  # fmt: skip
    task = types.SimpleNamespace(
        tokenizer=tokenizer, model_config=BERT,
        restore_params=lambda checkpoint: types.SimpleNamespace(params={"bert": params}),
    )  # fmt: skip
    png = tmp_path / "bert.png"
    assert BertTask.plot_attention(task, "the cats", str(png)) == "[CLS] ▁the ▁cat s [SEP]"
    assert f"wrote {png}" in capsys.readouterr().out
    with Image.open(png) as image:
        assert image.format == "PNG"
    assert BertTask.plots_attention
    (weights,) = drawn
    apply = jax.jit(functools.partial(model.apply, mutable=["intermediates"]))
    _, state = apply({"params": params}, jnp.asarray([ids]))
    sown = state["intermediates"]["encoder"]["layer_1"]["self_attention"]["attention_weights"]
    assert weights.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(weights[1], sown[0][0], atol=1e-6)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
