"""BERT fine-tuning for single-sentence or sentence-pair classification, from TSV/JSONL
files or a prepared TFDS GLUE task, starting from ``init_from`` (a pretraining workdir or
a Hugging Face checkpoint). Reports accuracy, and F1 of the second label for binary tasks;
labels each input line (``predict``).
"""

from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxtrans.data.bert import bert_pipeline, classification, glue
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_model import BertConfig, BertForClassification
from jaxtrans.models.layer_stacks import graft_params
from jaxtrans.models.model_flops import bert_classification_flops
from jaxtrans.tasks.base import Batch
from jaxtrans.tasks.bert import bert_init, bert_predict
from jaxtrans.tasks.bert.bert_objectives import classification_sums
from jaxtrans.tasks.bert.bert_task import (
    BertTask,
    check_sequence_length,
    resolve_run_config,
    start_from_checkpoint,
)


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


class BertClassificationTask(BertTask):
    """Sequence classification on the pooled [CLS] output; loss = mean cross entropy.
    Reports accuracy, and F1 of label 1 (the second label) for binary tasks."""

    name = "bert_classification"
    model_class = BertForClassification
    splits = ("test", "dev")
    headline = ("accuracy",)
    shape_fields = (*BertTask.shape_fields, "num_labels")
    predicts = True
    huggingface_architectures = ("BertForSequenceClassification",)
    head_params = ("classifier", "bert/pooler")

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        source: bert_init.InitSource | None = None,
        train_examples: list[classification.LabelledText] | None = None,
    ):
        """``source``: the checkpoint ``initial_params`` grafts (None: keep fresh weights)."""
        super().__init__(run_config, model_config, tokenizer)
        self.source = source
        self.labels = run_config.data.labels.split(",")
        self.data = ClassificationData(run_config.data)
        self._train_examples = train_examples
        self._splits: dict[str, list | None] = {}
        self._probabilities = jax.jit(self.probabilities)
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
        data = ClassificationData(config.data)
        train = data.examples("train")
        labels = data.labels(train)
        source, tokenizer, model_config = start_from_checkpoint(
            config, workdir, num_labels=len(labels)
        )
        run_config = resolve_run_config(config, model_config)
        run_config.data.labels = ",".join(labels)
        return cls(run_config, model_config, tokenizer, source, train)

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
        return classification.training_batches(
            self._train_examples,
            self.tokenizer,
            self.labels,
            max_seq_length=self.config.data.max_seq_length,
            batch_size=bert_pipeline.local_batch_size(self.config.data.batch_size, process_count),
            seed=seed,
            process_index=process_index,
            process_count=process_count,
        )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every example of "dev" or "test" once, in order (padding rows have weight 0);
        None when the config names no data for the split."""
        self.check_split(split)
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

    def report_extras(self) -> dict[str, Any]:
        return {"labels": self.labels}

    def probabilities(self, params, batch: Batch) -> jnp.ndarray:
        """The labels' probabilities of each row: float32 [batch, num_labels]."""
        logits = self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
        )
        return jax.nn.softmax(logits, axis=-1)

    def predict(self, lines: Sequence[str], *, checkpoint="latest", options=None) -> list[str]:
        """The label of each line (a TAB separates the texts of a pair task), encoded and
        truncated as the training examples are. One JSON object a line: ``{"text",
        ["text_b",] "label", "probability", "probabilities": {label: probability}}``, the
        label being the most probable."""
        limit = self.config.data.max_seq_length
        encode = classification.EncodeExample(self.tokenizer, self.labels, limit)
        rows, texts = [], []
        for number, line in enumerate(lines, 1):
            text, text_b = bert_predict.input_texts(line, number)
            row = encode(classification.LabelledText(self.labels[0], text, text_b))
            rows.append({**row, "attention_mask": np.ones_like(row["input_ids"])})
            texts.append(bert_predict.text_fields(text, text_b))
        size = bert_predict.batch_size(self.config, options)
        if not rows:
            return []
        restored = self.restore_params(checkpoint)
        length = bert_predict.padded_length(max(len(r["input_ids"]) for r in rows), limit)
        probabilities = bert_predict.run_batches(
            self._probabilities,
            restored.params,
            rows,
            size,
            dict.fromkeys(("input_ids", "token_type_ids", "attention_mask"), length),
            {"input_ids": self.tokenizer.pad_id},
        )
        records = []
        for fields, p in zip(texts, probabilities, strict=True):
            best = int(np.argmax(p))
            record = {
                **fields,
                "label": self.labels[best],
                "probability": bert_predict.probability(p[best]),
                "probabilities": dict(
                    zip(self.labels, map(bert_predict.probability, p), strict=True)
                ),
            }
            records.append(bert_predict.json_line(record))
        return records

    def step_flops(self) -> float:
        data = self.config.data
        return bert_classification_flops(self.model_config, data.batch_size, data.max_seq_length)
