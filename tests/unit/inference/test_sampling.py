"""Sampling (search.sample_search): its frequencies against NumPy's top-k / top-p
probabilities, its equality with greedy search, its seeds and its settings' errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chi2
from test_decoding import sources, tiny_model

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import generate, greedy_decode, sample_decode
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.search import row_keys, sample_search
from jaxtrans.inference.translate import translate_ids
from jaxtrans.tasks.translation.decoding_settings import decoding_name, decoding_settings
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID

ROWS = 20_000
# A toy distribution over 9 tokens: PAD, EOS, BOS (never drawn: PAD and BOS are blocked,
# EOS gets -inf), then 6 tokens with probabilities 0.35, 0.25, 0.2, 0.1, 0.06, 0.04.
PROBS = np.array([0.2, 0.0, 0.1, 0.35, 0.25, 0.2, 0.1, 0.06, 0.04])
LOGITS = np.log(np.where(PROBS > 0, PROBS, 1.0))
LOGITS[EOS_ID] = -np.inf  # PAD and BOS keep their large logits: the search must block them


def _step(cache, tokens, position):
    return jnp.broadcast_to(jnp.asarray(LOGITS, jnp.float32), (tokens.shape[0], 9)), cache


@jax.jit
def _search(keys, temperature, top_k, top_p):
    """One compilation a row count: the settings are traced."""
    max_lengths = jnp.ones(keys.shape, jnp.int32)
    return sample_search(
        _step, (), max_lengths, 1, keys, temperature=temperature, top_k=top_k, top_p=top_p
    )


@functools.cache
def _draw(temperature: float, top_k: int, top_p: float, seed: int = 0, rows: int = ROWS):
    """Tokens [rows] of one sampled position each (max_lengths 1), one batch."""
    keys = row_keys(seed, jnp.arange(rows))
    return np.asarray(_search(keys, temperature, top_k, top_p))[:, 0]


def expected(temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The distribution sampled from, by hand in float64: PAD, BOS and EOS removed, logits
    / temperature, the top_k most probable, then the fewest most probable holding top_p."""
    logits = LOGITS.astype(np.float64).copy()
    logits[[PAD_ID, BOS_ID, EOS_ID]] = -np.inf
    p = np.exp(logits / temperature)
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    kept = np.zeros(p.shape, bool)
    kept[order[: top_k or len(p)]] = True
    p = np.where(kept, p, 0.0) / p[kept].sum()
    total = 0.0
    nucleus = np.zeros(p.shape, bool)
    for token in order:
        if total >= top_p or p[token] == 0:
            break
        nucleus[token] = True
        total += p[token]
    return np.where(nucleus, p, 0.0) / p[nucleus].sum()


@pytest.mark.parametrize(
    "temperature, top_k, top_p, kept",
    [
        (0.5, 0, 1.0, [3, 4, 5, 6, 7, 8]),  # all six, sharpened
        (1.0, 3, 1.0, [3, 4, 5]),
        # 0.35 + 0.25 = 0.6 < 0.79, + 0.2 = 0.8 reaches it: three tokens (a cut-off that
        # dropped the crossing token would keep two); 0.81 needs four (not three).
        (1.0, 0, 0.79, [3, 4, 5]),
        (1.0, 0, 0.81, [3, 4, 5, 6]),
        (1.0, 0, 0.3, [3]),  # at least one token
        # top_k 3 first, renormalised (0.4375, 0.3125, 0.25), then top_p 0.7: 0.4375 <
        # 0.7 <= 0.75, two tokens; top_p on the probabilities before top_k (0.35, 0.6 <
        # 0.7 <= 0.8) would keep three.
        (1.0, 3, 0.7, [3, 4]),
        (2.0, 5, 0.9, [3, 4, 5, 6, 7]),
    ],
)
def test_frequencies_follow_the_kept_and_renormalised_probabilities(
    temperature, top_k, top_p, kept
):
    tokens = _draw(temperature, top_k, top_p)
    probs = expected(temperature, top_k, top_p)
    assert list(np.flatnonzero(probs)) == kept
    counts = np.bincount(tokens, minlength=9)
    # Tokens outside the kept set (PAD, BOS and EOS among them) never appear.
    assert counts[probs == 0].sum() == 0
    assert counts.sum() == ROWS
    # Pearson's chi-square goodness of fit over the kept tokens, below its 0.999 quantile
    # (a correct sampler fails one run in a thousand; the seed is fixed, so never here).
    expect = ROWS * probs[kept]
    statistic = float(((counts[kept] - expect) ** 2 / expect).sum())
    df = len(kept) - 1
    if df:
        assert statistic < chi2.ppf(0.999, df), (statistic, chi2.ppf(0.999, df))


def test_the_chi_square_bound_rejects_other_probabilities():
    """The bound has power: samples at temperature 0.5 fail it against temperature 1."""
    sharp = np.bincount(_draw(0.5, 0, 1.0), minlength=9)[3:]
    flat = ROWS * expected(1.0, 0, 1.0)[3:]
    assert ((sharp - flat) ** 2 / flat).sum() > 100 * chi2.ppf(0.999, 5)


def test_the_same_seed_gives_the_same_tokens_and_another_seed_others():
    a, b, c = _draw(1.0, 0, 1.0, 0, 256), _draw(1.0, 0, 1.0, 0, 256), _draw(1.0, 0, 1.0, 1, 256)
    np.testing.assert_array_equal(a, b)
    # 256 draws from six tokens: the same sequence by chance has probability < 0.35 ** 256.
    assert (a != c).mean() > 0.5


def _model_run(position="rope"):
    config, params = tiny_model(position)
    src = sources()
    max_lengths = jnp.full((src.shape[0],), 10, jnp.int32).at[3].set(4).at[5].set(0)
    return config, params, src, max_lengths


@pytest.mark.parametrize("temperature, top_k", [(0.0, 0), (1.0, 1), (0.3, 1)])
def test_temperature_zero_and_top_k_one_are_greedy_search(temperature, top_k):
    config, params, src, max_lengths = _model_run()
    greedy = greedy_decode(params, src, max_lengths, config=config, max_len=12)
    keys = row_keys(3, jnp.arange(src.shape[0]))
    options = SearchOptions(sampling=True, temperature=temperature, top_k=top_k)
    sampled = sample_decode(params, src, max_lengths, keys, options, config=config, max_len=12)
    np.testing.assert_array_equal(sampled, greedy)
    # generate takes temperature 0 to greedy_decode itself.
    again = generate(params, src, max_lengths, options, config=config, max_len=12, keys=keys)
    np.testing.assert_array_equal(again, greedy)
    assert len(set(map(tuple, np.asarray(greedy)[:, :4].tolist()))) > 1  # varied outputs


def test_a_sample_of_the_model_never_holds_pad_or_bos_and_stops_at_eos():
    config, params, src, max_lengths = _model_run()
    keys = row_keys(0, jnp.arange(src.shape[0]))
    tokens = np.asarray(
        sample_decode(
            params,
            src,
            max_lengths,
            keys,
            SearchOptions(temperature=2.0),
            config=config,
            max_len=12,
        )  # fmt: skip
    )
    for row, limit in zip(tokens, np.asarray(max_lengths), strict=True):
        ends = list(row).index(EOS_ID) + 1 if EOS_ID in row else int(limit)
        assert ends <= max(int(limit), 0)
        assert BOS_ID not in row[:ends] and PAD_ID not in row[:ends]
        assert (row[ends:] == PAD_ID).all()


def test_a_sentence_samples_the_same_whatever_its_batch():
    config, params = tiny_model()
    sentences = [list(map(int, s[s != PAD_ID])) + [EOS_ID] for s in np.asarray(sources())]
    options = SearchOptions(sampling=True, temperature=1.5, seed=4, max_extra_length=6)
    run = functools.partial(translate_ids, config, params, sentences)
    whole = run(options.replace(batch_size=8))
    assert run(options.replace(batch_size=3)) == whole
    assert run(options.replace(batch_size=8, seed=5)) != whole


@pytest.mark.parametrize(
    "given, message",
    [
        ({"temperature": -0.1}, r"^temperature=-0.1: must be >= 0 \(0: greedy\)$"),
        ({"top_k": -1}, r"^top_k=-1: must be a whole number >= 0"),
        ({"top_k": 2.5}, r"^top_k=2.5: must be a whole number >= 0"),
        ({"top_p": 0.0}, r"^top_p=0.0: must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"^top_p=1.5: must be in \(0, 1\]"),
        ({"sampling": True, "beam_size": 4}, r"^sampling with beam_size=4: .*sampling$"),
    ],
)
def test_bad_sampling_settings_are_one_line_errors(given, message):
    import ml_collections

    with pytest.raises(UserError, match=message) as error:
        decoding_settings(ml_collections.ConfigDict(), **given)
    assert "\n" not in str(error.value)


def test_sampling_takes_beam_size_one_and_gets_a_report_name_of_its_own():
    import ml_collections

    run = decoding_settings(ml_collections.ConfigDict({"eval": {"beam_size": 4}})).options
    assert (run.sampling, run.temperature, run.top_k, run.top_p, run.seed) == (
        False, 1.0, 0, 1.0, 0,
    )  # fmt: skip
    settings = decoding_settings(
        ml_collections.ConfigDict({"eval": {"beam_size": 4}}),
        sampling=True, temperature=0.7, top_p=0.9, beam_size=1,
    ).options  # fmt: skip
    assert settings.beam_size == 1
    assert decoding_name(settings, run) == "sample-t0.7-k0-p0.9-s0"
    changed = settings.replace(top_k=5, seed=2, max_extra_length=9)
    assert decoding_name(changed, run) == "sample-t0.7-k5-p0.9-s2-maxextra9"
    assert decoding_name(run, run) == "beam4"
