"""jaxtrans: encoder-decoder Transformers and BERT in JAX/Flax."""

__version__ = "0.1.0"
