"""The ``eval`` section of a translation run: decoding and BLEU, during training and in
evaluate.py (whose flags override the decoding fields, see decoding_settings.py).

    TranslationEvalConfig / eval_section()   the fields, defaults and comments
"""

import dataclasses

import ml_collections

from jaxtrans.config_sections import dataclass_section


@dataclasses.dataclass(frozen=True)
class TranslationEvalConfig:
    """The ``eval`` section of a translation run."""

    # Beam size (4 in the paper; 1 = greedy).
    beam_size: int = 4
    # Length penalty alpha: beam scores are divided by ((5 + length) / 6) ** alpha, or by
    # length ** alpha with penalty_form "hf".
    alpha: float = 0.6
    # The length penalty's form: "gnmt" (((5 + length) / 6) ** alpha, of the GNMT paper) or
    # "hf" (length ** alpha: Hugging Face's and Marian's length_penalty, as transformers'
    # generate decodes).
    penalty_form: str = "gnmt"
    # Longest output = source length + this.
    max_extra_length: int = 50
    # Sentences per decoding batch.
    batch_size: int = 64
    # Decode the dev set and report BLEU at each evaluation during training.
    bleu_during_training: bool = True
    # Use only the first N dev sentences during training (0 = all).
    dev_sentences: int = 0


def eval_section(**overrides) -> ml_collections.ConfigDict:
    """The eval section: TranslationEvalConfig's defaults, with ``overrides``."""
    return dataclass_section(TranslationEvalConfig, **overrides)
