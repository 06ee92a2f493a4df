"""SearchOptions: every setting of a translation's decoding, in one frozen object.

    eval config / evaluate.py's flags / Translator.translate's arguments
        -> SearchOptions (defaults defined here, once)
        -> translate / nbest / the decoders (one argument, down into the jitted program)

The object is a pytree: the settings that shape a program (beam size, the length penalty's
form, sampling or not, the logits processors, the batch and length sizes) are its static
part, so another value is another program; the numbers a program only computes with
(alpha, temperature, top_k, top_p) and the sampling seed are its leaves, traced, so one
compiled decoder serves every value.

``check()`` refuses settings no decoder can use (a UserError, one line); ``for_decoder()``
is what a decoder's program depends on (sizes the shapes already carry at their defaults,
the numbers as the types they are traced with), so that one program serves them all.
"""

import dataclasses
import json
from typing import Literal

import jax
from jax import export

from jaxtrans.errors import UserError

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

    def replace(self, **changes) -> "SearchOptions":
        """These options with ``changes`` (field names and values)."""
        return dataclasses.replace(self, **changes)

    def check(self) -> None:
        """UserError unless the search's sizes are at least 1, alpha >= 0, penalty_form is
        one of PENALTY_FORMS, the sampling settings are usable (temperature >= 0, top_k a
        whole number >= 0, 0 < top_p <= 1) and so are the logits processors'
        (repetition_penalty > 0, no_repeat_ngram_size a whole number >= 0)."""
        multiple = 1 if self.length_multiple is None else self.length_multiple
        sizes = (self.batch_size, self.beam_size, self.max_extra_length, multiple)
        if min(sizes) < 1:
            raise UserError(
                f"batch_size={self.batch_size}, beam_size={self.beam_size}, max_extra_length="
                f"{self.max_extra_length}, length_multiple={self.length_multiple}: each must "
                "be at least 1"
            )
        if self.alpha < 0:
            raise UserError(f"alpha={self.alpha}: the length penalty exponent must be >= 0")
        if self.penalty_form not in PENALTY_FORMS:
            raise UserError(
                f"penalty_form={self.penalty_form!r}: use one of {', '.join(PENALTY_FORMS)}"
            )
        check_sampling(self.temperature, self.top_k, self.top_p)
        if not self.repetition_penalty > 0:
            raise UserError(
                f"repetition_penalty={self.repetition_penalty}: must be > 0 (1.0: none)"
            )
        size = self.no_repeat_ngram_size
        if isinstance(size, bool) or not float(size).is_integer() or size < 0:
            raise UserError(
                f"no_repeat_ngram_size={size}: must be a whole number >= 0 (0: no limit)"
            )

    def for_decoder(self) -> "SearchOptions":
        """These options as a decoder's program takes them: batch_size, length_multiple and
        max_extra_length at their defaults (the shapes and max_len carry them), alpha,
        temperature and top_p floats, top_k and seed ints (one traced type whatever the
        user wrote)."""
        return self.replace(
            batch_size=DEFAULT_OPTIONS.batch_size,
            length_multiple=DEFAULT_OPTIONS.length_multiple,
            max_extra_length=DEFAULT_OPTIONS.max_extra_length,
            alpha=float(self.alpha),
            temperature=float(self.temperature),
            top_k=int(self.top_k),
            top_p=float(self.top_p),
            seed=int(self.seed),
        )


# Every default, as one object: what a function decodes with when given no options.
DEFAULT_OPTIONS = SearchOptions()


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """UserError unless temperature >= 0, top_k a whole number >= 0 and 0 < top_p <= 1."""
    if not temperature >= 0:
        raise UserError(f"temperature={temperature}: must be >= 0 (0: greedy)")
    if isinstance(top_k, bool) or not float(top_k).is_integer() or top_k < 0:
        raise UserError(f"top_k={top_k}: must be a whole number >= 0 (0: all tokens)")
    if not 0 < top_p <= 1:
        raise UserError(f"top_p={top_p}: must be in (0, 1] (1.0: all tokens)")


# The numbers a decoder computes with: traced leaves; the rest shape the program.
_TRACED = ("alpha", "temperature", "top_k", "top_p", "seed")
jax.tree_util.register_dataclass(
    SearchOptions,
    data_fields=list(_TRACED),
    meta_fields=[f.name for f in dataclasses.fields(SearchOptions) if f.name not in _TRACED],
)
# Stored decoders (stored_decoders.StoredJit) serialise their argument trees: the static
# part (the meta fields' values, in field order) as JSON.
export.register_pytree_node_serialization(
    SearchOptions,
    serialized_name="jaxtrans.inference.options.SearchOptions",
    serialize_auxdata=lambda meta: json.dumps(list(meta)).encode(),
    deserialize_auxdata=lambda data: tuple(json.loads(data)),
)
