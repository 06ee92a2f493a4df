"""Cached decoding with the Transformer: encode once, then one decoder step per token.

    source [batch, src_len] -> encode -> memory -> cross-attention keys/values ("memory_cache")
    BOS -> step -> logits -> greedy search, sampling or beam search -> next token -> step -> ...

Each step runs the decoder on one token per row; its self-attention keys/values pile up
in the "cache" collection, so a step costs the same whatever the prefix length. A forced
target prefix (``prefix`` [batch, prefix_len], PAD after each row's end) is fed through
the same steps: the search emits its tokens first and goes on from the cache they built.

Each decoder takes its batch shape's DecodePlan (decode_plan.py: the cache's first slots,
the rows to narrow to) and runs its search in that plan's stages (staged_search.py); the
tokens are those of one loop over every row either way.

Every function here also decodes an ensemble: ``config`` a tuple of configs and
``params`` a tuple of parameter trees, one a member (jaxtrans.inference.ensemble), whose
mean next-token distribution chooses each token.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtrans.inference.beam_search import beam_search, gather_rows, tile_beams
from jaxtrans.inference.decode_plan import decode_plan
from jaxtrans.inference.ensemble import ModelConfig, ensemble_decoder, is_ensemble, members
from jaxtrans.inference.logits_processors import logits_processors
from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.inference.search import Decoder, StepFn, greedy_search, sample_search
from jaxtrans.inference.staged_search import beam_run, staged_run
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.nn.attention import CACHE, MEMORY_CACHE, reorder_cache, widen_cache
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID


def _decoding_model(config: TransformerConfig) -> Transformer:
    return Transformer(config.replace(decode=True))


def init_cache(
    config: TransformerConfig, params, memory_cache: dict, source: jnp.ndarray, max_len: int
) -> dict:
    """Zeroed self-attention caches, [rows, heads, max_len, head_dim] per decoder layer,
    for source [rows, src_len] and its cross_attention_cache.

    Only the shapes are wanted: a decoder call on max_len target positions, traced
    abstractly, sizes every cache from that length (no parameter initializer is traced)."""
    model = _decoding_model(config)
    rows = source.shape[0]

    def sized(params, memory_cache, source):
        target = jnp.zeros((rows, max_len), jnp.int32)
        _, variables = model.apply(
            {"params": params, MEMORY_CACHE: memory_cache},
            None,
            source,
            target,
            target_positions=jnp.broadcast_to(jnp.arange(max_len, dtype=jnp.int32), target.shape),
            method=Transformer.decode,
            mutable=[CACHE],
        )
        return variables[CACHE]

    shapes = jax.eval_shape(sized, params, memory_cache, source)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def cross_attention_cache(
    config: TransformerConfig, params, memory: jnp.ndarray, source: jnp.ndarray
) -> dict:
    """Cross-attention keys/values of memory [batch, src_len, d_model], every layer.

    One decoder call given the memory stores them; the rest of that call (a throw-away
    step without a self-attention cache) is discarded, and under jit XLA drops it.
    """
    batch = memory.shape[0]
    tokens = jnp.zeros((batch, 1), jnp.int32)
    _, variables = _decoding_model(config).apply(
        {"params": params},
        memory,
        source,
        tokens,
        target_positions=jnp.zeros((batch, 1), jnp.int32),
        method=Transformer.decode,
        mutable=[CACHE, MEMORY_CACHE],
    )
    return variables[MEMORY_CACHE]


def make_step_fn(
    config: TransformerConfig, params, memory_cache: dict, source: jnp.ndarray
) -> StepFn:
    """The search's step: tokens [rows] at one position -> logits [rows, vocab].

    source [rows, src_len] marks the real memory positions (cross-attention mask).
    """
    model = _decoding_model(config)

    def step(cache, tokens: jnp.ndarray, position: jnp.ndarray):
        positions = jnp.full((tokens.shape[0], 1), position, jnp.int32)
        logits, variables = model.apply(
            {"params": params, CACHE: cache, MEMORY_CACHE: memory_cache},
            None,
            source,
            tokens[:, None],
            target_positions=positions,
            method=Transformer.decode,
            mutable=[CACHE],
        )
        return logits[:, 0], variables[CACHE]

    return step


def _encode_and_cache_memory(config: TransformerConfig, params, source: jnp.ndarray) -> dict:
    memory = Transformer(config).apply({"params": params}, source, method=Transformer.encode)
    return cross_attention_cache(config, params, memory, source)


def model_decoder(
    config: TransformerConfig, params, source: jnp.ndarray, max_len: int, beam_size: int = 1
) -> Decoder:
    """One model's search step over rows [batch * beam_size] (beam-minor, beam_search.tile_beams),
    its zeroed cache of max_len tokens and their narrowing to fewer rows, for source
    [batch, src_len]: encoded
    once, and the beams share their sentence's memory (its keys/values tiled once, never
    gathered)."""
    params = nn.unbox(params)
    keys_values = tile_beams(_encode_and_cache_memory(config, params, source), beam_size)
    rows_source = jnp.repeat(source, beam_size, axis=0)
    cache = init_cache(config, params, keys_values, rows_source, max_len)
    return _rows_decoder(config, params, keys_values, rows_source, cache)


def _rows_decoder(config, params, keys_values: dict, rows_source, cache) -> Decoder:
    """model_decoder's Decoder over the rows of ``rows_source``, whose memory keys/values
    and cache are given; its narrowing takes rows of all three."""

    def narrow(cache, rows: jnp.ndarray) -> Decoder:
        kept = gather_rows(keys_values, rows)
        return _rows_decoder(config, params, kept, rows_source[rows], gather_rows(cache, rows))

    return Decoder(make_step_fn(config, params, keys_values, rows_source), cache, narrow)


def decoder(
    config: ModelConfig, params, source: jnp.ndarray, max_len: int, beam_size: int = 1
) -> Decoder:
    """model_decoder's Decoder of one model, or of an ensemble (configs and params tuples):
    the members' own, joined by ensemble.ensemble_decoder."""
    if not is_ensemble(config):
        return model_decoder(config, params, source, max_len, beam_size)
    return ensemble_decoder(
        [model_decoder(c, p, source, max_len, beam_size) for c, p in members(config, params)]
    )


_STATIC = ("config", "max_len", "bos_id", "eos_id", "pad_id")


@functools.partial(jax.jit, static_argnames=_STATIC)
def greedy_decode(
    params,
    source: jnp.ndarray,
    max_lengths: jnp.ndarray,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    config: ModelConfig,
    max_len: int,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Greedy translation of source [batch, src_len] (PAD after the end).

    max_lengths [batch]: output tokens allowed per row, EOS and prefix included (0: a
    dummy row); options: the search's settings (a pytree: its static part shapes the
    program, its numbers are traced; options.SearchOptions); max_len: static output
    length; prefix [batch, prefix_len]: forced first tokens, PAD after each row's end
    (search.greedy_search). Returns tokens [batch, max_len] int32, PAD after EOS.
    """
    plan = decode_plan(source.shape[0], source.shape[1], max_len)
    step, cache, narrow = decoder(config, params, source, plan.slots)
    return greedy_search(
        step,
        cache,
        max_lengths,
        max_len,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        prefix=prefix,
        run=staged_run(plan, narrow, widen_cache),
        processors=logits_processors(options),
    )


@functools.partial(jax.jit, static_argnames=_STATIC)
def sample_decode(
    params,
    source: jnp.ndarray,
    max_lengths: jnp.ndarray,
    keys: jnp.ndarray,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    config: ModelConfig,
    max_len: int,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Sampled translation (search.sample_search); arguments as greedy_decode, keys [batch]
    a PRNG key per row (search.row_keys). options' temperature, top_k and top_p are traced:
    one compilation serves every setting. Returns tokens [batch, max_len] int32, PAD after
    EOS.
    """
    plan = decode_plan(source.shape[0], source.shape[1], max_len)
    step, cache, narrow = decoder(config, params, source, plan.slots)
    return sample_search(
        step,
        cache,
        max_lengths,
        max_len,
        keys,
        temperature=options.temperature,
        top_k=options.top_k,
        top_p=options.top_p,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        prefix=prefix,
        run=staged_run(plan, narrow, widen_cache),
        processors=logits_processors(options),
    )


_BEAM_STATIC = (*_STATIC, "return_logprobs", "best_only")


@functools.partial(jax.jit, static_argnames=_BEAM_STATIC)
def beam_decode(
    params,
    source: jnp.ndarray,
    max_lengths: jnp.ndarray,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    config: ModelConfig,
    max_len: int,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefix: jnp.ndarray | None = None,
    return_logprobs: bool = False,
    best_only: bool = False,
) -> tuple[jnp.ndarray, ...]:
    """Beam search translation; arguments as greedy_decode. options.beam_size beams;
    options.alpha the length penalty's exponent (traced), options.penalty_form its formula:
    "gnmt" ((5 + len) / 6) ** alpha or "hf" len ** alpha (beam_search.length_penalty).
    prefix [batch, prefix_len]: one per sentence, carried by every beam, its
    log-probabilities counted in the scores (beam_search.beam_search).

    Returns tokens [batch, beam_size, max_len] and scores [batch, beam_size], best first;
    with return_logprobs also their summed log-probabilities [batch, beam_size]; with
    best_only the best's alone, each without its beam axis (taken inside the program: a
    slice taken outside is a program of its own, read or compiled by a fresh process).
    """
    beam_size = options.beam_size
    plan = decode_plan(source.shape[0] * beam_size, source.shape[1], max_len)
    step, cache, _ = decoder(config, params, source, plan.slots, beam_size)
    found = beam_search(
        step,
        cache,
        max_lengths,
        max_len,
        beam_size,
        options.alpha,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        penalty_form=options.penalty_form,
        prefix=prefix,
        return_logprobs=return_logprobs,
        reorder=reorder_cache,
        run=beam_run(plan, widen_cache),
        processors=logits_processors(options),
    )
    return tuple(x[:, 0] for x in found) if best_only else found


def generate(
    params,
    source: jnp.ndarray,
    max_lengths: jnp.ndarray,
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    config: ModelConfig,
    max_len: int,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    keys: jnp.ndarray | None = None,
    prefix: jnp.ndarray | None = None,
) -> jnp.ndarray:
    """Best translation per row: with options.sampling a sample (sample_decode, keys
    [batch] a PRNG key per row; temperature 0: greedy); else greedy for beam_size 1 and
    the top beam otherwise. Each starts with its row of the forced ``prefix`` where given.

    Arguments as beam_decode; returns tokens [batch, max_len] int32, PAD after EOS.
    """
    common = dict(
        config=config, max_len=max_len, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, prefix=prefix
    )
    options = options.for_decoder()
    if options.sampling:
        if keys is None:
            raise ValueError("sampling needs keys: a PRNG key per row (search.row_keys)")
        if options.temperature > 0:
            return sample_decode(params, source, max_lengths, keys, options, **common)
        return greedy_decode(params, source, max_lengths, options, **common)
    if options.beam_size == 1:
        return greedy_decode(params, source, max_lengths, options, **common)
    tokens, _ = beam_decode(params, source, max_lengths, options, **common, best_only=True)
    return tokens
