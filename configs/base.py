"""Transformer base on WMT14 EN->DE (Vaswani et al. 2017): 512/8/2048, 6+6 layers.

Shared 32k SentencePiece vocabulary, Adam(0.9, 0.98, 1e-9) with the Noam schedule
(warmup 4000), label smoothing 0.1, dropout 0.1, about 25k target tokens per step,
100k steps; evaluation with beam 4 and length penalty 0.6.

    python train.py --config configs/base.py --workdir runs/wmt_base

This is the package's default run config, jaxtrans.tasks.run_config.translation_run_config()
(its sections' fields and comments are the dataclasses'); the other translation configs
start from it.
"""

import ml_collections

from jaxtrans.tasks.run_config import translation_model_section, translation_run_config


def get_model_config() -> ml_collections.ConfigDict:
    """The model section (TransformerConfig's fields less those set at run time)."""
    return translation_model_section()


def get_config() -> ml_collections.ConfigDict:
    return translation_run_config()
