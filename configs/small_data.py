"""A small corpus (10k-100k pairs) and a fixed wall-clock budget on one device.

The recipe behind the "Time to BLEU" rows of docs/benchmarks.md: each setting below was
chosen by dev BLEU at a fixed budget on the zh-en gettext corpus (91k pairs); the runs
that chose it are in the table there. In short:

- Pre-LN, so a high peak learning rate (2e-3) is stable from the first steps (Post-LN
  at the same rate did not learn);
- a short linear warm-up (100 steps) and a linear decay to 0 exactly when the budget is
  spent (train.max_minutes with num_steps=0: the step count is estimated from the step
  time);
- 2,048 packed token slots a step: 4,096 made half the updates and reached less (dev
  BLEU greedy 2.8 against 5.5), 1,024 the same (5.2);
- no dropout: within a budget that sees the corpus once or twice, dropout 0.1 cost
  nearly half the dev BLEU (greedy 5.5 against 9.9). Give it back
  (--config.model.dropout_rate=0.1) when the budget covers many epochs.

    python train.py --config configs/small_data.py --workdir runs/small \\
        --config.data.train=train.tsv --config.data.dev=dev.tsv --config.data.test=test.tsv \\
        --config.data.source_lang=zh --config.data.target_lang=en --config.train.max_minutes=30
    python evaluate.py --workdir runs/small
"""

import ml_collections

from jaxtrans.tasks.run_config import translation_run_config


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    # The seeds' small shape: 256 wide, 4 heads, 1024 feed-forward, 3 + 3 layers.
    config.model.d_model = 256
    config.model.num_heads = 4
    config.model.d_ff = 1024
    config.model.num_encoder_layers = 3
    config.model.num_decoder_layers = 3
    config.model.norm = "pre"
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    config.model.activation_dropout_rate = 0.0
    config.model.max_len = 128
    # A CPU's recipe: float32 compute (bfloat16 is emulated on a CPU, slower), threefry
    # dropout masks; configs/base.py's are for GPUs and TPUs.
    config.model.dtype = "float32"

    config.data.tfds_name = ""  # local files: set data.train / data.dev / data.test
    config.data.vocab_size = 8_000
    config.data.character_coverage = 0.9995
    config.data.max_source_length = 64
    config.data.max_target_length = 64
    config.data.batch_size = 0  # from tokens_per_batch
    config.data.tokens_per_batch = 2_048

    config.optimizer.schedule = "linear"
    config.optimizer.learning_rate = 2e-3
    config.optimizer.warmup_steps = 100

    # Until the budget is spent; the linear schedule ends with it.
    config.train.num_steps = 0
    config.train.max_minutes = 30.0
    config.train.log_every = 100
    config.train.checkpoint_every = 500
    config.train.eval_every = 0
    config.train.keep_checkpoints = 5
    config.train.dropout_rng_impl = "threefry"

    config.eval.beam_size = 4
    config.eval.alpha = 1.0
    config.eval.batch_size = 100
    config.eval.dev_sentences = 200
    return config
