"""The translation task: SentencePiece tokenizer, encoder-decoder Transformer, label-smoothed
cross entropy over non-pad targets, dev loss and dev BLEU."""

from collections.abc import Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans import data
from jaxtrans.errors import UserError
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.training import flops
from jaxtrans.training.loss import label_smoothed_cross_entropy
from jaxtrans.training.tasks import Batch, Task


def resolve_config(config: ml_collections.ConfigDict, tokenizer) -> ml_collections.ConfigDict:
    """The run config with the vocabulary sizes the tokenizer decided."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model.vocab_size = tokenizer.source_vocab_size
    resolved.model.target_vocab_size = None if tokenizer.shared else tokenizer.target_vocab_size
    return resolved


def model_config_of(run_config: ml_collections.ConfigDict) -> TransformerConfig:
    """The TransformerConfig of a (resolved) run config."""
    try:
        return TransformerConfig.from_dict(run_config.model.to_dict())
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from error


class TranslationTask(Task):
    headline = ("nll", "accuracy")
    shape_fields = (
        "vocab_size",
        "target_vocab_size",
        "d_model",
        "num_heads",
        "d_ff",
        "num_encoder_layers",
        "num_decoder_layers",
        "share_embeddings",
        "tie_output",
        "position",
        "max_len",
    )

    def __init__(
        self,
        config: ml_collections.ConfigDict,
        model_config: TransformerConfig,
        tokenizer: data.Tokenizer | None = None,
    ):
        """A task for a given model; ``tokenizer`` is needed for batches and evaluation."""
        super().__init__(config)
        self.tokenizer = tokenizer
        self.run_config = config
        self.model_config = model_config
        self.model = Transformer(model_config)
        self.smoothing = float(config.train.label_smoothing)
        self._dev_pairs: list | None = None

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str) -> "TranslationTask":
        """Train (or load) the workdir's tokenizer, then size the model by its vocabulary."""
        tokenizer = data.load_or_train_tokenizer(config.data, workdir)
        run_config = resolve_config(config, tokenizer)
        return cls(run_config, model_config_of(run_config), tokenizer)

    def init_params(self, rng: jax.Array) -> Any:
        data_config = self.config.data
        return self.model.init(
            rng,
            jnp.ones((1, data_config.max_source_length), jnp.int32),
            jnp.ones((1, data_config.max_target_length), jnp.int32),
        )["params"]

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {"tokens": jnp.sum(batch["target_out"] != self.model_config.pad_id)}

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        logits = self.model.apply(
            {"params": params},
            batch["source"],
            batch["target_in"],
            batch.get("source_segments"),
            batch.get("target_segments"),
            batch.get("source_positions"),
            batch.get("target_positions"),
            deterministic=deterministic,
            rngs=None if rng is None else {"dropout": rng},
        )
        weights = batch["target_out"] != self.model_config.pad_id
        return label_smoothed_cross_entropy(logits, batch["target_out"], weights, self.smoothing)

    def objective(self, sums, counts):
        return sums["loss"] / jnp.maximum(counts["tokens"], 1)

    def summarize(self, sums):
        tokens = jnp.maximum(sums["tokens"], 1.0)
        return {
            "loss": sums["loss"] / tokens,
            "nll": sums["nll"] / tokens,
            "accuracy": sums["correct"] / tokens,
            "tokens": sums["tokens"],
        }

    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        return data.train_iterator(
            self.config.data,
            self.tokenizer,
            seed=seed,
            process_index=process_index,
            process_count=process_count,
        )

    def dev_pairs(self) -> list | None:
        if self._dev_pairs is None:
            try:
                pairs = data.load_split(self.config.data, "dev")
            except UserError:
                return None
            limit = self.config.eval.dev_sentences
            self._dev_pairs = pairs[:limit] if limit else pairs
        return self._dev_pairs

    def eval_batches(self) -> Iterable[Batch] | None:
        pairs = self.dev_pairs()
        if not pairs:
            return None
        return (
            {k: v for k, v in batch.items() if k != "index"}
            for batch in data.eval_batches(
                pairs,
                self.tokenizer,
                self.config.eval.batch_size,
                self.config.data.max_source_length,
                self.config.data.max_target_length,
            )
        )

    def extra_eval(self, params, step: int) -> dict[str, Any]:
        """Dev BLEU and chrF with the evaluation decoder (beam search, sacreBLEU)."""
        pairs = self.dev_pairs()
        if not pairs or not self.config.eval.bleu_during_training:
            return {}
        from jaxtrans.inference.bleu import corpus_scores
        from jaxtrans.inference.translate import translate

        params = jax.device_get(params)
        hypotheses = translate(
            self.model_config,
            params,
            self.tokenizer,
            [p.source for p in pairs],
            batch_size=self.config.eval.batch_size,
            beam_size=self.config.eval.beam_size,
            alpha=self.config.eval.alpha,
            max_extra_length=self.config.eval.max_extra_length,
        )
        scores = corpus_scores(
            hypotheses, [p.target for p in pairs], target_lang=self.config.data.target_lang
        )
        return {"bleu": scores.bleu, "chrf": scores.chrf}

    def step_flops(self) -> float:
        data_config = self.config.data
        return flops.train_step_flops(
            self.model_config,
            data_config.batch_size,
            data_config.max_source_length,
            data_config.max_target_length,
        )
