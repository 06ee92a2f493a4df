"""PositionEncoding: the questions every part of the model that positions touch asks of
one kind of position encoding, each kind answering all of them (its own module here).

    asked by                          question
    BlockConfig                       check(): a setting this kind cannot run with
                                      fields: config fields only this kind reads
    the embeddings (Transformer, BERT) make_table(): its parameters, if any
                                      embed(positions, table): what is added to the tokens
    attention                         rotates, rotate(x, positions): queries and keys turned
                                      biases_attention, attention_bias(q_pos, kv_pos)
    the decoding cache                (keys are cached as rotate leaves them; a bias is
                                      asked with the cache slots' positions, slot = position)
    the decoding limits, length buckets, compile-ahead
                                      max_length(): the longest sequence it places
    the exporters                     encodings(params, rows): the table to write;
                                      rotary(): the rotation, described; a format lacking
                                      either, or any attention bias, refuses the kind

An encoding is made from the model's config (``config.position_encoding``) and holds it,
so the questions take only arrays. Every method is abstract: a kind that forgets one
cannot be made (tests/unit/nn/test_position_encodings.py makes every registered kind and
checks its answers against one another).
"""

import abc
import dataclasses
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Rotary:
    """A rotation of queries and keys as an exporter writes it: dimension i of a head is
    paired with i + head_dim / 2 (``interleaved=False``; True: with i + 1) and the pair
    turns by position * base^(-2i / head_dim), over every dimension of the head."""

    base: float
    interleaved: bool = False


@dataclasses.dataclass(frozen=True)
class PositionEncoding(abc.ABC):
    """One kind of position encoding for one model (``config``, a BlockConfig).

    Shapes: position ids [batch, length] int; queries and keys [batch, length, heads,
    head_dim]; embeddings [batch, length, d_model].
    """

    # The model's config (a BlockConfig or a subclass: TransformerConfig, BertConfig).
    config: Any
    # The name model.position gives this kind.
    name: ClassVar[str]
    # Config fields only this kind reads (e.g. rope_base): set away from their defaults
    # for another kind they would do nothing, which BlockConfig refuses.
    fields: ClassVar[tuple[str, ...]] = ()
    # Whether attention turns queries and keys (rotate) before the scores.
    rotates: ClassVar[bool]
    # Whether attention adds attention_bias to the scores (only the xla kernel can).
    biases_attention: ClassVar[bool]

    @abc.abstractmethod
    def check(self) -> None:
        """ValueError naming a setting of the config this kind cannot run with."""

    @abc.abstractmethod
    def make_table(self) -> nn.Module | None:
        """A new module holding this kind's parameters, None for a kind without any; a model
        assigns it under its own name (source_positions, position_embeddings) and passes
        it back to embed."""

    @abc.abstractmethod
    def embed(self, positions: jnp.ndarray, table: nn.Module | None) -> jnp.ndarray | None:
        """What is added to the token embeddings at ``positions``: [batch, length,
        d_model], or None (nothing is added). ``table``: make_table()'s module, bound."""

    @abc.abstractmethod
    def rotate(self, x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
        """Queries or keys [batch, length, heads, head_dim] as attention uses them (x itself
        where the kind does not rotate); keys are cached so."""

    @abc.abstractmethod
    def attention_bias(
        self, q_positions: jnp.ndarray, kv_positions: jnp.ndarray
    ) -> jnp.ndarray | None:
        """float32 [batch, heads, q_len, kv_len] added to the attention scores (before the
        mask and softmax), or None; query and key positions [batch, q_len] and
        [batch | 1, kv_len]."""

    @abc.abstractmethod
    def max_length(self) -> int | None:
        """The longest sequence the model can place, None for no limit (a learned table
        ends at its last row)."""

    @abc.abstractmethod
    def encodings(self, params: Any, rows: int) -> np.ndarray | None:
        """What embed adds at positions 0 .. rows - 1 as float32 [rows, d_model], for an
        exporter to write as a table, or None where nothing is added; ``params``: the
        make_table() module's parameters (None without)."""

    @abc.abstractmethod
    def rotary(self) -> Rotary | None:
        """The rotation ``rotate`` applies, described for an exporter; None where the kind
        does not rotate (or rotates in a way no Rotary describes)."""
