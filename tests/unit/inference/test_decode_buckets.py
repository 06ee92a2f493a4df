"""Decoding batches of a few fixed shapes: few compiled programs, and the same translations
as decoding each sentence alone."""

import functools
import random

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.decoding import beam_decode, greedy_decode
from jaxtrans.inference.length_buckets import (
    batch_rows,
    bucket_ladder,
    bucket_length,
    decoded_batches,
    length_batches,
)
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.translate import translate_ids
from jaxtrans.models import Transformer
from jaxtrans.vocab import EOS_ID

# A shape no other test file decodes (vocabulary 19, d_ff 24, one decoder layer), so that
# the jit caches' new entries below are this file's programs alone.
CONFIG = tiny_transformer_config(vocab=19, d_ff=24, num_decoder_layers=1)
SEARCH = SearchOptions(alpha=0.6, max_extra_length=5, length_multiple=4)


@functools.cache
def params() -> dict:
    source = jnp.ones((1, 4), jnp.int32)
    init = jax.jit(Transformer(CONFIG).init)
    return nn.unbox(init(jax.random.key(2), source, source))["params"]


def random_sources(count: int, longest: int, seed: int = 0) -> list[list[int]]:
    """``count`` sentences of 1 to ``longest`` random ids (3..18), EOS appended."""
    rng = random.Random(seed)
    return sentences([rng.randint(1, longest) for _ in range(count)], seed)


def sentences(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """A sentence of random ids (3..18) of each length, EOS appended."""
    rng = random.Random(seed)
    return [[*(rng.randrange(3, 19) for _ in range(n)), EOS_ID] for n in lengths]


def shapes(config, sources, prefixes=None, *, batch_size=64, length_multiple=16, extra=50):
    """The (rows, src_len, max_len, prefix_len) of the batches of ``sources``."""
    batches = length_batches(
        config,
        sources,
        prefixes,
        batch_size=batch_size,
        max_extra_length=extra,
        length_multiple=length_multiple,
    )
    return {batch.shape for batch in batches}


def test_a_length_lands_on_the_smallest_rung_holding_it():
    lengths = (1, 16, 17, 127, 128, 129, 160, 161, 193, 224, 257, 321)
    rungs = (16, 16, 32, 128, 128, 160, 160, 192, 224, 224, 320, 384)
    assert [bucket_length(n, 16) for n in lengths] == list(rungs)
    assert bucket_ladder(300, 16) == [16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]


def test_the_learned_position_limit_caps_every_bucket_and_the_output():
    config = tiny_transformer_config("learned", max_len=50)
    assert bucket_ladder(60, 16, limit=50) == [16, 32, 48, 50]
    (batch,) = length_batches(
        config, [[5] * 49 + [EOS_ID]], None, batch_size=8, max_extra_length=9, length_multiple=16
    )
    assert batch.shape == (1, 50, 50, 0)


def test_a_thousand_sentences_of_random_lengths_make_no_more_shapes_than_buckets():
    sources = random_sources(1000, 299)
    ladder = bucket_ladder(300, 16)
    found = shapes(tiny_transformer_config(), sources)
    assert len(found) <= len(ladder)
    assert {rows for rows, _, _, _ in found} == {64}
    assert {src_len for _, src_len, _, _ in found} <= set(ladder)
    # The output length follows from the bucket, not from the batch's sentences.
    assert all(max_len == src_len + 50 for _, src_len, max_len, _ in found)


def test_forced_prefixes_add_no_more_than_a_bucket_of_their_own_to_each_source_bucket():
    sources = random_sources(1000, 120, seed=1)
    rng = random.Random(1)
    prefixes = [s[: rng.randint(0, 20)] for s in random_sources(1000, 40)]
    found = shapes(tiny_transformer_config(), sources, prefixes)
    source_buckets, prefix_buckets = bucket_ladder(121, 16), bucket_ladder(20, 16)
    assert len(found) <= len(source_buckets) * (len(prefix_buckets) + 1)
    assert {prefix_len for *_, prefix_len in found} <= {0, *prefix_buckets}


def test_a_batch_holds_its_longest_sentence_in_at_most_one_and_a_quarter_times_its_length():
    sources = random_sources(1000, 299, seed=2)
    for batch in length_batches(
        tiny_transformer_config(), sources, None, batch_size=16, max_extra_length=50,
        length_multiple=16,
    ):  # fmt: skip
        longest = max(len(sources[i]) for i in batch.indices)
        assert longest <= batch.source.shape[1] <= max(longest + 15, 1.25 * longest, 32)


def test_sentences_of_at_most_one_multiple_take_the_second_rung():
    # The shortest batches share the program of the batches above them.
    for multiple in (4, 8, 16):
        found = shapes(CONFIG, sentences([1, 2, multiple - 1, multiple + 1]), batch_size=2,
                       length_multiple=multiple, extra=5)  # fmt: skip
        assert {src_len for _, src_len, _, _ in found} == {2 * multiple}
    assert {s for _, s, _, _ in shapes(CONFIG, sentences([33]), length_multiple=8)} == {40}


def test_a_short_last_batch_takes_the_next_power_of_two_rows():
    found = shapes(tiny_transformer_config(), random_sources(64 * 3 + 5, 10), batch_size=64)
    assert {rows for rows, *_ in found} == {64, 8}


@pytest.mark.slow
@pytest.mark.parametrize(("beam_size", "decode"), [(1, greedy_decode), (3, beam_decode)])
def test_bucketed_batches_compile_once_a_shape_and_decode_what_each_sentence_does_alone(
    beam_size, decode
):
    # Batches of 4, longest first, EOS included: 8 7 4 3 (bucket 8: the 4 and the 3 padded
    # to 8) and 2 2 (bucket 8 too, the sources' shortest, in 2 rows); alone, each sentence
    # is a batch of 1 row.
    sources = sentences([2, 7, 1, 6, 3, 1], seed=1)
    search = SEARCH.replace(beam_size=beam_size, batch_size=4)
    expected = shapes(CONFIG, sources, batch_size=4, length_multiple=4, extra=5)
    before = decode._cache_size()
    together = translate_ids(CONFIG, params(), sources, search)
    assert decode._cache_size() - before == len(expected) == 2
    assert translate_ids(CONFIG, params(), sources, search) == together
    assert decode._cache_size() - before == len(expected)  # nothing compiled again
    alone = [translate_ids(CONFIG, params(), [s], search.replace(batch_size=1))[0] for s in sources]
    assert together == alone
    assert len({tuple(h) for h in alone}) > 3  # the model's outputs differ by sentence


def test_decoded_batches_come_back_in_order_with_at_most_in_flight_dispatched_ahead():
    batches = list(
        length_batches(
            tiny_transformer_config(),
            [[5] * n for n in range(1, 40)],
            None,
            batch_size=4,
            max_extra_length=3,
            length_multiple=4,
        )
    )
    events = []

    def decode(batch):
        events.append(("dispatch", batch.indices[0]))
        return {"ids": jnp.asarray(batch.source), "first": jnp.asarray(batch.indices[:1])}

    read = []
    for batch, outputs in decoded_batches(batches, decode, in_flight=2):
        events.append(("read", batch.indices[0]))
        assert isinstance(outputs["ids"], np.ndarray)
        np.testing.assert_array_equal(outputs["ids"], batch.source)
        assert outputs["first"][0] == batch.indices[0]
        read.append(batch.indices[0])
    assert read == [b.indices[0] for b in batches]  # every batch, in order
    # Batch k is read back after batch k + 2 is dispatched and before batch k + 3 is.
    for k, batch in enumerate(batches):
        at = events.index(("read", batch.indices[0]))
        dispatched = [e for e in events[:at] if e[0] == "dispatch"]
        assert len(dispatched) == min(k + 3, len(batches))


def test_batches_split_over_devices_take_rows_in_multiples_of_the_parts():
    """translate_ids over 6 devices asks for batch_size x 6 rows, each batch a multiple
    of 6: the last 5 sentences take 8 rows (the next power of two), rounded up to 12."""
    batches = list(
        length_batches(
            tiny_transformer_config(), random_sources(24 * 3 + 5, 10), None, batch_size=24,
            max_extra_length=50, length_multiple=16, row_multiple=6,
        )
    )  # fmt: skip
    assert [len(b.max_lengths) for b in batches] == [24, 24, 24, 12]
    assert [len(b.indices) for b in batches] == [24, 24, 24, 5]
    assert batch_rows(3, 64, 6) == 6 and batch_rows(100, 96, 12) == 96
