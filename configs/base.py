"""Transformer base (Vaswani et al. 2017, Table 3): 512/8/2048, 6+6 layers, dropout 0.1."""

import ml_collections


def get_model_config() -> ml_collections.ConfigDict:
    """Fields of jaxtrans.models.TransformerConfig; vocab_size comes from the tokenizer."""
    model = ml_collections.ConfigDict()
    # Width of the residual stream.
    model.d_model = 512
    # Attention heads.
    model.num_heads = 8
    # Feed-forward hidden width.
    model.d_ff = 2048
    # Encoder layers.
    model.num_encoder_layers = 6
    # Decoder layers.
    model.num_decoder_layers = 6
    # Dropout on embeddings and residual branches (paper P_drop).
    model.dropout_rate = 0.1
    # Dropout on attention weights.
    model.attention_dropout_rate = 0.1
    # Dropout after the feed-forward activation.
    model.activation_dropout_rate = 0.1
    # Feed-forward activation: relu | gelu | gelu_tanh.
    model.activation = "relu"
    # LayerNorm placement: post (paper) | pre.
    model.norm = "post"
    # Positions: sinusoidal (paper) | learned | rope.
    model.position = "sinusoidal"
    # RoPE frequency base.
    model.rope_base = 10000.0
    # Longest sequence the learned position table covers.
    model.max_len = 512
    # LayerNorm epsilon.
    model.layer_norm_epsilon = 1e-6
    # Attention kernel: xla | fused (jax.nn.dot_product_attention; needs attention dropout 0).
    model.attention_impl = "xla"
    # Recompute layer activations in the backward pass to save memory.
    model.remat = False
    # Compute dtype: float32, or bfloat16 on GPU/TPU (parameters stay float32).
    model.dtype = "float32"
    # Parameter storage dtype.
    model.param_dtype = "float32"
    # One embedding table for source and target (shared SentencePiece vocabulary).
    model.share_embeddings = True
    # Output projection tied to the target embedding.
    model.tie_output = True
    return model


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # Model shape and regularisation.
    config.model = get_model_config()
    return config
