"""Pictures of attention: cross-attention heatmaps per layer and head, and the masks.

Figures are drawn on matplotlib's Agg canvas without pyplot, so no display is needed.
"""

import functools
import warnings
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure

from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.nn import causal_mask, combine_masks, padding_mask
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

# Fonts tried after the default one, so that Chinese pieces get glyphs where installed.
_CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "WenQuanYi Zen Hei", "SimHei", "PingFang SC")
_SPECIAL = {PAD_ID: "<pad>", EOS_ID: "</s>", BOS_ID: "<s>"}


def _font_family() -> list[str]:
    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *(f for f in _CJK_FONTS if f in installed)]


def _labels(ids: Sequence[int], decode) -> list[str]:
    return [_SPECIAL.get(i) or decode([i]) or str(i) for i in ids]


def cross_attention_weights(
    config: TransformerConfig, params, source_ids: Sequence[int], target_in: Sequence[int]
) -> np.ndarray:
    """Teacher-forced cross-attention weights -> [layers, heads, tgt_len, src_len].

    Row t is what the decoder reads of the source when predicting target token t + 1.
    """
    # Only the XLA kernel exposes its weights; the parameters are the same.
    config = config.replace(attention_impl="xla", remat=False, decode=False)
    apply = jax.jit(functools.partial(Transformer(config).apply, mutable=["intermediates"]))
    _, state = apply(
        {"params": nn.unbox(params)},
        jnp.asarray([source_ids], jnp.int32),
        jnp.asarray([target_in], jnp.int32),
    )
    decoder = state["intermediates"]["decoder"]
    return np.stack(
        [
            np.asarray(decoder[f"layer_{i}"]["cross_attention"]["attention_weights"][0][0])
            for i in range(config.num_decoder_layers)
        ]
    )


def _heatmap(ax, values: np.ndarray, title: str, xlabels=None, ylabels=None) -> None:
    ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=8)
    if xlabels:
        ax.set_xticks(range(len(xlabels)), xlabels, fontsize=6, rotation=90)
    if ylabels:
        ax.set_yticks(range(len(ylabels)), ylabels, fontsize=6)


def plot_cross_attention(
    weights: np.ndarray, source_labels: list[str], target_labels: list[str], output_png: str
) -> None:
    """weights [layers, heads, tgt_len, src_len] -> one heatmap per layer (row) and head."""
    layers, heads, tgt_len, src_len = weights.shape
    size = (max(2.0, 0.25 * src_len + 1) * heads, max(2.0, 0.25 * tgt_len + 1) * layers)
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            _heatmap(
                axes[layer, head],
                weights[layer, head],
                f"layer {layer} head {head}",
                source_labels,
                target_labels,
            )
    fig.suptitle("cross-attention (rows: target, columns: source)", fontsize=9)
    _save(fig, output_png)


def plot_masks(
    source_ids: Sequence[int],
    target_in: Sequence[int],
    output_png: str,
    *,
    length_multiple: int = 8,
    pad_id: int = PAD_ID,
) -> None:
    """The masks of one pair padded as in a batch (to a multiple of length_multiple).

    Panels: encoder self-attention (source padding), the causal mask, decoder
    self-attention (causal AND target padding), cross-attention (source padding);
    each [queries, keys].
    """

    def padded(ids):
        length = -(-max(len(ids), 1) // length_multiple) * length_multiple
        return jnp.asarray([[*ids, *[pad_id] * (length - len(ids))]], jnp.int32)

    source, target = padded(source_ids), padded(target_in)
    src_len, tgt_len = source.shape[1], target.shape[1]
    source_padding = padding_mask(source, pad_id)
    causal = causal_mask(tgt_len)
    panels = [
        ("encoder self-attention: source padding", source_padding, (src_len, src_len)),
        ("causal", causal, (tgt_len, tgt_len)),
        (
            "decoder self-attention: causal AND target padding",
            combine_masks(causal, padding_mask(target, pad_id)),
            (tgt_len, tgt_len),
        ),
        ("cross-attention: source padding", source_padding, (tgt_len, src_len)),
    ]
    fig = Figure(figsize=(16, 4.5), layout="constrained")
    for ax, (title, mask, shape) in zip(fig.subplots(1, len(panels)), panels, strict=True):
        _heatmap(ax, np.broadcast_to(np.asarray(mask[0, 0], np.float32), shape), title)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
    fig.suptitle("attention masks (bright = may attend)")
    _save(fig, output_png)


def _save(fig: Figure, output_png: str) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(output_png, format="png", dpi=100)


def plot_attention(
    config: TransformerConfig,
    params,
    tokenizer,
    sentence: str,
    output_png: str,
    *,
    masks_png: str | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
) -> str:
    """Translate one sentence and draw its cross-attention per layer and head as a PNG.

    tokenizer needs encode_source, decode_source and decode_target. masks_png, if
    given, receives the padding and causal masks of the pair. Returns the translation.
    """
    source_ids = [*tokenizer.encode_source(sentence), EOS_ID]
    (hypothesis,) = translate_ids(
        config,
        params,
        [source_ids],
        batch_size=1,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
    )
    target_in = [BOS_ID, *hypothesis]
    weights = cross_attention_weights(config, params, source_ids, target_in)
    with matplotlib.rc_context({"font.family": _font_family()}):
        plot_cross_attention(
            weights,
            _labels(source_ids, tokenizer.decode_source),
            _labels([*hypothesis, EOS_ID], tokenizer.decode_target),
            output_png,
        )
        if masks_png is not None:
            plot_masks(source_ids, target_in, masks_png)
    return tokenizer.decode_target(hypothesis)
