"""The BERT tasks of the training loop (``config.task``):

bert_pretraining     masked-LM + next-sentence pretraining on plain text (or the demo corpus),
                     with a SentencePiece vocabulary trained into the workdir or the
                     WordPiece vocabulary of ``data.hf_checkpoint``;
bert_classification  fine-tuning for single-sentence or sentence-pair classification from
                     TSV/JSONL files or a prepared TFDS GLUE task, starting from
                     ``init_from`` (a pretraining workdir or a Hugging Face checkpoint).

Each task builds itself for a new or resumed run with ``from_config(config, workdir)``, and
for evaluating a finished run with ``from_run(run_config, workdir)`` (the saved config.json
and the workdir's own tokenizer; nothing is trained or downloaded).
"""

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxtrans.data import bert_pipeline, classification, glue
from jaxtrans.data.bert_tokenizer import BertTokenizer, load_or_train_bert_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert import BertConfig, BertForClassification, BertForPretraining
from jaxtrans.models.huggingface import graft_params
from jaxtrans.training import bert_init
from jaxtrans.training.bert_objectives import (
    classification_sums,
    pretraining_sums,
    summarize_pretraining,
)
from jaxtrans.training.tasks import Batch, Task

# Model fields that fix parameter shapes: a resumed run must keep them.
SHAPE_FIELDS = (
    "vocab_size",
    "type_vocab_size",
    "d_model",
    "num_heads",
    "d_ff",
    "num_layers",
    "position",
    "max_len",
)
# Model fields a fine-tuning run takes from its own config; every other field (the
# shapes, activation, LayerNorm placement and epsilon, pad id) comes from the checkpoint.
FINE_TUNING_FIELDS = (
    "dropout_rate",
    "attention_dropout_rate",
    "activation_dropout_rate",
    "classifier_dropout_rate",
    "attention_impl",
    "remat",
    "dtype",
    "param_dtype",
)


def bert_config(values: dict[str, Any]) -> BertConfig:
    try:
        return BertConfig.from_dict(values)
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from error


def resolve_run_config(
    config: ml_collections.ConfigDict, model_config: BertConfig
) -> ml_collections.ConfigDict:
    """The run config with every model field the run decided (what config.json keeps)."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model = ml_collections.ConfigDict(dataclasses.asdict(model_config))
    return resolved


def check_sequence_length(model_config: BertConfig, max_seq_length: int) -> None:
    if model_config.position == "learned" and max_seq_length > model_config.max_len:
        raise UserError(
            f"--config.data.max_seq_length={max_seq_length} exceeds the model's position "
            f"table (max_len={model_config.max_len}); use a shorter max_seq_length"
        )


class LoggedIterator:
    """A checkpointable batch iterator with the ``stats()`` the loop logs (none here)."""

    def __init__(self, iterator):
        self._iterator = iterator

    def __iter__(self) -> "LoggedIterator":
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._iterator)

    def get_state(self) -> dict[str, Any]:
        return self._iterator.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._iterator.set_state(state)

    def stats(self) -> dict[str, float]:
        return {}


def encoder_flops(config: BertConfig, batch: int, length: int) -> float:
    """Forward FLOPs of embeddings-to-encoder-output on [batch, length] (2 per multiply-add;
    attention is dense over the padded row)."""
    d, ff, tokens = config.d_model, config.d_ff, batch * length
    per_layer = tokens * (4 * 2 * d * d + 2 * 2 * d * ff) + 2 * 2 * batch * length**2 * d
    pooler = batch * 2 * d * d
    return config.num_layers * per_layer + pooler


# ---------------------------------------------------------------------------------------
# Pretraining


class BertPretrainingTask(Task):
    """Masked-LM + next-sentence pretraining; loss = mean MLM loss + mean NSP loss."""

    headline = ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")
    shape_fields = SHAPE_FIELDS

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        documents: list[list[str]] | None = None,
    ):
        """``documents``: the training text (lists of sentences), needed for training only."""
        super().__init__(run_config)
        self.run_config = run_config
        self.model_config = model_config
        self.model = BertForPretraining(model_config)
        self.tokenizer = tokenizer
        self.documents = documents
        self._dev_batches: list[Batch] | None = None
        check_sequence_length(model_config, run_config.data.max_seq_length)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str) -> "BertPretrainingTask":
        """Tokenizer: the workdir's; else the vocab.txt of ``data.hf_checkpoint`` copied in;
        else SentencePiece trained on the text. The model's vocabulary follows it."""
        documents = bert_pipeline.pretraining_documents(config.data, "train")
        if bert_init.has_run_tokenizer(workdir):
            tokenizer = bert_init.load_run_tokenizer(workdir)
        elif config.data.hf_checkpoint:
            files = bert_init.huggingface_tokenizer_files(config.data.hf_checkpoint)
            tokenizer = bert_init.install_tokenizer(files, workdir)
        else:
            tokenizer = load_or_train_bert_tokenizer(config.data, workdir, documents)
        model = config.model.to_dict()
        model.update(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id)
        model_config = bert_config(model)
        return cls(resolve_run_config(config, model_config), model_config, tokenizer, documents)

    @classmethod
    def from_run(cls, run_config: ml_collections.ConfigDict, workdir: str) -> "BertPretrainingTask":
        """The task of a trained workdir, for evaluation."""
        return cls(
            run_config,
            bert_config(run_config.model.to_dict()),
            bert_init.load_run_tokenizer(workdir),
        )

    def init_params(self, rng: jax.Array) -> Any:
        data = self.config.data
        return self.model.init(
            rng,
            jnp.ones((1, data.max_seq_length), jnp.int32),
            masked_positions=jnp.zeros((1, data.max_predictions_per_seq), jnp.int32),
        )["params"]

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {
            "mlm_tokens": jnp.sum(batch["masked_weights"]).astype(jnp.float32),
            "nsp_examples": jnp.asarray(batch["next_sentence_label"].shape[0], jnp.float32),
        }

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        mlm_logits, nsp_logits = self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            batch["masked_positions"],
            deterministic=deterministic,
            rngs=None if rng is None else {"dropout": rng},
        )
        sums = pretraining_sums(mlm_logits, nsp_logits, batch)
        sums["tokens"] = jnp.sum(batch["attention_mask"]).astype(jnp.float32)
        return sums

    def objective(self, sums, counts):
        # This micro-batch's share of both means of the whole step's batch.
        return sums["mlm_loss"] / jnp.maximum(counts["mlm_tokens"], 1.0) + sums[
            "nsp_loss"
        ] / jnp.maximum(counts["nsp_examples"], 1.0)

    def summarize(self, sums):
        metrics = summarize_pretraining(sums)
        del metrics["mlm_tokens"]
        metrics["tokens"] = sums["tokens"]
        return metrics

    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        if self.documents is None:
            self.documents = bert_pipeline.pretraining_documents(self.config.data, "train")
        return LoggedIterator(
            bert_pipeline.pretraining_train_iterator(
                self.config.data,
                self.tokenizer,
                self.documents,
                seed=seed,
                process_index=process_index,
                process_count=process_count,
            )
        )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Held-out batches of "dev" (``data.dev``, or the demo dev documents when training
        on the demo corpus); None when there is no held-out text."""
        if split != "dev":
            raise UserError(
                f"--split {split}: a pretraining run is evaluated on its held-out text; "
                "use --split dev"
            )
        data = self.config.data
        if data.train and not data.dev:
            return None
        if self._dev_batches is None:
            self._dev_batches = bert_pipeline.pretraining_eval_batches(
                data,
                self.tokenizer,
                bert_pipeline.pretraining_documents(data, "dev"),
                self.config.eval.num_batches,
                self.config.eval.batch_size,
            )
        return self._dev_batches

    def eval_batches(self) -> Iterable[Batch] | None:
        return self.split_batches("dev")

    def step_flops(self) -> float:
        cfg, data = self.model_config, self.config.data
        # The MLM head runs at every masked-position slot, padding slots included.
        predictions = data.batch_size * data.max_predictions_per_seq
        head = predictions * (2 * cfg.d_model * cfg.d_model + 2 * cfg.d_model * cfg.vocab_size)
        return 3 * (encoder_flops(cfg, data.batch_size, data.max_seq_length) + head)


# ---------------------------------------------------------------------------------------
# Classification


class ClassificationData:
    """The labelled examples of a run: TSV/JSONL files or a TFDS GLUE task, by split."""

    def __init__(self, data_config: ml_collections.ConfigDict):
        self.config = data_config
        self.tfds_name = data_config.get("classification_tfds", "")

    def examples(self, split: str) -> list[classification.LabelledText] | None:
        """The split's examples; None when the config names no source for it."""
        if self.tfds_name:
            return glue.glue_examples(self.tfds_name, split, self.config.get("tfds_data_dir", ""))
        path = self.config.get(f"classification_{split}", "")
        if not path:
            if split == "train":
                raise UserError(
                    "fine-tuning needs labelled data: set --config.data.classification_train "
                    "(and classification_dev) to .tsv/.jsonl files, or "
                    "--config.data.classification_tfds=glue/TASK"
                )
            return None
        return classification.read_labelled_texts(path)

    def labels(self, train: list[classification.LabelledText]) -> list[str]:
        if self.tfds_name and not self.config.labels:
            return glue.glue_labels(self.tfds_name, self.config.get("tfds_data_dir", ""))
        labels = bert_pipeline.classification_labels(self.config, train)
        if any("," in label for label in labels):
            raise UserError(f"labels {[x for x in labels if ',' in x]} contain commas; rename them")
        return labels


class BertClassificationTask(Task):
    """Sequence classification on the pooled [CLS] output; loss = mean cross entropy.
    Reports accuracy, and F1 of label 1 (the second label) for binary tasks."""

    headline = ("accuracy",)
    shape_fields = (*SHAPE_FIELDS, "num_labels")

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        source: bert_init.InitSource | None = None,
        train_examples: list[classification.LabelledText] | None = None,
    ):
        """``source``: the checkpoint ``initial_params`` grafts (None: keep fresh weights)."""
        super().__init__(run_config)
        self.run_config = run_config
        self.model_config = model_config
        self.model = BertForClassification(model_config)
        self.tokenizer = tokenizer
        self.source = source
        self.labels = run_config.data.labels.split(",")
        self.data = ClassificationData(run_config.data)
        self._train_examples = train_examples
        self._splits: dict[str, list | None] = {}
        check_sequence_length(model_config, run_config.data.max_seq_length)

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, workdir: str
    ) -> "BertClassificationTask":
        """Model shapes and tokenizer from ``config.init_from``; labels from the data."""
        if not config.get("init_from"):
            raise UserError(
                "--config.init_from is required: a BERT pretraining workdir or a Hugging "
                "Face BERT checkpoint directory to fine-tune"
            )
        source = bert_init.init_source(config.init_from)
        if config.data.get("hf_checkpoint"):
            raise UserError(
                "the vocabulary of a fine-tuning run comes from --config.init_from; "
                "leave --config.data.hf_checkpoint empty"
            )
        data = ClassificationData(config.data)
        train = data.examples("train")
        labels = data.labels(train)
        if bert_init.has_run_tokenizer(workdir):
            tokenizer = bert_init.load_run_tokenizer(workdir)
        else:
            tokenizer = bert_init.install_tokenizer(list(source.tokenizer_files), workdir)
        if tokenizer.vocab_size != source.config.vocab_size:
            raise UserError(
                f"the tokenizer of {config.init_from} has {tokenizer.vocab_size} pieces but "
                f"its model {source.config.vocab_size}; is it the vocabulary it was trained with?"
            )
        changes = {k: config.model[k] for k in FINE_TUNING_FIELDS if k in config.model}
        try:
            model_config = source.config.replace(num_labels=len(labels), **changes)
        except (ValueError, TypeError) as error:
            raise UserError(f"config.model: {error}") from error
        run_config = resolve_run_config(config, model_config)
        run_config.data.labels = ",".join(labels)
        return cls(run_config, model_config, tokenizer, source, train)

    @classmethod
    def from_run(
        cls, run_config: ml_collections.ConfigDict, workdir: str
    ) -> "BertClassificationTask":
        """The task of a trained workdir, for evaluation (init_from is not read)."""
        return cls(
            run_config,
            bert_config(run_config.model.to_dict()),
            bert_init.load_run_tokenizer(workdir),
        )

    def init_params(self, rng: jax.Array) -> Any:
        return self.model.init(rng, jnp.ones((1, self.config.data.max_seq_length), jnp.int32))[
            "params"
        ]

    def initial_params(self, params: Any) -> Any:
        """Embeddings, encoder and pooler from the checkpoint; the classifier stays fresh."""
        if self.source is None:
            return params
        return graft_params(params, self.source.encoder_params())

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {"examples": jnp.sum(batch["weight"]).astype(jnp.float32)}

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        logits = self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            deterministic=deterministic,
            rngs=None if rng is None else {"dropout": rng},
        )
        sums = classification_sums(logits, batch)
        weight = batch["weight"].astype(jnp.float32)
        sums["tokens"] = jnp.sum(batch["attention_mask"] * weight[:, None])
        if self.model_config.num_labels == 2:
            predicted = (jnp.argmax(logits, axis=-1) == 1).astype(jnp.float32) * weight
            actual = (batch["label"] == 1).astype(jnp.float32) * weight
            sums["true_positives"] = jnp.sum(predicted * actual)
            sums["predicted_positives"] = jnp.sum(predicted)
            sums["actual_positives"] = jnp.sum(actual)
        return sums

    def objective(self, sums, counts):
        return sums["loss"] / jnp.maximum(counts["examples"], 1.0)

    def summarize(self, sums):
        examples = jnp.maximum(sums["examples"], 1.0)
        metrics = {
            "loss": sums["loss"] / examples,
            "accuracy": sums["correct"] / examples,
            "tokens": sums["tokens"],
        }
        if "true_positives" in sums:
            # F1 = 2 TP / (2 TP + FP + FN) = 2 TP / (predicted + actual positives).
            positives = sums["predicted_positives"] + sums["actual_positives"]
            metrics["f1"] = 2 * sums["true_positives"] / jnp.maximum(positives, 1.0)
        return metrics

    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        if self._train_examples is None:
            self._train_examples = self.data.examples("train")
        return LoggedIterator(
            classification.training_batches(
                self._train_examples,
                self.tokenizer,
                self.labels,
                max_seq_length=self.config.data.max_seq_length,
                batch_size=bert_pipeline.local_batch_size(
                    self.config.data.batch_size, process_count
                ),
                seed=seed,
                process_index=process_index,
                process_count=process_count,
            )
        )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every example of "dev" or "test" once, in order (padding rows have weight 0);
        None when the config names no data for the split."""
        if split not in ("dev", "test"):
            raise UserError(f"--split {split}: use dev or test")
        if split not in self._splits:
            examples = self.data.examples(split)
            self._splits[split] = examples and list(
                classification.evaluation_batches(
                    examples,
                    self.tokenizer,
                    self.labels,
                    max_seq_length=self.config.data.max_seq_length,
                    batch_size=self.config.eval.batch_size,
                )
            )
        return self._splits[split] or None

    def eval_batches(self) -> Iterable[Batch] | None:
        return self.split_batches("dev")

    def step_flops(self) -> float:
        data = self.config.data
        return 3 * encoder_flops(self.model_config, data.batch_size, data.max_seq_length)
