"""Pictures of attention: the weights a trained model gives one sentence (encoder
self-attention, decoder self-attention and cross-attention of a translation model, the
self-attention of BERT), per layer and head, and the masks with what they do to scores.

The weights drawn are the ones the model records with ``sow`` (nn/attention.py), and
the masks and softmax are the library's own; every figure is drawn from arrays that a
function here returns first, so tests can compare what is drawn with what the model does.
Figures are drawn on matplotlib's Agg canvas without pyplot, so no display is needed.
"""

import functools
import os
import warnings
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure

from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.bert.bert_model import BertConfig, BertModel
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.nn import causal_mask, combine_masks, padding_mask
from jaxtrans.nn.attention import attention_weights
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

# Fonts tried after the default one, so that Chinese pieces get glyphs where installed.
_CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "WenQuanYi Zen Hei", "SimHei", "PingFang SC")
_SPECIAL = {PAD_ID: "<pad>", EOS_ID: "</s>", BOS_ID: "<s>"}


def _font_family() -> list[str]:
    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *(f for f in _CJK_FONTS if f in installed)]


def _labels(ids: Sequence[int], decode) -> list[str]:
    """Axis labels: each id's text; a piece that is only a word boundary shows as ▁."""
    return [_SPECIAL.get(i) or (decode([i]).strip() or "▁") for i in ids]


def sown_attention(intermediates, num_layers: int, name: str) -> np.ndarray:
    """The weights sown by ``layer_{i}/{name}`` of one stack, for the first sentence of
    the batch -> [layers, heads, q_len, kv_len]. A scanned stack's weights are split
    into its layers first."""
    intermediates = unstack_layers(intermediates)
    return np.stack(
        [
            np.asarray(intermediates[f"layer_{i}"][name]["attention_weights"][0][0])
            for i in range(num_layers)
        ]
    )


def translation_attention(
    config: TransformerConfig, params, source_ids: Sequence[int], target_in: Sequence[int]
) -> dict[str, np.ndarray]:
    """Teacher-forced attention weights of one pair, as the model sows them:
    ``encoder`` [layers, heads, src_len, src_len], ``decoder`` [layers, heads, tgt_len,
    tgt_len] and ``cross`` [layers, heads, tgt_len, src_len].

    Row t of decoder and cross is what the decoder reads when predicting target token t + 1.
    """
    # Only the XLA kernel exposes its weights; the parameters are the same.
    config = config.replace(attention_impl="xla", remat=False, decode=False)
    apply = jax.jit(functools.partial(Transformer(config).apply, mutable=["intermediates"]))
    _, state = apply(
        {"params": nn.unbox(params)},
        jnp.asarray([source_ids], jnp.int32),
        jnp.asarray([target_in], jnp.int32),
    )
    encoder, decoder = state["intermediates"]["encoder"], state["intermediates"]["decoder"]
    return {
        "encoder": sown_attention(encoder, config.num_encoder_layers, "self_attention"),
        "decoder": sown_attention(decoder, config.num_decoder_layers, "self_attention"),
        "cross": sown_attention(decoder, config.num_decoder_layers, "cross_attention"),
    }


def cross_attention_weights(
    config: TransformerConfig, params, source_ids: Sequence[int], target_in: Sequence[int]
) -> np.ndarray:
    """Teacher-forced cross-attention weights -> [layers, heads, tgt_len, src_len]."""
    return translation_attention(config, params, source_ids, target_in)["cross"]


def bert_attention(
    config: BertConfig, bert_params, input_ids: Sequence[int], token_type_ids: Sequence[int]
) -> np.ndarray:
    """Self-attention weights of one unpadded BERT input, as the encoder sows them ->
    [layers, heads, length, length]. ``bert_params``: the ``bert`` part of a task's params."""
    config = config.replace(attention_impl="xla", remat=False)
    model = BertModel(config, pooling=False)  # a pooler's parameters are simply not read
    params = {k: v for k, v in nn.unbox(bert_params).items() if k != "pooler"}
    apply = jax.jit(functools.partial(model.apply, mutable=["intermediates"]))
    _, state = apply(
        {"params": params},
        jnp.asarray([input_ids], jnp.int32),
        jnp.asarray([token_type_ids], jnp.int32),
    )
    encoder = state["intermediates"]["encoder"]
    return sown_attention(encoder, config.num_layers, "self_attention")


def _heatmap(ax, values: np.ndarray, title: str, xlabels=None, ylabels=None, **style) -> None:
    style = {"cmap": "viridis", "vmin": 0.0, "vmax": 1.0, **style}
    ax.imshow(values, aspect="auto", interpolation="nearest", **style)
    ax.set_title(title, fontsize=8)
    if xlabels:
        ax.set_xticks(range(len(xlabels)), xlabels, fontsize=6, rotation=90)
    if ylabels:
        ax.set_yticks(range(len(ylabels)), ylabels, fontsize=6)


def draw_attention(
    weights: np.ndarray, key_labels: list[str], query_labels: list[str], title: str
) -> Figure:
    """weights [layers, heads, q_len, kv_len] -> one heatmap per layer (row) and head,
    queries down, keys across."""
    layers, heads, q_len, kv_len = weights.shape
    size = (max(2.0, 0.25 * kv_len + 1) * heads, max(2.0, 0.25 * q_len + 1) * layers)
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            _heatmap(
                axes[layer, head],
                weights[layer, head],
                f"layer {layer} head {head}",
                key_labels,
                query_labels,
            )
    fig.suptitle(title, fontsize=9)
    return fig


def plot_cross_attention(
    weights: np.ndarray, source_labels: list[str], target_labels: list[str], output_png: str
) -> None:
    """weights [layers, heads, tgt_len, src_len] -> one heatmap per layer (row) and head."""
    title = "cross-attention (rows: target, columns: source)"
    _save(draw_attention(weights, source_labels, target_labels, title), output_png)


def padded_row(ids: Sequence[int], length_multiple: int, pad_id: int = PAD_ID) -> jnp.ndarray:
    """[1, length]: ids padded as in a batch, to a multiple of length_multiple."""
    length = -(-max(len(ids), 1) // length_multiple) * length_multiple
    return jnp.asarray([[*ids, *[pad_id] * (length - len(ids))]], jnp.int32)


def pair_masks(
    source_ids: Sequence[int],
    target_in: Sequence[int],
    *,
    length_multiple: int = 8,
    pad_id: int = PAD_ID,
) -> list[tuple[str, np.ndarray]]:
    """(title, [queries, keys] float mask) of one padded pair, as the model builds them:
    encoder self-attention (source padding), causal, decoder self-attention (causal AND
    target padding), cross-attention (source padding)."""
    source = padded_row(source_ids, length_multiple, pad_id)
    target = padded_row(target_in, length_multiple, pad_id)
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
    return [
        (title, np.broadcast_to(np.asarray(mask[0, 0], np.float32), shape).copy())
        for title, mask, shape in panels
    ]


def plot_masks(
    source_ids: Sequence[int],
    target_in: Sequence[int],
    output_png: str,
    *,
    length_multiple: int = 8,
    pad_id: int = PAD_ID,
) -> None:
    """The masks of ``pair_masks`` side by side, each [queries, keys]."""
    panels = pair_masks(source_ids, target_in, length_multiple=length_multiple, pad_id=pad_id)
    fig = Figure(figsize=(16, 4.5), layout="constrained")
    for ax, (title, mask) in zip(fig.subplots(1, len(panels)), panels, strict=True):
        _heatmap(ax, mask, title)
        ax.set_xlabel("key", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
    fig.suptitle("attention masks (bright = may attend)")
    _save(fig, output_png)


def batch_masks(
    lengths: Sequence[int] = (6, 4, 8), length: int = 8, head_dim: int = 16, seed: int = 0
) -> dict[str, np.ndarray]:
    """The masks of a padded decoder batch and what they do to one sentence's scores.

    ``ids`` [batch, length] (pad id after each sentence's tokens), ``padding`` [batch,
    length] (padding_mask: keys that are not padding), ``causal`` [length, length],
    ``combined`` [batch, length, length] (combine_masks of the two), and for the first
    sentence with random queries/keys [length, head_dim]: ``scores`` q k^T / sqrt(d_k),
    ``masked_scores`` (masked keys -inf: the attention code uses float32's lowest number,
    whose softmax weight is exactly 0) and ``weights``, nn.attention_weights(q, k, mask).
    """
    ids = np.full((len(lengths), length), PAD_ID, np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = np.arange(n) + 7  # any ids that are not padding
    padding = padding_mask(jnp.asarray(ids))  # [b, 1, 1, l]
    causal = causal_mask(length)  # [1, 1, l, l]
    combined = combine_masks(causal, padding)  # [b, 1, l, l]
    q_key, k_key = jax.random.split(jax.random.key(seed))
    q = jax.random.normal(q_key, (1, length, 1, head_dim), jnp.float32)
    k = jax.random.normal(k_key, (1, 1, length, head_dim), jnp.float32)
    mask = combined[:1]
    scores = np.asarray(jnp.einsum("bqnh,bnkh->bnqk", q, k)[0, 0]) / np.sqrt(head_dim)
    return {
        "ids": ids,
        "padding": np.asarray(padding[:, 0, 0, :]),
        "causal": np.asarray(causal[0, 0]),
        "combined": np.asarray(combined[:, 0]),
        "scores": scores,
        "masked_scores": np.where(np.asarray(mask[0, 0]), scores, -np.inf),
        "weights": np.asarray(attention_weights(q, k, mask)[0, 0]),
    }


def draw_batch_masks(arrays: dict[str, np.ndarray]) -> Figure:
    """Row 1: padding mask of the batch, causal mask, their AND for sentence 0; row 2:
    sentence 0's scores, masked scores and softmax weights."""
    length = arrays["causal"].shape[0]
    real = int(arrays["padding"][0].sum())
    fig = Figure(figsize=(12, 7.5), layout="constrained")
    axes = fig.subplots(2, 3)
    _heatmap(
        axes[0, 0], arrays["padding"], "padding mask [batch, keys]", ylabels=None, cmap="Greens"
    )
    axes[0, 0].set_ylabel("sentence")
    axes[0, 0].set_yticks(range(arrays["padding"].shape[0]))
    _heatmap(axes[0, 1], arrays["causal"], "causal mask [queries, keys]", cmap="Greens")
    _heatmap(
        axes[0, 2], arrays["combined"][0], f"causal AND padding (sentence 0, {real} tokens)",
        cmap="Greens",
    )  # fmt: skip
    span = float(np.abs(arrays["scores"]).max())
    _heatmap(axes[1, 0], arrays["scores"], "scores q k^T / sqrt(d_k)", cmap="RdBu_r",
             vmin=-span, vmax=span)  # fmt: skip
    axes[1, 1].set_facecolor("0.85")  # -inf cells are not drawn: the grey background
    _heatmap(axes[1, 1], arrays["masked_scores"], "masked scores (grey = -inf)", cmap="RdBu_r",
             vmin=-span, vmax=span)  # fmt: skip
    _heatmap(axes[1, 2], arrays["weights"], "softmax weights (rows sum to 1)")
    for ax in axes.flat:
        ax.set_xlabel("key position", fontsize=8)
        ax.set_xticks(range(length))
    for ax in (*axes[0, 1:], *axes[1]):
        ax.set_ylabel("query position", fontsize=8)
        ax.set_yticks(range(length))
    for ax in axes[1]:
        fig.colorbar(ax.images[0], ax=ax, shrink=0.8)
    fig.suptitle("masks (green = may attend) and what they do to attention (sentence 0)")
    return fig


def _save(fig: Figure, output_png: str) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(output_png, format="png", dpi=100)


def sibling(output_png: str, suffix: str) -> str:
    """attention.png, "encoder" -> attention-encoder.png (beside it)."""
    return f"{os.path.splitext(output_png)[0]}-{suffix}.png"


def plot_attention(
    config: TransformerConfig,
    params,
    tokenizer,
    sentence: str,
    output_png: str,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    masks_png: str | None = None,
) -> str:
    """Translate one sentence and draw, per layer and head, its cross-attention to
    ``output_png`` and its encoder and decoder self-attention beside it
    (``*-encoder.png``, ``*-decoder.png``).

    tokenizer needs encode_source, decode_source and decode_target. masks_png, if
    given, receives the padding and causal masks of the pair. The sentence is translated
    as ``options`` say (one sentence: its batch_size is not used). Returns the
    translation.
    """
    source_ids = [*tokenizer.encode_source(sentence), EOS_ID]
    (hypothesis,) = translate_ids(
        config,
        params,
        [source_ids],
        options.replace(batch_size=1),
    )
    target_in = [BOS_ID, *hypothesis]
    weights = translation_attention(config, params, source_ids, target_in)
    source = _labels(source_ids, tokenizer.decode_source)
    target_in_labels = _labels(target_in, tokenizer.decode_target)
    target_out = _labels([*hypothesis, EOS_ID], tokenizer.decode_target)
    pictures = [
        (output_png, "cross", "cross-attention (rows: target, columns: source)",
         source, target_out),
        (sibling(output_png, "encoder"), "encoder",
         "encoder self-attention (rows: source queries, columns: source keys)", source, source),
        (sibling(output_png, "decoder"), "decoder",
         "decoder self-attention, causal (rows: target queries, columns: target keys)",
         target_in_labels, target_out),
    ]  # fmt: skip
    with matplotlib.rc_context({"font.family": _font_family()}):
        for path, kind, title, keys, queries in pictures:
            _save(draw_attention(weights[kind], keys, queries, title), path)
        if masks_png is not None:
            plot_masks(source_ids, target_in, masks_png)
    return tokenizer.decode_target(hypothesis)


def plot_bert_attention(
    config: BertConfig,
    bert_params,
    input_ids: Sequence[int],
    token_type_ids: Sequence[int],
    pieces: list[str],
    output_png: str,
) -> np.ndarray:
    """Draw BERT's self-attention of one input per layer and head, the word pieces on
    both axes; returns the weights drawn [layers, heads, length, length]."""
    weights = bert_attention(config, bert_params, input_ids, token_type_ids)
    with matplotlib.rc_context({"font.family": _font_family()}):
        title = "BERT self-attention (rows: queries, columns: keys)"
        _save(draw_attention(weights, pieces, pieces, title), output_png)
    return weights
