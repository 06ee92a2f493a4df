"""Translation data: sources of sentence pairs, SentencePiece tokenizers, input pipelines.

Knows nothing of models. The training and evaluation code call:

    config.data = get_data_config()                       # every field, demo defaults
    tokenizer = load_or_train_tokenizer(config.data, workdir)
    batches = train_iterator(config.data, tokenizer, seed=0)   # checkpointable, infinite
    pairs = load_split(config.data, "dev")                # in file order
    for batch in eval_batches(pairs, tokenizer, 64, 128, 128): ...
"""

from jaxtrans.data.config import get_data_config
from jaxtrans.data.evaluation import eval_batches
from jaxtrans.data.pipeline import BATCH_KEYS, TrainIterator, padding_fraction, train_iterator
from jaxtrans.data.records import TranslationPair
from jaxtrans.data.sources import load_split, source_kind, training_pairs
from jaxtrans.data.tokenizer import Tokenizer, load_or_train_tokenizer, load_tokenizer
from jaxtrans.data.vocab import BOS_ID, CLS_ID, EOS_ID, MASK_ID, PAD_ID, SEP_ID, UNK_ID

__all__ = [
    "BATCH_KEYS",
    "BOS_ID",
    "CLS_ID",
    "EOS_ID",
    "MASK_ID",
    "PAD_ID",
    "SEP_ID",
    "UNK_ID",
    "Tokenizer",
    "TrainIterator",
    "TranslationPair",
    "eval_batches",
    "get_data_config",
    "load_or_train_tokenizer",
    "load_split",
    "load_tokenizer",
    "padding_fraction",
    "source_kind",
    "train_iterator",
    "training_pairs",
]
