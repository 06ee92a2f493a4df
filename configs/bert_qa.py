"""Fine-tune BERT for extractive question answering (SQuAD 1.1 / 2.0).

Starts from --config.init_from: a BERT workdir of train.py or a Hugging Face BERT
checkpoint directory (config.json, weights, vocab.txt); the model's shapes and
vocabulary are the checkpoint's, the qa_outputs head (start and end logits) is new.
BERT's SQuAD recipe (Devlin et al. 2019): AdamW with peak learning rate 3e-5, 10% linear
warm-up then linear decay, batch 32, 2 epochs, dropout 0.1, windows of 384 pieces with a
stride of 128, questions cut at 64 pieces, answers of at most 30 pieces.

    python train.py --config configs/bert_qa.py --workdir runs/squad \\
        --config.init_from=checkpoints/bert-base-uncased \\
        --config.data.qa_train=train-v1.1.json --config.data.qa_dev=dev-v1.1.json
    python evaluate.py --workdir runs/squad            # dev exact match and F1

SQuAD 2.0 (unanswerable questions): add --config.data.version_2_with_negative=True.
Without data.qa_train the built-in story corpus is used (configs/bert_qa_demo.py).
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.data.qa.qa_data_config import add_qa_data_fields
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.tasks.bert.bert_task import FINE_TUNING_FIELDS
from jaxtrans.tasks.bert.qa_eval_section import qa_eval_section
from jaxtrans.tasks.run_config import bert_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The BertConfig fields fine-tuning may set; all others come from the checkpoint."""
    return dataclass_section(BertConfig, only=FINE_TUNING_FIELDS)


def get_config() -> ml_collections.ConfigDict:
    config = bert_run_config()
    config.task = "bert_question_answering"
    # The checkpoint to fine-tune: a BERT workdir or a Hugging Face checkpoint directory.
    config.init_from = ""
    config.model = get_model_config()
    # bfloat16 compute with float32 parameters, as configs/bert_base.py.
    config.model.dtype = "bfloat16"

    # Questions, contexts and answers: SQuAD files or the built-in stories, windows, spans.
    add_qa_data_fields(config.data)
    # Window length: [CLS] question [SEP] context [SEP], in pieces.
    config.data.max_seq_length = 384
    config.data.batch_size = 32

    config.optimizer.learning_rate = 3e-5
    config.optimizer.warmup_steps = 554  # 10% of num_steps

    config.train.num_steps = 5540  # 2 epochs of SQuAD 1.1's 88.6k windows at batch 32
    config.train.log_every = 50
    config.train.checkpoint_every = 1000
    config.train.eval_every = 2770  # once an epoch
    config.train.keep_checkpoints = 2

    # Answers chosen and scored: exact match and F1.
    config.eval = qa_eval_section()
    return config
