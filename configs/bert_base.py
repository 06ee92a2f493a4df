"""BERT-base pretraining (Devlin et al. 2019): 768/12/3072, 12 layers, masked LM + NSP.

AdamW (beta2 0.999, eps 1e-6, weight decay 0.01 on matrices only, not on biases or
LayerNorm), peak learning rate 1e-4 with 10k linear warm-up steps then linear decay to 0,
256 sequences of 128 tokens per step, 1M steps, dropout 0.1, gradients clipped at 1.0.
(BERT trains the last 10% of its steps at length 512: resume with
--config.data.max_seq_length=512 --config.data.max_predictions_per_seq=80.)

    python train.py --config configs/bert_base.py --workdir runs/bert_base \\
        --config.data.train=wiki.txt.gz,books.txt.gz --config.data.dev=heldout.txt

Text: one sentence a line, a blank line between documents. Without data.train the
built-in demo corpus is used (see configs/bert_demo.py). The SentencePiece vocabulary is
trained into the workdir, or --config.data.hf_checkpoint=DIR uses a checkpoint's vocab.txt.
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.data.bert.bert_data_config import get_bert_data_config
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.training.run_sections import mesh_section, optimizer_section, train_section


def get_model_config() -> ml_collections.ConfigDict:
    """BertConfig's fields (described there; its defaults are BERT-base), less vocab_size
    and pad_id, which come from the tokenizer."""
    return dataclass_section(BertConfig, exclude=("vocab_size", "pad_id"))


def get_eval_config() -> ml_collections.ConfigDict:
    evaluation = ml_collections.ConfigDict()
    # Examples per evaluation batch.
    evaluation.batch_size = 64
    # Held-out pretraining batches per evaluation (the same examples every time).
    evaluation.num_batches = 16
    return evaluation


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # What is trained: translation | bert_pretraining | bert_classification |
    # bert_token_classification | bert_question_answering (jaxtrans/tasks/).
    config.task = "bert_pretraining"
    # Seed of parameter initialisation, dropout, example making and shuffling.
    config.seed = 0
    # Model shape and regularisation.
    config.model = get_model_config()
    # Text, tokenizer, masking and batching (jaxtrans.data.bert.bert_data_config).
    config.data = get_bert_data_config()
    config.data.vocab_size = 30_000
    config.data.character_coverage = 0.9995
    config.data.max_seq_length = 128
    config.data.max_predictions_per_seq = 20
    config.data.batch_size = 256
    # Optimizer and learning-rate schedule.
    config.optimizer = optimizer_section()
    config.optimizer.name = "adamw"
    config.optimizer.b2 = 0.999
    config.optimizer.eps = 1e-6
    config.optimizer.weight_decay = 0.01
    config.optimizer.schedule = "linear"
    config.optimizer.learning_rate = 1e-4
    config.optimizer.warmup_steps = 10_000
    config.optimizer.clip_norm = 1.0
    # Steps, logging, checkpoints.
    config.train = train_section()
    config.train.num_steps = 1_000_000
    config.train.checkpoint_every = 10_000
    config.train.eval_every = 10_000
    # Device mesh.
    config.mesh = mesh_section()
    # Held-out MLM/NSP evaluation.
    config.eval = get_eval_config()
    return config
