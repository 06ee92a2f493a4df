"""Transformer big (Vaswani et al. 2017, Table 3): 1024/16/4096, 6+6 layers, dropout 0.3.

Dropout on residual branches and embeddings only, as the paper's P_drop and fairseq's
transformer_vaswani_wmt_en_de_big (attention and activation dropout 0, from configs/base.py).
"""

import ml_collections

from jaxtrans.tasks.run_config import translation_run_config


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    config.model.d_model = 1024
    config.model.num_heads = 16
    config.model.d_ff = 4096
    config.model.dropout_rate = 0.3
    # The paper's big model warms up over the same 4000 steps, for 300k steps.
    config.train.num_steps = 300_000
    return config
