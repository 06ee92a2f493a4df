"""The PyTorch peers of the benchmarks hold to what their tables claim: fairseq-like
batches stay within their token budget and cover the corpus once an epoch, the cached
greedy decoder computes what the full torch decoder computes, and the same-recipe
schedule warms up by steps and ends at the deadline."""

import math
import os
import sys

import numpy as np
import pytest
from paths import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import steps  # noqa: E402
import time_to_bleu_torch  # noqa: E402
import torch  # noqa: E402
import torch_greedy  # noqa: E402
from token_buckets import bucket_rows  # noqa: E402

from jaxtrans.data.reserved_pieces import PAD_ID  # noqa: E402


def test_length_buckets_stay_within_max_tokens_and_cover_every_pair_once_an_epoch():
    lengths = np.random.default_rng(0).integers(2, 65, 5_000)
    batches = bucket_rows(lengths, max_tokens=2_048, window=1_000, rng=np.random.default_rng(1))
    assert all(len(rows) * lengths[rows].max() <= 2_048 for rows in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(5_000))
    # Like lengths together: a batch spans a few lengths, not the corpus's 2-64.
    assert np.median([np.ptp(lengths[rows]) for rows in batches]) <= 8


@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_decoding_steps_equal_the_full_decoder_on_the_same_prefix(norm_first):
    shapes = steps.Shapes(32, 2, 64, 2, 200, batch_size=3, source_length=9, target_length=7)
    torch.manual_seed(0)
    model = steps.TorchTransformer(shapes, dropout=0.0, norm_first=norm_first).eval()
    source = torch.randint(4, 200, (3, 9))
    source[0, 5:] = PAD_ID
    target = torch.randint(4, 200, (3, 7))
    pad = source == PAD_ID
    with torch.no_grad():
        memory = model.transformer.encoder(model.embed(source), src_key_padding_mask=pad)
        full = model.transformer.decoder(
            model.embed(target), memory, tgt_mask=steps.causal_mask(7), tgt_is_causal=True,
            memory_key_padding_mask=pad,
        )  # fmt: skip
        layers = model.transformer.decoder.layers
        project = torch_greedy.project
        cross = [(project(layer.multihead_attn, memory, 1),
                  project(layer.multihead_attn, memory, 2)) for layer in layers]  # fmt: skip
        caches, outputs = [None] * len(layers), []
        for t in range(7):
            x = model.embedding(target[:, t]) * math.sqrt(shapes.d_model) + model.positions[t]
            x = x[:, None]
            for i, layer in enumerate(layers):
                x, caches[i] = torch_greedy.decoder_layer_step(
                    layer, x, caches[i], cross[i], ~pad[:, None, None]
                )
            outputs.append(model.transformer.decoder.norm(x[:, 0]))
    assert torch.allclose(torch.stack(outputs, dim=1), full, atol=1e-5)


def test_same_recipe_rate_warms_up_by_steps_then_reaches_zero_at_the_deadline(monkeypatch):
    clock = {"now": 0.0}
    monkeypatch.setattr(time_to_bleu_torch.time, "monotonic", lambda: clock["now"])
    rate = time_to_bleu_torch.time_linear_rate(peak=2e-3, warmup=100, deadline=1_000.0)
    assert rate(0) == pytest.approx(2e-5)
    clock["now"] = 100.0
    assert rate(99) == pytest.approx(2e-3)  # the warm-up ends at t = 100 s
    clock["now"] = 550.0
    assert rate(300) == pytest.approx(1e-3)  # half the time after the warm-up is left
    clock["now"] = 1_000.0
    assert rate(900) == 0.0
