"""SearchOptions: every setting of a translation's decoding, in one frozen object.

    eval config / evaluate.py's flags / Translator.translate's arguments
        -> SearchOptions (defaults defined here, once)
        -> translate / nbest / the decoders (one argument, down into the jitted program)

The object is a pytree: the settings that shape a program (beam size, the length penalty's
form, sampling or not, the logits processors, the batch and length sizes) are its static
part, so another value is another program; the numbers a program only computes with
(alpha, temperature, top_k, top_p) and the sampling seed are its leaves, traced, so one
compiled decoder serves every value.
"""

import dataclasses
from typing import Literal

import jax

# How beam search normalises a finished hypothesis' log-probability by its length:
# "gnmt" ((5 + length) / 6) ** alpha, "hf" length ** alpha (beam_search.length_penalty).
PenaltyForm = Literal["gnmt", "hf"]
PENALTY_FORMS: tuple[PenaltyForm, ...] = ("gnmt", "hf")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """How sentences are decoded: the search, its limits, sampling and logits processors."""

    # Beam size (1: greedy search).
    beam_size: int = 4
    # The length penalty's exponent (beam search).
    alpha: float = 0.6
    # The length penalty's form: "gnmt" or "hf" (PENALTY_FORMS).
    penalty_form: PenaltyForm = "gnmt"
    # Longest output = source length + this (+ a forced prefix's length).
    max_extra_length: int = 50
    # Sentences per decoding batch (per device part when decoding over several).
    batch_size: int = 64
    # Source lengths are padded up a ladder of this multiple (None: the platform's).
    length_multiple: int | None = None
    # Draw each token instead of searching (temperature, then top_k, then top_p).
    sampling: bool = False
    # Sampling's temperature (0: greedy).
    temperature: float = 1.0
    # Sampling keeps the top_k most probable tokens (0: all).
    top_k: int = 0
    # Sampling keeps the most probable tokens holding top_p of the probability (1.0: all).
    top_p: float = 1.0
    # Sentence i samples with the key fold_in(key(seed), i).
    seed: int = 0
    # Logits of tokens already in the output divided (positive) or multiplied (negative)
    # by this, as transformers' and CTranslate2's repetition_penalty (1.0: none).
    repetition_penalty: float = 1.0
    # No n-gram of this many tokens appears twice in an output (0: no limit).
    no_repeat_ngram_size: int = 0


# The numbers a decoder computes with: traced leaves; the rest shape the program.
_TRACED = ("alpha", "temperature", "top_k", "top_p", "seed")
jax.tree_util.register_dataclass(
    SearchOptions,
    data_fields=list(_TRACED),
    meta_fields=[f.name for f in dataclasses.fields(SearchOptions) if f.name not in _TRACED],
)
