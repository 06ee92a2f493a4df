"""The ``eval`` section of a translation run: decoding and BLEU, during training and in
evaluate.py (whose flags override the decoding fields, see decoding_settings.py).

    TranslationEvalConfig / eval_section()   the fields, defaults and comments

The decoding fields are SearchOptions' (jaxtrans.inference.options), with its defaults:
each default is defined there, once.
"""

import dataclasses

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.inference.options import DEFAULT_OPTIONS

_SEARCH = DEFAULT_OPTIONS


@dataclasses.dataclass(frozen=True)
class TranslationEvalConfig:
    """The ``eval`` section of a translation run."""

    # Beam size (4 in the paper; 1 = greedy).
    beam_size: int = _SEARCH.beam_size
    # Length penalty alpha: beam scores are divided by ((5 + length) / 6) ** alpha, or by
    # length ** alpha with penalty_form "hf".
    alpha: float = _SEARCH.alpha
    # The length penalty's form: "gnmt" (((5 + length) / 6) ** alpha, of the GNMT paper) or
    # "hf" (length ** alpha: Hugging Face's and Marian's length_penalty, as transformers'
    # generate decodes).
    penalty_form: str = _SEARCH.penalty_form
    # Longest output = source length + this.
    max_extra_length: int = _SEARCH.max_extra_length
    # Sentences per decoding batch.
    batch_size: int = _SEARCH.batch_size
    # Logits of tokens already in the output divided (positive) or multiplied (negative)
    # by this, as transformers' and CTranslate2's repetition_penalty (1.0: none).
    repetition_penalty: float = _SEARCH.repetition_penalty
    # No n-gram of this many tokens appears twice in an output (0: no limit).
    no_repeat_ngram_size: int = _SEARCH.no_repeat_ngram_size
    # Decode the dev set and report BLEU at each evaluation during training.
    bleu_during_training: bool = True
    # Use only the first N dev sentences during training (0 = all).
    dev_sentences: int = 0


def eval_section(**overrides) -> ml_collections.ConfigDict:
    """The eval section: TranslationEvalConfig's defaults, with ``overrides``."""
    return dataclass_section(TranslationEvalConfig, **overrides)
