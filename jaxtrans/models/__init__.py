"""Models built from jaxtrans.nn blocks."""

from jaxtrans.models.bert.bert_model import (
    BertConfig,
    BertForClassification,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForTokenClassification,
    BertModel,
)
from jaxtrans.models.transformer import Transformer, TransformerConfig

__all__ = [
    "BertConfig",
    "BertForClassification",
    "BertForPretraining",
    "BertForQuestionAnswering",
    "BertForTokenClassification",
    "BertModel",
    "Transformer",
    "TransformerConfig",
]
