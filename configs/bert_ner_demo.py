"""A small BERT tagger trained from scratch on the built-in entity corpus: under five
minutes on a CPU, nothing downloaded.

    python train.py --config configs/bert_ner_demo.py --workdir runs/ner_demo
    python evaluate.py --workdir runs/ner_demo                     # test entity P/R/F1
    echo "Talia Renvik flew from Port Elvara to Brastad ." | \\
        python evaluate.py --workdir runs/ner_demo --input -

The corpus (jaxtrans.data.ner.demo) holds invented people, places and organisations in
news-like sentences; dev and test use names held out of training. A fresh 2-layer model
of width 128 (no init_from) with a SentencePiece vocabulary trained on the training
sentences reaches a dev entity F1 above 0.9 (docs/bert.md).
"""

import ml_collections

from configs import bert_ner
from jaxtrans.config_sections import dataclass_section
from jaxtrans.models.bert.bert_model import BertConfig


def get_config() -> ml_collections.ConfigDict:
    config = bert_ner.get_config()
    # No checkpoint: a fresh model of the shape below (the vocabulary size and pad id come
    # from the tokenizer, the number of labels from the training data).
    config.init_from = ""
    config.model = dataclass_section(BertConfig, exclude=("vocab_size", "pad_id", "num_labels"))
    config.model.d_model = 128
    config.model.num_heads = 4
    config.model.d_ff = 512
    config.model.num_layers = 2
    config.model.max_len = 48
    config.model.dropout_rate = 0.1
    config.model.attention_dropout_rate = 0.0
    # A CPU's recipe: float32 compute (bfloat16 is emulated on a CPU, slower), threefry
    # dropout masks; configs/bert_ner.py's are for GPUs and TPUs.
    config.model.dtype = "float32"

    config.data.ner_demo_train_size = 3000
    config.data.ner_demo_eval_size = 500
    config.data.vocab_size = 2000  # an upper bound for SentencePiece
    config.data.character_coverage = 1.0
    config.data.max_seq_length = 48
    config.data.batch_size = 32

    config.optimizer.learning_rate = 1e-3
    config.optimizer.warmup_steps = 60

    config.train.num_steps = 600
    config.train.log_every = 50
    config.train.checkpoint_every = 600
    config.train.eval_every = 200
    config.train.keep_checkpoints = 1
    config.train.dropout_rng_impl = "threefry"

    config.eval.batch_size = 100
    return config
