"""Ensemble decoding: several translation models choose every token together.

    source -> member 1: encode, cache memory -> step 1 -> logits 1 -\
           -> member 2: encode, cache memory -> step 2 -> logits 2 --> mean of the
           -> ...                                                  /   probabilities

Each member keeps its own encoder memory and decoder cache, so the members may differ
in shape (different runs): nothing is stacked, the members are a Python list traced into
one step function, and the searches (jaxtrans.inference.search) run unchanged over it.

At every step the ensemble's next-token distribution is the mean of the members'
probabilities, returned as its log:

    log p(y | x) = logsumexp_m log_softmax(logits_m) - log(n)

(fairseq's ``EnsembleModel`` and Sockeye's default ``linear`` mode; OpenNMT-py averages
log-probabilities unless told otherwise, Marian sums them). A token that one member
rules out keeps the probability the others give it. The searches then treat these
log-probabilities as logits, as they treat one model's: greedy search takes their
argmax, beam search renormalises them over the tokens it may emit (all but PAD and BOS).
An ensemble of one model decodes as the model does.

Decoding takes an ensemble as a tuple of TransformerConfig with a tuple of parameter
trees, one a member, in place of one model's config and params.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxtrans.inference.search import Decoder, StepFn
from jaxtrans.models import TransformerConfig

# One model's config, or an ensemble's: one config a member.
ModelConfig = TransformerConfig | tuple[TransformerConfig, ...]


def is_ensemble(config: ModelConfig) -> bool:
    """Whether ``config`` is an ensemble's (a tuple of configs, one a member)."""
    return isinstance(config, tuple)


def member_configs(config: ModelConfig) -> tuple[TransformerConfig, ...]:
    """The members' configs: the ensemble's tuple, or one model's config alone."""
    return config if is_ensemble(config) else (config,)


def members(config: ModelConfig, params) -> list[tuple[TransformerConfig, Any]]:
    """(config, params) of each member: the ensemble's pairs, or the one model's."""
    configs = member_configs(config)
    trees = params if is_ensemble(config) else (params,)
    if len(trees) != len(configs):
        raise ValueError(f"an ensemble of {len(configs)} configs has {len(trees)} param trees")
    return list(zip(configs, trees, strict=True))


def mean_log_probs(logits: Sequence[jnp.ndarray]) -> jnp.ndarray:
    """The log of the mean of the members' next-token probabilities.

    logits: one [rows, vocab] a member -> [rows, vocab] float32 log-probabilities.
    """
    logprobs = jnp.stack([jax.nn.log_softmax(x.astype(jnp.float32), axis=-1) for x in logits])
    return jax.nn.logsumexp(logprobs, axis=0) - jnp.log(float(len(logits)))


def ensemble_step_fn(step_fns: Sequence[StepFn]) -> StepFn:
    """One search step of the members together: their caches as a tuple (one a member,
    in order), each member fed the same tokens at the same position; returns
    (mean_log_probs of their logits [rows, vocab], the members' new caches)."""

    def step(caches: tuple, tokens: jnp.ndarray, position: jnp.ndarray):
        outputs = [fn(cache, tokens, position) for fn, cache in zip(step_fns, caches, strict=True)]
        return mean_log_probs([logits for logits, _ in outputs]), tuple(c for _, c in outputs)

    return step


def ensemble_decoder(decoders: Sequence[Decoder]) -> Decoder:
    """The members' Decoders -> the ensemble's: their steps as one, their caches as a tuple,
    and every member narrowed to the same rows (no narrowing where a member has none)."""
    narrows = [d.narrow for d in decoders]

    def narrow(caches: tuple, rows: jnp.ndarray) -> Decoder:
        return ensemble_decoder([n(c, rows) for n, c in zip(narrows, caches, strict=True)])

    step = ensemble_step_fn([d.step for d in decoders])
    caches = tuple(d.cache for d in decoders)
    return Decoder(step, caches, narrow if all(n is not None for n in narrows) else None)
