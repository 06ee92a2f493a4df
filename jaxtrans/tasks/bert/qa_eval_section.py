"""The ``eval`` section of a question-answering run: how answers are chosen and scored,
during training and in evaluate.py.

    QuestionAnsweringEvalConfig / qa_eval_section()   the fields, defaults and comments
"""

import dataclasses

import ml_collections

from jaxtrans.config_sections import dataclass_section


@dataclasses.dataclass(frozen=True)
class QuestionAnsweringEvalConfig:
    """The ``eval`` section of a bert_question_answering run."""

    # Windows per evaluation batch.
    batch_size: int = 64
    # SQuAD 2.0: predict no answer when its score exceeds the best span's by more than this.
    null_score_diff_threshold: float = 0.0
    # Score Chinese answers by their characters (each CJK ideograph a word, Unicode
    # punctuation removed); False: the official SQuAD normalisation.
    cjk_characters: bool = False


def qa_eval_section(**overrides) -> ml_collections.ConfigDict:
    """The eval section: QuestionAnsweringEvalConfig's defaults, with ``overrides``."""
    return dataclass_section(QuestionAnsweringEvalConfig, **overrides)
