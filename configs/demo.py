"""A small Transformer on the built-in demo corpus: trains to high BLEU in minutes on a CPU.

python train.py --config configs/demo.py --workdir runs/demo
python evaluate.py --workdir runs/demo
"""

import ml_collections

from jaxtrans.tasks.run_config import translation_run_config


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    config.model.d_model = 128
    config.model.num_heads = 4
    config.model.d_ff = 512
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.dropout_rate = 0.1
    config.model.attention_dropout_rate = 0.0
    config.model.activation_dropout_rate = 0.0
    config.model.layer_norm_epsilon = 1e-6
    config.model.max_len = 64
    # A CPU's recipe: float32 compute (bfloat16 is emulated on a CPU, slower), threefry
    # dropout masks; configs/base.py's are for GPUs and TPUs.
    config.model.dtype = "float32"

    config.data.tfds_name = ""  # the built-in demo corpus
    config.data.source_lang = ""
    config.data.target_lang = ""
    config.data.vocab_size = 1000
    config.data.character_coverage = 1.0
    config.data.max_source_length = 32
    config.data.max_target_length = 32
    config.data.batch_size = 64
    config.data.tokens_per_batch = 0

    # Peak learning rate 0.6 * 128^-0.5 * 150^-0.5 = 3.5e-3 at step 150.
    config.optimizer.noam_factor = 0.6
    config.optimizer.warmup_steps = 150

    config.train.num_steps = 600
    config.train.log_every = 50
    config.train.checkpoint_every = 200
    config.train.eval_every = 300
    config.train.keep_checkpoints = 3
    config.train.dropout_rng_impl = "threefry"

    config.eval.beam_size = 4
    config.eval.batch_size = 100
    config.eval.dev_sentences = 200
    return config
