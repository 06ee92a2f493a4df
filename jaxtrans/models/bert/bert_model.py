"""BERT: a bidirectional Transformer encoder with pretraining and classification heads.

input ids, token types, positions
  -> word + position + token-type embeddings -> LayerNorm -> dropout
  -> Encoder (Post-LN as the original BERT, or Pre-LN) -> sequence output [batch, length, d]
  -> pooler: tanh(Dense(sequence_output[:, 0]))            -> pooled output [batch, d]

Heads on top:
  masked LM      Dense -> GELU -> LayerNorm -> word embeddings^T + bias -> [.., vocab]
  next sentence  Dense(2) on the pooled output (0 = B follows A, 1 = B is random)
  classification dropout -> Dense(num_labels) on the pooled output
  token classes  dropout -> Dense(num_labels) on every position (no pooler)
  answer span    Dense(2) on every position: start and end logits (no pooler)

Parameter names follow the Hugging Face / original BERT layout one to one, so
``jaxtrans.models.bert.bert_from_huggingface`` can load released checkpoints.
"""

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from jaxtrans.nn import (
    BlockConfig,
    Encoder,
    default_positions,
    key_padding_attention_mask,
    padding_attention_mask,
)
from jaxtrans.nn.block_config import Activation, PositionKind
from jaxtrans.nn.feed_forward import ACTIVATIONS
from jaxtrans.nn.layers import dense, embedding, layer_norm
from jaxtrans.vocab import PAD_ID

# BERT initialises embedding tables with N(0, 0.02) rather than Xavier.
bert_embedding_init = nn.initializers.normal(stddev=0.02)


@dataclasses.dataclass(frozen=True)
class BertConfig(BlockConfig):
    """Block hyper-parameters plus BERT's vocabulary, depth and heads.

    The defaults are BERT-base (Devlin et al. 2019) as released: 768/12/3072, 12
    layers, exact GELU, Post-LN, learned positions up to 512, LayerNorm epsilon 1e-12.
    BlockConfig fields redeclared here hold BERT's values whatever BlockConfig's defaults
    are; their comments name the field of BERT's config.json.
    """

    # BERT's hidden_size.
    d_model: int = 768
    # BERT's num_attention_heads.
    num_heads: int = 12
    # BERT's intermediate_size.
    d_ff: int = 3072
    # BERT's hidden_dropout_prob.
    dropout_rate: float = 0.1
    # BERT's attention_probs_dropout_prob.
    attention_dropout_rate: float = 0.1
    # BERT has none: it drops only the feed-forward output.
    activation_dropout_rate: float = 0.0
    # BERT's is the exact GELU.
    activation: Activation = "gelu"
    position: PositionKind = "learned"
    # BERT's max_position_embeddings.
    max_len: int = 512
    # BERT's layer_norm_eps.
    layer_norm_epsilon: float = 1e-12
    # Word-piece vocabulary size.
    vocab_size: int = 30522
    # Number of token types (segments A and B).
    type_vocab_size: int = 2
    # Number of encoder layers (BERT's num_hidden_layers).
    num_layers: int = 12
    # Token id of padding; padded keys are never attended to.
    pad_id: int = PAD_ID
    # Classes of the sequence-classification head (unused in pretraining).
    num_labels: int = 2
    # Dropout before the classifier head; None means dropout_rate.
    classifier_dropout_rate: float | None = None

    def __post_init__(self):
        super().__post_init__()
        for field in ("vocab_size", "type_vocab_size", "num_layers", "num_labels"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be at least 1, got {getattr(self, field)}")


def gather_positions(x: jnp.ndarray, positions: jnp.ndarray) -> jnp.ndarray:
    """x [batch, length, d], positions [batch, num] ints -> [batch, num, d]."""
    return jnp.take_along_axis(x, positions[:, :, None], axis=1)


class BertModel(nn.Module):
    """Embeddings, encoder stack and pooler: the part every BERT task shares.

    Heads that read every position (token classification, question answering) build it
    with ``pooling=False``, as Hugging Face does (``add_pooling_layer=False``): the pooler
    then has no parameters and the pooled output is None.
    """

    config: BertConfig
    pooling: bool = True

    def setup(self):
        cfg = self.config
        self.word_embeddings = embedding(cfg, cfg.vocab_size, init=bert_embedding_init)
        # The position kind's parameters, where it has some (learned: BERT's table).
        self.position_embeddings = cfg.position_encoding.make_table()
        self.token_type_embeddings = embedding(cfg, cfg.type_vocab_size, init=bert_embedding_init)
        self.embeddings_norm = layer_norm(cfg)
        self.embeddings_dropout = nn.Dropout(cfg.dropout_rate)
        self.encoder = Encoder(cfg, cfg.num_layers)
        if self.pooling:
            self.pooler = dense(cfg, cfg.d_model, ("embed", "mlp"))

    def embed(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray,
        positions: jnp.ndarray,
        deterministic: bool,
    ) -> jnp.ndarray:
        """ids, token types, positions [batch, length] -> [batch, length, d_model]."""
        cfg = self.config
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        added = cfg.position_encoding.embed(positions, self.position_embeddings)
        if added is not None:  # rope: the encoder turns queries and keys instead
            x = x + added.astype(x.dtype)
        return self.embeddings_dropout(self.embeddings_norm(x), deterministic)

    def __call__(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        attention_mask: jnp.ndarray | None = None,
        positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[jnp.ndarray, jnp.ndarray | None]:
        """input_ids [batch, length] -> (sequence output [batch, length, d], pooled [batch, d]
        or None without a pooler).

        token_type_ids: [batch, length], 0 for segment A, 1 for B; zeros when None.
        attention_mask: [batch, length], 1 (True) for real tokens, 0 for padding; when
            None, every token that is not ``pad_id`` is real.
        positions: [batch, length] position ids; 0, 1, 2, ... when None.
        """
        cfg = self.config
        batch, length = input_ids.shape
        limit = cfg.position_encoding.max_length()
        if limit is not None and length > limit:
            raise ValueError(f"sequence length {length} exceeds max_len={limit}")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if attention_mask is None:
            mask = padding_attention_mask(input_ids, cfg.pad_id)
        else:
            mask = key_padding_attention_mask(attention_mask)
        if positions is None:
            positions = default_positions(batch, length)
        x = self.embed(input_ids, token_type_ids, positions, deterministic)
        x = self.encoder(x, mask, positions, deterministic)
        pooled = jnp.tanh(self.pooler(x[:, 0])) if self.pooling else None
        return x, pooled

    def word_embedding_table(self) -> jnp.ndarray:
        """[vocab, d_model]: the masked-LM output projection is tied to it."""
        return self.word_embeddings.embedding


class MaskedLMHead(nn.Module):
    """Dense -> activation -> LayerNorm -> tied vocabulary projection + bias."""

    config: BertConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, word_embeddings: jnp.ndarray) -> jnp.ndarray:
        """x [batch, n, d_model], word_embeddings [vocab, d_model] -> float32 [batch, n, vocab]."""
        cfg = self.config
        h = dense(cfg, cfg.d_model, ("embed", "mlp"), name="transform")(x)
        h = ACTIVATIONS[cfg.activation](h)
        h = layer_norm(cfg, "transform_norm")(h)
        logits = jnp.dot(h, word_embeddings.astype(h.dtype).T)
        bias = self.param(
            "output_bias",
            nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,),
            cfg.storage_dtype,
        )
        return logits.astype(jnp.float32) + bias.astype(jnp.float32)


class BertForPretraining(nn.Module):
    """BERT with the masked-LM and next-sentence heads."""

    config: BertConfig

    def setup(self):
        cfg = self.config
        self.bert = BertModel(cfg)
        self.mlm_head = MaskedLMHead(cfg)
        self.nsp_head = dense(cfg, 2, ("embed", None))

    def __call__(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        attention_mask: jnp.ndarray | None = None,
        masked_positions: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Returns (mlm_logits, nsp_logits), both float32.

        input_ids, token_type_ids, attention_mask: [batch, length] as for ``BertModel``.
        masked_positions: [batch, num_predictions] positions to predict; the vocabulary
            projection, the costliest matmul, then runs only there and mlm_logits is
            [batch, num_predictions, vocab]. When None it is [batch, length, vocab].
        nsp_logits: [batch, 2], class 0 = B follows A, class 1 = B is random.
        """
        x, pooled = self.bert(
            input_ids, token_type_ids, attention_mask, deterministic=deterministic
        )
        if masked_positions is not None:
            x = gather_positions(x, masked_positions)
        mlm_logits = self.mlm_head(x, self.bert.word_embedding_table())
        nsp_logits = self.nsp_head(pooled).astype(jnp.float32)
        return mlm_logits, nsp_logits


def classifier_dropout_rate(cfg: BertConfig) -> float:
    """The dropout before a classifier head: classifier_dropout_rate, else dropout_rate."""
    return cfg.dropout_rate if cfg.classifier_dropout_rate is None else cfg.classifier_dropout_rate


class BertForClassification(nn.Module):
    """BERT with a sequence-classification head on the pooled [CLS] output."""

    config: BertConfig

    def setup(self):
        cfg = self.config
        self.bert = BertModel(cfg)
        self.classifier_dropout = nn.Dropout(classifier_dropout_rate(cfg))
        self.classifier = dense(cfg, cfg.num_labels, ("embed", None))

    def __call__(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        attention_mask: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """[batch, length] inputs as for ``BertModel`` -> float32 logits [batch, num_labels]."""
        _, pooled = self.bert(
            input_ids, token_type_ids, attention_mask, deterministic=deterministic
        )
        pooled = self.classifier_dropout(pooled, deterministic)
        return self.classifier(pooled).astype(jnp.float32)


class BertForTokenClassification(nn.Module):
    """BERT with a classifier on every position's output (e.g. entity tags), as Hugging
    Face's ``BertForTokenClassification``: dropout -> Dense(num_labels), no pooler."""

    config: BertConfig

    def setup(self):
        cfg = self.config
        self.bert = BertModel(cfg, pooling=False)
        self.classifier_dropout = nn.Dropout(classifier_dropout_rate(cfg))
        self.classifier = dense(cfg, cfg.num_labels, ("embed", None))

    def __call__(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        attention_mask: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        """[batch, length] inputs as for ``BertModel`` -> float32 [batch, length, num_labels]."""
        x, _ = self.bert(input_ids, token_type_ids, attention_mask, deterministic=deterministic)
        x = self.classifier_dropout(x, deterministic)
        return self.classifier(x).astype(jnp.float32)


class BertForQuestionAnswering(nn.Module):
    """BERT for extractive question answering, as Hugging Face's
    ``BertForQuestionAnswering``: Dense(2) on every position gives the logits of the
    answer starting and ending there; no dropout on the head, no pooler."""

    config: BertConfig

    def setup(self):
        cfg = self.config
        self.bert = BertModel(cfg, pooling=False)
        self.qa_outputs = dense(cfg, 2, ("embed", None))

    def __call__(
        self,
        input_ids: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        attention_mask: jnp.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        """[batch, length] inputs as for ``BertModel`` -> (start_logits, end_logits), each
        float32 [batch, length]."""
        x, _ = self.bert(input_ids, token_type_ids, attention_mask, deterministic=deterministic)
        logits = self.qa_outputs(x).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]
