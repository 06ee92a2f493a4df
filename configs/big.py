"""Transformer big (Vaswani et al. 2017, Table 3): 1024/16/4096, 6+6 layers, dropout 0.3."""

import ml_collections

from jaxtrans.tasks.run_config import translation_run_config


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    config.model.d_model = 1024
    config.model.num_heads = 16
    config.model.d_ff = 4096
    config.model.dropout_rate = 0.3
    config.model.attention_dropout_rate = 0.3
    config.model.activation_dropout_rate = 0.3
    # The paper's big model warms up over the same 4000 steps, for 300k steps.
    config.train.num_steps = 300_000
    return config
