"""The encoder-decoder Transformer of "Attention Is All You Need".

source ids -> embed * sqrt(d_model) (+ positions) -> dropout -> Encoder -> memory
target ids -> embed * sqrt(d_model) (+ positions) -> dropout -> Decoder(memory) -> logits
(+ final_logits_bias when configured)

The options a Hugging Face Marian (opus-mt) checkpoint needs (jaxtrans.models.marian):
``sinusoidal_layout="halves"``, ``scale_embeddings``, ``final_logits_bias``,
``activation="silu"`` and ``decoder_start_embedding="zero"``; their defaults are the
paper's model.

Rows may hold several packed sentence pairs: pass ``*_segments`` (1, 2, ... per pair,
0 for padding) and tokens attend only within their own pair.

``config.replace(decode=True)`` makes the decoding variant: ``decode`` then takes one
step's tokens at a time and keeps keys/values in the "cache" and "memory_cache"
collections (jaxtrans.inference drives it).
"""

import dataclasses
import math
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp

from jaxtrans.nn import (
    BlockConfig,
    Decoder,
    Dropout,
    Encoder,
    default_positions,
    padding_attention_mask,
    padding_mask,
    segment_attention_mask,
)
from jaxtrans.nn.layers import dense, embedding
from jaxtrans.vocab import BOS_ID, PAD_ID


@dataclasses.dataclass(frozen=True)
class TransformerConfig(BlockConfig):
    """Block hyper-parameters plus the vocabulary and depth of the translation model."""

    # Source vocabulary size (and the target's when embeddings are shared).
    vocab_size: int = 32000
    # Target vocabulary size; None means the same as vocab_size.
    target_vocab_size: int | None = None
    # Number of encoder layers.
    num_encoder_layers: int = 6
    # Number of decoder layers.
    num_decoder_layers: int = 6
    # One embedding table for source and target (needs a shared vocabulary, e.g. one
    # SentencePiece model for both languages).
    share_embeddings: bool = True
    # Output projection tied to the target embedding: its transpose, no extra parameter
    # and no bias.
    tie_output: bool = True
    # Layout of the sinusoidal table (position="sinusoidal"): "interleaved", the sine and
    # cosine of each frequency side by side (the paper's formula), or "halves", all sines
    # then all cosines (Marian).
    sinusoidal_layout: Literal["interleaved", "halves"] = "interleaved"
    # Multiply token embeddings by sqrt(d_model) before adding positions (the paper;
    # Marian's scale_embedding); False adds positions to the raw embeddings.
    scale_embeddings: bool = True
    # A learned bias [target vocabulary] added to the output logits (Marian's
    # final_logits_bias); needs tie_output (the untied projection has its own bias).
    final_logits_bias: bool = False
    # What the decoder reads for its start token (BOS): "learned", BOS's own row of the
    # target embedding table; "zero", a zero vector (plus position 0), as Marian and
    # CTranslate2's Marian models start, which the Marian export needs (docs/pretrained.md).
    decoder_start_embedding: Literal["learned", "zero"] = "learned"
    # Token id of padding; padded keys are never attended to.
    pad_id: int = PAD_ID
    # Incremental decoding (inference only): the decoder caches keys/values between calls.
    decode: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.sinusoidal_layout not in ("interleaved", "halves"):
            raise ValueError(
                f"sinusoidal_layout={self.sinusoidal_layout!r} is not one of "
                "('interleaved', 'halves')"
            )
        if self.decoder_start_embedding not in ("learned", "zero"):
            raise ValueError(
                f"decoder_start_embedding={self.decoder_start_embedding!r} is not one of "
                "('learned', 'zero')"
            )
        for field in ("scale_embeddings", "final_logits_bias"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{field}={getattr(self, field)!r}: use True or False")
        if self.final_logits_bias and not self.tie_output:
            raise ValueError(
                "final_logits_bias=True needs tie_output=True: the untied output projection "
                "already has a bias"
            )
        if self.share_embeddings and self.output_vocab_size != self.vocab_size:
            raise ValueError(
                "share_embeddings needs one vocabulary: "
                f"vocab_size={self.vocab_size}, target_vocab_size={self.target_vocab_size}"
            )

    @property
    def output_vocab_size(self) -> int:
        return self.target_vocab_size or self.vocab_size


class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``__call__`` gives teacher-forced logits."""

    config: TransformerConfig

    def setup(self):
        cfg = self.config
        self.source_embedding = embedding(cfg, cfg.vocab_size)
        if cfg.share_embeddings:
            self.target_embedding = self.source_embedding
        else:
            self.target_embedding = embedding(cfg, cfg.output_vocab_size)
        # The position kind's parameters, where it has some (learned: a table per side).
        self.source_positions = cfg.position_encoding.make_table()
        self.target_positions = cfg.position_encoding.make_table()
        self.encoder = Encoder(cfg, cfg.num_encoder_layers)
        self.decoder = Decoder(cfg, cfg.num_decoder_layers, decode=cfg.decode)
        if not cfg.tie_output:
            self.output = dense(cfg, cfg.output_vocab_size, ("embed", "vocab"))
        if cfg.final_logits_bias:
            self.logits_bias = self.param(
                "final_logits_bias",
                nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                (cfg.output_vocab_size,),
                cfg.storage_dtype,
            )
        self.embedding_dropout = Dropout(cfg.dropout_rate)

    def _embed(
        self,
        table: nn.Embed,
        position_table: nn.Module | None,
        ids: jnp.ndarray,
        positions: jnp.ndarray,
        deterministic: bool,
        zero_start: bool = False,
    ) -> jnp.ndarray:
        """ids [batch, length] -> [batch, length, d_model]; ``zero_start``: BOS embeds as a
        zero vector (decoder_start_embedding="zero"), positions are still added."""
        cfg = self.config
        x = table(ids)
        if zero_start:
            x = jnp.where((ids == BOS_ID)[..., None], jnp.zeros((), x.dtype), x)
        if cfg.scale_embeddings:
            x = x * jnp.asarray(math.sqrt(cfg.d_model), cfg.compute_dtype)
        added = cfg.position_encoding.embed(positions, position_table)
        if added is not None:  # rope: attention turns queries and keys instead
            x = x + added.astype(x.dtype)
        return self.embedding_dropout(x, deterministic)

    def encode(
        self,
        source: jnp.ndarray,
        source_segments: jnp.ndarray | None = None,
        source_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """source [batch, src_len] ids -> memory [batch, src_len, d_model]."""
        cfg = self.config
        # Masks with their structure (padding or segments), which the splash and cuDNN
        # kernels take (jaxtrans.nn.attention_kernels); xla takes the boolean array.
        if source_segments is None:
            mask = padding_attention_mask(source, cfg.pad_id)
        else:
            mask = segment_attention_mask(source_segments)
        if source_positions is None:
            source_positions = default_positions(*source.shape, source_segments)
        x = self._embed(
            self.source_embedding, self.source_positions, source, source_positions, deterministic
        )
        return self.encoder(x, mask, source_positions, deterministic)

    def decode(
        self,
        memory: jnp.ndarray | None,
        source: jnp.ndarray,
        target: jnp.ndarray,
        source_segments: jnp.ndarray | None = None,
        target_segments: jnp.ndarray | None = None,
        target_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
        return_hidden: bool = False,
    ) -> jnp.ndarray:
        """Decoder inputs target [batch, tgt_len] -> float32 logits [batch, tgt_len, vocab].

        ``source`` ids (or ``source_segments``) say which memory positions are real.
        ``return_hidden``: the decoder's last states [batch, tgt_len, d_model] (in the
        compute dtype) instead, the logits' input, for a loss that projects them itself
        with ``output_projection()`` (jaxtrans.training.chunked_loss).

        With ``config.decode``: ``target`` holds the tokens of the next step(s) only,
        ``target_positions`` their position ids, and ``memory=None`` reuses the
        cross-attention keys/values cached by the call that was given the memory.
        """
        cfg = self.config
        if cfg.decode:
            if target_segments is not None or target_positions is None:
                raise ValueError("decode mode needs target_positions and takes no segments")
            self_mask = None  # the self-attention cache decides which slots are visible
            cross_mask = padding_mask(source, cfg.pad_id)
        elif target_segments is None:
            self_mask = padding_attention_mask(target, cfg.pad_id, causal=True)
            cross_mask = padding_attention_mask(source, cfg.pad_id)
        else:
            self_mask = segment_attention_mask(target_segments, causal=True)
            cross_mask = segment_attention_mask(target_segments, source_segments)
        if target_positions is None:
            target_positions = default_positions(*target.shape, target_segments)
        zero_start = cfg.decoder_start_embedding == "zero"
        y = self._embed(
            self.target_embedding,
            self.target_positions,
            target,
            target_positions,
            deterministic,
            zero_start,
        )
        y = self.decoder(y, memory, self_mask, cross_mask, target_positions, deterministic)
        if return_hidden:
            return y
        logits = self.target_embedding.attend(y) if cfg.tie_output else self.output(y)
        logits = logits.astype(jnp.float32)
        if cfg.final_logits_bias:
            logits = logits + self.logits_bias.astype(jnp.float32)
        return logits

    def output_projection(self) -> tuple[jnp.ndarray, jnp.ndarray | None]:
        """(kernel [d_model, vocab], bias [vocab] or None) in the parameters' dtype: decode's
        logits are hidden @ kernel (+ bias), the tied embedding transposed or the untied
        dense layer's kernel and bias, with final_logits_bias as the bias when configured.
        Reads the parameters only; call it in the same apply as the decoder to
        differentiate through them."""
        cfg = self.config
        if not cfg.tie_output:
            if self.is_initializing() and not self.output.has_variable("params", "kernel"):
                self.output(jnp.zeros((1, cfg.d_model), cfg.compute_dtype))
            params = nn.meta.unbox(self.output.variables["params"])
            return params["kernel"], params["bias"]
        bias = self.logits_bias if cfg.final_logits_bias else None
        return jnp.transpose(self.target_embedding.embedding), bias

    def __call__(
        self,
        source: jnp.ndarray,
        target: jnp.ndarray,
        source_segments: jnp.ndarray | None = None,
        target_segments: jnp.ndarray | None = None,
        source_positions: jnp.ndarray | None = None,
        target_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
        return_hidden: bool = False,
    ) -> jnp.ndarray:
        """Teacher forcing: source [batch, src_len], target inputs [batch, tgt_len] -> logits
        (``return_hidden``: the decoder's last states, see decode)."""
        memory = self.encode(source, source_segments, source_positions, deterministic)
        return self.decode(
            memory,
            source,
            target,
            source_segments,
            target_segments,
            target_positions,
            deterministic,
            return_hidden,
        )
