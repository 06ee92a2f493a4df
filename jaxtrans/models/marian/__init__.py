"""Marian (opus-mt): config.json, Hugging Face directories in and out.

marian_config.py           config.json -> TransformerConfig, refusing what the model lacks
marian_from_huggingface.py a Marian directory -> TransformerConfig + params
marian_to_huggingface.py   the inverse: Transformer params -> Marian state dict + config.json
"""

from jaxtrans.models.marian.marian_from_huggingface import from_huggingface, marian_to_model_ids

__all__ = ["from_huggingface", "marian_to_model_ids"]
