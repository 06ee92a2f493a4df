"""BERT: the model and its heads, Hugging Face directories in and out.

bert_model.py             BertConfig, BertModel and its heads (pretraining, sequence and
                          token classification, answer spans)
bert_from_huggingface.py  a Hugging Face BERT directory -> BertConfig + params
bert_to_huggingface.py    the inverse: BERT params -> Hugging Face state dict + config.json
"""

from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
from jaxtrans.models.bert.bert_model import (
    BertConfig,
    BertForClassification,
    BertForPretraining,
    BertForQuestionAnswering,
    BertForTokenClassification,
    BertModel,
)

__all__ = [
    "BertConfig",
    "BertForClassification",
    "BertForPretraining",
    "BertForQuestionAnswering",
    "BertForTokenClassification",
    "BertModel",
    "from_huggingface",
]
