"""The plan a decoding call runs by (decode_plan.py): on CPU a first cache of the source's
length and a margin, a quarter of the rows once the rest finish, a finer length ladder;
elsewhere the plain plan."""

import pytest
from tiny_configs import tiny_transformer_config

from jaxtrans.inference.decode_plan import DecodePlan, decode_plan, plain_plan
from jaxtrans.inference.length_buckets import length_batches
from jaxtrans.nn.attention_kernels import target_platform


def test_cpu_decoders_narrow_to_a_quarter_if_that_leaves_sixteen_rows():
    assert decode_plan(100, 16, 66).stages == (25,)
    assert decode_plan(500, 16, 66).stages == (125,)
    assert decode_plan(61, 16, 66).stages == (16,)
    assert decode_plan(60, 16, 66).stages == ()  # FEWEST_NARROWED_ROWS


def test_cpu_decoders_start_from_the_source_length_and_a_margin():
    assert decode_plan(4, 16, 66).slots == 24
    assert decode_plan(4, 13, 66).slots == 24  # a multiple of 8
    assert decode_plan(4, 32, 40).slots == 40  # as long as max_len: no widening
    assert decode_plan(4, 16, 66) == DecodePlan(66, 24, ())


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_accelerators_take_the_plain_plan(platform):
    with target_platform(platform):  # as python -m jaxtrans.compile traces for a TPU
        assert decode_plan(500, 16, 66) == plain_plan(66) == DecodePlan(66, 66, ())
        assert not decode_plan(500, 16, 66).staged


def test_a_plan_is_staged_by_a_short_cache_or_narrowing():
    assert DecodePlan(12, 5).staged and DecodePlan(12, 12, (4,)).staged
    assert not DecodePlan(12, 12).staged
    assert hash(DecodePlan(12, 5, (4,))) == hash(DecodePlan(12, 5, (4,)))  # a static argument


def test_source_lengths_are_bucketed_finer_on_cpu():
    config = tiny_transformer_config("rope", vocab=11)
    sources = [[5] * n for n in (17, 3)]

    def source_lengths():
        common = dict(batch_size=1, max_extra_length=5)
        return [b.source.shape[1] for b in length_batches(config, sources, None, **common)]

    assert source_lengths() == [24, 16]  # 8 is no rung for sources (SHORTEST_SOURCE)
    with target_platform("tpu"):
        assert source_lengths() == [32, 32]
