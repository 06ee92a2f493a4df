"""Fine-tune BERT for named-entity recognition (a tag for every word) on CoNLL files.

Starts from --config.init_from: a BERT workdir of train.py, or a Hugging Face BERT
checkpoint directory (config.json, weights, vocab.txt); the model's shapes and vocabulary
are the checkpoint's, the tag classifier is new. The usual recipe: AdamW with peak
learning rate 5e-5, 10% linear warm-up then linear decay, batch 32, dropout 0.1,
sequences of 128 word pieces, about 3 epochs (CoNLL-2003 English: 14,041 sentences, so
1,300 steps).

    python train.py --config configs/bert_ner.py --workdir runs/conll03 \\
        --config.init_from=checkpoints/bert-base-cased \\
        --config.data.ner_train=train.txt --config.data.ner_dev=valid.txt \\
        --config.data.ner_test=test.txt
    python evaluate.py --workdir runs/conll03                      # test: entity P/R/F1
    echo "Angela Merkel visited Paris." | python evaluate.py --workdir runs/conll03 --input -

Files: one word a line with its tag in the last column, a blank line between sentences
(jaxtrans.data.ner.conll); tags in --config.data.tag_scheme (bio, iob1 or iobes). Dev entity
precision, recall and F1 (conlleval's) are logged at every evaluation.
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.tasks.bert.bert_task import FINE_TUNING_FIELDS
from jaxtrans.tasks.run_config import bert_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The BertConfig fields fine-tuning may set; all others come from the checkpoint."""
    return dataclass_section(BertConfig, only=FINE_TUNING_FIELDS)


def add_ner_data(data: ml_collections.ConfigDict) -> None:
    """The data fields of entity tagging."""
    # Entity tagging: training file, CoNLL format (word ... tag a line, blank line between
    # sentences; optionally .gz). "" = the built-in demo corpus if ner_demo_train_size > 0.
    data.ner_train = ""
    # Entity tagging: development file (CoNLL), scored at every evaluation.
    data.ner_dev = ""
    # Entity tagging: test file (CoNLL), for the final report.
    data.ner_test = ""
    # Entity tagging: the tag scheme of the files: bio (IOB2) | iob1 | iobes.
    data.tag_scheme = "bio"
    # Entity tagging: sentences of the built-in demo corpus for training (used when
    # ner_train is empty); 0 = none, ner_train is required.
    data.ner_demo_train_size = 0
    # Entity tagging: demo corpus sentences of each of dev and test.
    data.ner_demo_eval_size = 0


def get_config() -> ml_collections.ConfigDict:
    config = bert_run_config()
    config.task = "bert_token_classification"
    # The checkpoint to fine-tune: a BERT workdir or a Hugging Face checkpoint directory.
    config.init_from = ""
    config.model = get_model_config()
    # bfloat16 compute with float32 parameters, as configs/bert_base.py.
    config.model.dtype = "bfloat16"

    add_ner_data(config.data)
    config.data.max_seq_length = 128
    config.data.batch_size = 32

    config.optimizer.learning_rate = 5e-5
    config.optimizer.warmup_steps = 130  # 10% of num_steps

    config.train.num_steps = 1300  # about 3 epochs of CoNLL-2003 English at batch 32
    config.train.log_every = 50
    config.train.checkpoint_every = 500
    config.train.eval_every = 250
    config.train.keep_checkpoints = 2

    config.eval.batch_size = 64
    return config
