"""BERT data from a run's data config: the calls a training loop makes.

config.data = get_bert_data_config()
documents = pretraining_documents(config.data, "train")
tokenizer = load_or_train_bert_tokenizer(config.data, workdir, documents)
batches = pretraining_train_iterator(config.data, tokenizer, documents, seed=0)
model_config = BertConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, ...)
dev = pretraining_eval_batches(config.data, tokenizer,
                               pretraining_documents(config.data, "dev"), 8, 64)

examples = read_labelled_texts(config.data.classification_train)
labels = classification_labels(config.data, examples)
"""

from collections.abc import Sequence

from jaxtrans.data.bert.classification import LabelledText, label_names
from jaxtrans.data.bert.demo import demo_documents
from jaxtrans.data.bert.pretraining_examples import (
    PretrainingIterator,
    PretrainingOptions,
    TokenizedCorpus,
    pretraining_iterator,
    read_documents,
)
from jaxtrans.data.iterators import local_batch_size
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.errors import UserError

# The demo dev documents come from a generator seeded apart from the training ones.
_DEMO_DEV_SEED_OFFSET = 1_000_003


def pretraining_options(data_config) -> PretrainingOptions:
    """The example-making fields of the data config."""
    return PretrainingOptions(
        max_seq_length=data_config.max_seq_length,
        max_predictions_per_seq=data_config.max_predictions_per_seq,
        masked_lm_prob=data_config.masked_lm_prob,
        mask_token_prob=data_config.mask_token_prob,
        random_token_prob=data_config.random_token_prob,
        short_seq_prob=data_config.short_seq_prob,
        random_next_prob=data_config.random_next_prob,
    )


def pretraining_documents(data_config, split: str) -> list[list[str]]:
    """The "train" or "dev" documents: from the configured files or the demo corpus."""
    files = {"train": data_config.train, "dev": data_config.dev}[split]
    if files:
        documents = read_documents([p for p in files.split(",") if p])
        if not documents:
            raise UserError(f"--config.data.{split}={files} holds no text")
        return documents
    if split == "train":
        return demo_documents(data_config.demo_documents, data_config.demo_seed)
    return demo_documents(
        data_config.demo_dev_documents, data_config.demo_seed + _DEMO_DEV_SEED_OFFSET
    )


def pretraining_train_iterator(
    data_config,
    tokenizer: BertTokenizer,
    documents: Sequence[Sequence[str]],
    *,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
) -> PretrainingIterator:
    """This process's share of every global training batch, forever (checkpointable)."""
    return pretraining_iterator(
        TokenizedCorpus.build(documents, tokenizer),
        tokenizer,
        pretraining_options(data_config),
        batch_size=local_batch_size(data_config.batch_size, process_count),
        seed=seed,
        process_index=process_index,
        process_count=process_count,
        read_threads=data_config.read_threads,
        prefetch_batches=data_config.prefetch_batches,
    )


def pretraining_eval_batches(
    data_config,
    tokenizer: BertTokenizer,
    documents: Sequence[Sequence[str]],
    num_batches: int,
    batch_size: int,
) -> list[dict]:
    """A fixed set of held-out batches (seed 0): the same examples at every evaluation."""
    iterator = pretraining_iterator(
        TokenizedCorpus.build(documents, tokenizer),
        tokenizer,
        pretraining_options(data_config),
        batch_size=batch_size,
        seed=0,
        prefetch_batches=0,
    )
    return [next(iterator) for _ in range(num_batches)]


def classification_labels(data_config, examples: Sequence[LabelledText]) -> list[str]:
    """The configured label order, or the sorted labels of the training examples."""
    if data_config.labels:
        return [label.strip() for label in data_config.labels.split(",")]
    return label_names(examples)
