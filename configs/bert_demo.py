"""A small BERT pretrained on the built-in demo corpus: a few minutes on a CPU.

    python train.py --config configs/bert_demo.py --workdir runs/bert_demo

2 layers of width 128 without dropout, sequences of 64 tokens, 32 per step, 1000 steps;
the held-out masked-LM and next-sentence accuracies are logged every 250 steps and reach
about 0.78 and 0.88 (docs/bert.md).
"""

import ml_collections

from jaxtrans.tasks.run_config import bert_run_config


def get_config() -> ml_collections.ConfigDict:
    config = bert_run_config()
    config.model.d_model = 128
    config.model.num_heads = 4
    config.model.d_ff = 512
    config.model.num_layers = 2
    config.model.max_len = 64
    # No dropout: the generated corpus is too large to overfit in 1000 steps, and a small
    # model without it learns the masked words about twice as fast (docs/bert.md).
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    # A CPU's recipe: float32 compute (bfloat16 is emulated on a CPU, slower), threefry
    # dropout masks; configs/bert_base.py's are for GPUs and TPUs.
    config.model.dtype = "float32"

    config.data.train = ""  # the built-in demo corpus
    config.data.vocab_size = 8000  # an upper bound: the demo text yields a few hundred
    config.data.character_coverage = 1.0
    config.data.max_seq_length = 64
    config.data.max_predictions_per_seq = 10
    config.data.batch_size = 32

    config.optimizer.learning_rate = 2e-3
    config.optimizer.warmup_steps = 100

    config.train.num_steps = 1000
    config.train.log_every = 50
    config.train.checkpoint_every = 500
    config.train.eval_every = 250
    config.train.keep_checkpoints = 2
    config.train.dropout_rng_impl = "threefry"

    config.eval.batch_size = 64
    config.eval.num_batches = 4
    return config
