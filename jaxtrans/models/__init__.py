"""Models built from jaxtrans.nn blocks."""

from jaxtrans.models.transformer import Transformer, TransformerConfig

__all__ = ["Transformer", "TransformerConfig"]
