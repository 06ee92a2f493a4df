"""Fine-tune BERT for single-sentence or sentence-pair classification.

Starts from --config.init_from: a BERT pretraining workdir of train.py, or a Hugging Face
BERT checkpoint directory (config.json, weights, vocab.txt); the model's shapes and
vocabulary are the checkpoint's, the classifier head is new. BERT's fine-tuning recipe:
AdamW with peak learning rate 2e-5 (try 3e-5, 5e-5), 10% linear warm-up then linear
decay, batch 32, dropout 0.1, sequences of 128 tokens.

    python train.py --config configs/bert_classify.py --workdir runs/sst2 \\
        --config.init_from=checkpoints/bert-base-uncased \\
        --config.data.classification_train=train.tsv --config.data.classification_dev=dev.tsv

Data: TSV (label<TAB>text[<TAB>text_b]) or JSONL ({"label", "text", "text_b"}) files, or a
prepared TFDS GLUE task (--config.data.classification_tfds=glue/sst2, see
jaxtrans.data.bert.glue). Dev accuracy (and F1 for two labels) is logged at every evaluation.
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.tasks.bert.bert_task import FINE_TUNING_FIELDS
from jaxtrans.tasks.run_config import bert_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The BertConfig fields fine-tuning may set; all others come from the checkpoint."""
    return dataclass_section(
        BertConfig,
        only=FINE_TUNING_FIELDS,
    )


def get_config() -> ml_collections.ConfigDict:
    config = bert_run_config()
    config.task = "bert_classification"
    # The checkpoint to fine-tune: a BERT workdir or a Hugging Face checkpoint directory.
    config.init_from = ""
    config.model = get_model_config()
    # bfloat16 compute with float32 parameters, as configs/bert_base.py.
    config.model.dtype = "bfloat16"

    # Fine-tuning: labelled test file (.tsv or .jsonl), for the final report.
    config.data.classification_test = ""
    # Fine-tuning: a prepared TFDS GLUE task instead of files, e.g. "glue/mrpc"; "" = unset.
    config.data.classification_tfds = ""
    # TFDS data directory ("" = TFDS default, ~/tensorflow_datasets).
    config.data.tfds_data_dir = ""
    config.data.max_seq_length = 128
    config.data.batch_size = 32

    config.optimizer.learning_rate = 2e-5
    config.optimizer.warmup_steps = 100  # 10% of num_steps

    config.train.num_steps = 1000  # about 3 epochs of 10k examples at batch 32
    config.train.log_every = 50
    config.train.checkpoint_every = 500
    config.train.eval_every = 250
    config.train.keep_checkpoints = 2

    config.eval.batch_size = 64
    return config
