"""BERT named-entity recognition: a tag for every word, from CoNLL files (or the built-in
demo corpus), scored by entity-level precision / recall / F1 as conlleval counts them.

Data (``jaxtrans.data.ner.conll``): ``data.ner_train`` / ``ner_dev`` / ``ner_test`` in the tag
scheme ``data.tag_scheme`` (bio, iob1 or iobes). The model's labels are BIO tags of the
training file's entity types (O, B-T, I-T for each type T, kept comma-joined in
``data.labels``); every file's tags are converted to them through their entity spans, so
the three schemes train the same model. A Hugging Face model keeps its own labels
(id2label: BIO or IOBES). Each word is tagged at its first word piece
(``jaxtrans.data.ner.token_classification``); long sentences are cut into windows of whole
words and joined back before scoring, so every word is scored exactly once.

The loss is the mean cross entropy over words; ``accuracy`` is the share of words tagged
right. Precision, recall and F1 come from the predicted tags decoded into entities
(``jaxtrans.inference.entities``) sentence by sentence, host-side, so that they equal
conlleval's (and seqeval's) on the same tags.
"""

import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxtrans.data.bert import bert_pipeline
from jaxtrans.data.ner import conll, token_classification
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.data.tokenizers.words import split_words
from jaxtrans.errors import UserError
from jaxtrans.inference import entities
from jaxtrans.models.bert.bert_model import BertConfig, BertForTokenClassification
from jaxtrans.models.layer_stacks import graft_params
from jaxtrans.models.model_flops import bert_classification_flops
from jaxtrans.tasks.base import Batch, report_stem
from jaxtrans.tasks.bert import bert_init
from jaxtrans.tasks.bert.bert_task import (
    BertTask,
    check_sequence_length,
    resolve_run_config,
    start_fresh,
    start_from_checkpoint,
)


class BertTokenClassificationTask(BertTask):
    """A tag for every word from its first piece; loss = mean cross entropy over words."""

    name = "bert_token_classification"
    model_class = BertForTokenClassification
    splits = ("test", "dev")
    headline = ("accuracy",)
    shape_fields = (*BertTask.shape_fields, "num_labels")
    predicts = True
    huggingface_architectures = ("BertForTokenClassification",)
    head_params = ("classifier",)
    pretrained_data_defaults = {"max_seq_length": 128, "tag_scheme": "bio", "labels": ""}

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        source: bert_init.InitSource | None = None,
        train: list[conll.TaggedSentence] | None = None,
    ):
        """``source``: the checkpoint whose encoder ``initial_params`` grafts (None: keep
        fresh weights); ``train``: the training sentences, if already read."""
        super().__init__(run_config, model_config, tokenizer)
        self.source = source
        self.labels = [x for x in run_config.data.labels.split(",") if x]
        if not self.labels:
            raise UserError(
                "the model's tags are not known: a Hugging Face config.json needs id2label "
                "(e.g. O, B-PER, I-PER), or give --config.data.labels in model order"
            )
        if len(self.labels) != model_config.num_labels:
            raise UserError(
                f"the model has {model_config.num_labels} labels but data.labels (or "
                f"id2label) names {len(self.labels)}: {','.join(self.labels)!r}"
            )
        try:
            self.scheme = entities.label_scheme(self.labels)
        except ValueError as error:
            raise UserError(
                f"label {error}; an entity tagger's labels (data.labels, or a Hugging Face "
                "config.json id2label) must be BIO or IOBES tags"
            ) from None
        self.label_ids = {label: i for i, label in enumerate(self.labels)}
        self.data = token_classification.TaggedData(run_config.data)
        self._train = train
        self._splits: dict[str, Any] = {}
        self._outputs = jax.jit(self.outputs)
        check_sequence_length(model_config, run_config.data.max_seq_length)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str):
        """Model shapes and tokenizer from ``config.init_from``, or with an empty init_from a
        fresh model of ``config.model`` with the workdir's SentencePiece tokenizer (trained
        on the training sentences at the first start); labels from the training data."""
        train = token_classification.TaggedData(config.data).sentences("train")
        labels = token_classification.model_labels(config.data, train)
        if any("," in label for label in labels):
            raise UserError(f"labels {[x for x in labels if ',' in x]} contain commas")
        source = None
        if config.get("init_from", ""):
            source, tokenizer, model_config = start_from_checkpoint(
                config, workdir, num_labels=len(labels)
            )
        else:
            if "d_model" not in config.model:
                raise UserError(
                    "--config.init_from is required: a BERT workdir or a Hugging Face BERT "
                    "checkpoint directory to fine-tune (configs/bert_ner_demo.py trains a "
                    "fresh model instead)"
                )
            # SentencePiece, when trained, learns the training sentences.
            documents = lambda: [[" ".join(s.words) for s in train]]  # noqa: E731
            tokenizer, model_config = start_fresh(
                config, workdir, documents, num_labels=len(labels)
            )
        run_config = resolve_run_config(config, model_config)
        run_config.data.labels = ",".join(labels)
        return cls(run_config, model_config, tokenizer, source, train)

    # ---------------------------------------------------------------- the loop's calls

    def init_params(self, rng: jax.Array) -> Any:
        ids = jnp.ones((1, self.config.data.max_seq_length), jnp.int32)
        return self.model.init(rng, ids)["params"]

    def initial_params(self, params: Any) -> Any:
        """Embeddings and encoder from the checkpoint; the classifier stays fresh."""
        if self.source is None:
            return params
        return graft_params(params, self.source.encoder_params())

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {"words": jnp.sum(batch["label_weights"]).astype(jnp.float32)}

    def logits(self, params, batch: Batch, rng=None, deterministic: bool = True):
        """float32 [batch, length, num_labels]."""
        return self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            deterministic=deterministic,
            rngs=None if rng is None else {"dropout": rng},
        )

    def sums(self, logits: jnp.ndarray, batch: Batch) -> dict[str, jnp.ndarray]:
        """Summed loss, right tags and labelled words (first pieces) of a batch."""
        weights = batch["label_weights"].astype(jnp.float32)
        log_probs = jax.nn.log_softmax(logits)
        nll = -jnp.take_along_axis(log_probs, batch["labels"][..., None], axis=-1)[..., 0]
        right = (jnp.argmax(logits, axis=-1) == batch["labels"]).astype(jnp.float32)
        return {
            "loss": jnp.sum(nll * weights),
            "correct": jnp.sum(right * weights),
            "words": jnp.sum(weights),
            "tokens": jnp.sum(batch["attention_mask"]).astype(jnp.float32),
        }

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        return self.sums(self.logits(params, batch, rng, deterministic), batch)

    def objective(self, sums, counts):
        return sums["loss"] / jnp.maximum(counts["words"], 1.0)

    def summarize(self, sums):
        words = jnp.maximum(sums["words"], 1.0)
        return {
            "loss": sums["loss"] / words,
            "accuracy": sums["correct"] / words,
            "tokens": sums["tokens"],
        }

    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        if self._train is None:
            self._train = self.data.sentences("train")
        windows = self.windows(self._train, "train")
        return token_classification.training_batches(
            windows,
            max_seq_length=self.config.data.max_seq_length,
            pad_id=self.tokenizer.pad_id,
            batch_size=bert_pipeline.local_batch_size(self.config.data.batch_size, process_count),
            seed=seed,
            process_index=process_index,
            process_count=process_count,
        )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every window of "dev" or "test" once, in order; None without data for it."""
        found = self.split_data(split)
        return found and found[2]

    def extra_eval(self, params, step: int, rows=None) -> dict[str, Any]:
        """Dev entity precision, recall and F1 (the loop adds loss and accuracy), from a
        pass of its own over the dev batches: the loop's pass returns only sums."""
        if self.split_data("dev") is None:
            return {}
        _, gold, predicted, _, _ = self.tag_split("dev", params)
        return entities.count_entities(gold, predicted).scores()

    def step_flops(self) -> float:
        data = self.config.data
        return bert_classification_flops(self.model_config, data.batch_size, data.max_seq_length)

    # ------------------------------------------------------------------- tagging words

    def gold_ids(self, sentence: conll.TaggedSentence) -> list[int]:
        """The sentence's tags as label ids: its entities written in the model's scheme."""
        ids = []
        for i, tag in enumerate(entities.convert_tags(sentence.tags, self.scheme)):
            if tag not in self.label_ids:
                raise UserError(
                    f"{sentence.location(i)}: the model has no label {tag} (entity types "
                    f"{', '.join(sorted({x[2:] for x in self.labels if x != 'O'}))}); "
                    "tag the file with those types"
                )
            ids.append(self.label_ids[tag])
        return ids

    def windows(self, sentences, split: str, labelled: bool = True):
        """Rows of the sentences (TaggedSentence, or word lists when not ``labelled``)."""
        words = [s.words for s in sentences] if labelled else sentences
        labels = [self.gold_ids(s) for s in sentences] if labelled else None
        data = self.config.data
        windows, split_count = token_classification.sentence_windows(
            self.tokenizer, words, data.max_seq_length, labels
        )
        if split_count:
            print(
                f"{split}: {split_count} of {len(words)} sentences are longer than "
                f"max_seq_length={data.max_seq_length} pieces; each is cut into windows of "
                "whole words (every word keeps its tag)",
                file=sys.stderr,  # stdout may carry --input answers
            )
        return windows

    def split_data(self, split: str):
        """(sentences, windows, batches) of "dev" or "test"; None without data for it."""
        self.check_split(split)
        if split not in self._splits:
            sentences = self.data.sentences(split)
            self._splits[split] = sentences and self.batched(sentences, split)
        return self._splits[split] or None

    def batched(self, sentences, split: str, labelled: bool = True, batch_size=None):
        """(sentences, their windows, evaluation batches of ``batch_size`` rows, default
        eval.batch_size); TaggedSentences, or word lists when not ``labelled``."""
        windows = self.windows(sentences, split, labelled)
        batches = token_classification.evaluation_batches(
            windows,
            max_seq_length=self.config.data.max_seq_length,
            pad_id=self.tokenizer.pad_id,
            batch_size=batch_size or self.config.eval.batch_size,
        )
        return sentences, windows, batches

    def outputs(self, params, batch: Batch):
        """Sums of the batch, and at every position the most probable label and its
        probability ([batch, length] each)."""
        logits = self.logits(params, batch)
        probs = jax.nn.softmax(logits)
        return self.sums(logits, batch), jnp.argmax(logits, -1), jnp.max(probs, -1)

    def run(self, params, windows, batches, num_words: Sequence[int]):
        """-> summed sums, and each sentence's [num_words] label ids and probabilities."""
        results = [jax.device_get(self._outputs(params, batch)) for batch in batches]
        totals = jax.tree.map(lambda *x: np.sum(x, axis=0), *[r[0] for r in results])
        ids, probs = (np.concatenate([r[i] for r in results]) for i in (1, 2))
        ids = token_classification.word_predictions(windows, ids, num_words)
        return totals, ids, token_classification.word_predictions(windows, probs, num_words)

    def tag_split(self, split: str, params):
        """Tag a split: (sentences, gold tags, predicted tags, probabilities, sums)."""
        sentences, windows, batches = self.split_data(split)
        totals, ids, probs = self.run(params, windows, batches, [len(s.words) for s in sentences])
        predicted = [[self.labels[i] for i in row] for row in ids]
        return sentences, [list(s.tags) for s in sentences], predicted, probs, totals

    # ------------------------------------------------------------------- evaluate.py

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Loss, word accuracy and entity precision / recall / F1 (overall and by type) of
        ``split`` to OUTDIR/{split}-step{N}[-avgK].json; returns the report."""
        if self.split_data(split) is None:
            raise UserError(
                f"{self.workdir or self.pretrained_path}: its config names no {split} data "
                f"to evaluate (--config.data.ner_{split})"
            )
        restored = self.restore_params(checkpoint)
        sentences, gold, predicted, _, totals = self.tag_split(split, restored.params)
        counts = entities.count_entities(gold, predicted)
        summary = {k: float(v) for k, v in jax.device_get(self.summarize(totals)).items()}
        del summary["tokens"]
        metrics = {**counts.scores(), "accuracy": summary["accuracy"], "loss": summary["loss"]}
        by_type = entities.count_entities_by_type(gold, predicted)
        report: dict[str, Any] = {
            "task": self.name,
            "split": split,
            "step": restored.step,
            "checkpoint": restored.description,
            "sentences": len(sentences),
            "words": int(totals["words"]),
            **metrics,
            "entities": {"correct": counts.correct, "predicted": counts.predicted,
                         "gold": counts.gold},
            "by_type": {t: {**c.scores(), "gold": c.gold} for t, c in by_type.items()},
            "labels": self.labels,
        }  # fmt: skip
        outdir = self.outdir(outdir)
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, report_stem(split, restored) + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(
            f"{split} ({len(sentences)} sentences, {counts.gold} entities, "
            f"{restored.description}): {shown}\nwrote {path}"
        )
        return report

    def predict(self, lines: Sequence[str], *, checkpoint="latest", options=None) -> list[str]:
        """The entities of each line of raw text, one JSON object a line:
        ``{"text": LINE, "entities": [{"entity", "text", "start", "end", "score"}]}`` with
        ``LINE[start:end] == text``. Words are cut as BERT cuts them
        (``data.words.split_words``) and tagged at their first piece; ``score`` is the mean,
        over the entity's words, of the probability of the tag chosen for the word. A
        blank line has no words and no entities."""
        restored = self.restore_params(checkpoint)
        words = [split_words(line) for line in lines]
        batch_size = (options or {}).get("batch_size") or self.config.eval.batch_size
        _, windows, batches = self.batched(
            [[w.text for w in ws] for ws in words], "--input", False, batch_size
        )
        ids = probs = [np.zeros(0, np.int32) for _ in lines]
        if batches:
            _, ids, probs = self.run(restored.params, windows, batches, [len(w) for w in words])
        out = []
        for line, ws, row, p in zip(lines, words, ids, probs, strict=True):
            found = []
            for e in entities.entity_spans([self.labels[i] for i in row]):
                start, end = ws[e.start].start, ws[e.end - 1].end
                score = round(float(np.mean(p[e.start : e.end])), 4)
                found.append(
                    {"entity": e.type, "text": line[start:end], "start": start, "end": end,
                     "score": score}
                )  # fmt: skip
            out.append(json.dumps({"text": line, "entities": found}, ensure_ascii=False))
        return out
