"""BERT fine-tuning for extractive question answering (SQuAD 1.1 / 2.0): the answer is a
span of the context, predicted by a start and an end logit on every piece.

Data: SQuAD JSON files (``data.qa_train``, ``qa_dev``, ``qa_test``; ``jaxtrans.data.qa.squad``)
or, when ``qa_train`` is empty, the built-in story corpus (``jaxtrans.data.qa.demo``).
Long contexts are read in windows (``jaxtrans.data.qa.qa_features``); the answer of an
example is the best span over all its windows (``jaxtrans.inference.qa_spans``), scored by
the official SQuAD exact match and F1 (``jaxtrans.inference.squad_metrics``).

The training loop's dev evaluation sums the loss and the start / end position accuracy
of the windows (``loss_sums``) and adds exact match and F1 of the dev questions
(``extra_eval``); ``evaluate`` writes both, with the predictions file the official
evaluation script reads.
"""

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxtrans.config_sections import section_values
from jaxtrans.data.iterators import local_batch_size
from jaxtrans.data.qa import qa_features
from jaxtrans.data.qa.qa_data_config import add_qa_data_fields
from jaxtrans.data.qa.splits import check_version, read_split
from jaxtrans.data.qa.squad import QAExample, gold_answers, parse_question_line
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer
from jaxtrans.data.tokenizers.words import split_words
from jaxtrans.errors import UserError
from jaxtrans.inference.qa_spans import choose_span
from jaxtrans.inference.squad_metrics import squad_scores
from jaxtrans.models.bert.bert_model import BertConfig, BertForQuestionAnswering
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
from jaxtrans.tasks.bert.qa_eval_section import QuestionAnsweringEvalConfig


class BertQuestionAnsweringTask(BertTask):
    """Start and end logits on every piece; loss = mean over windows of the start and end
    cross entropies' mean (Hugging Face's ``BertForQuestionAnswering`` loss)."""

    name = "bert_question_answering"
    model_class = BertForQuestionAnswering
    splits = ("dev", "test")
    headline = ("start_accuracy", "end_accuracy")
    predicts = True
    huggingface_architectures = ("BertForQuestionAnswering",)
    head_params = ("qa_outputs",)
    pretrained_data_defaults = {
        "max_seq_length": 384,
        **add_qa_data_fields(ml_collections.ConfigDict()).to_dict(),
    }

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        source: bert_init.InitSource | None = None,
        train_examples: list[QAExample] | None = None,
    ):
        """``source``: the checkpoint ``initial_params`` grafts (None: keep fresh weights)."""
        super().__init__(run_config, model_config, tokenizer)
        self.source = source
        self._train_examples = train_examples
        self._splits: dict[str, qa_features.EncodedExamples | None] = {}
        data = run_config.data
        check_sequence_length(model_config, data.max_seq_length)
        if tokenizer is not None:
            self.encoder = qa_features.QAEncoder(
                tokenizer,
                max_seq_length=data.max_seq_length,
                doc_stride=data.doc_stride,
                max_query_length=data.max_query_length,
            )
        self._outputs = jax.jit(self._forward)

    @property
    def evaluation(self) -> QuestionAnsweringEvalConfig:
        """The eval section as its dataclass: a field it lacks (a Hugging Face directory's
        run config) takes its default, defined in qa_eval_section.py only."""
        return section_values(QuestionAnsweringEvalConfig, self.config.eval)

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, workdir: str
    ) -> "BertQuestionAnsweringTask":
        """From ``config.init_from`` (its shapes and tokenizer; the qa_outputs head new),
        or with ``init_from`` empty a fresh model of ``config.model``'s shape whose
        tokenizer is the workdir's, the vocab.txt of ``data.hf_checkpoint``, or
        SentencePiece trained on the training questions and contexts."""
        train = read_split(config.data, "train")
        if train is None:
            raise UserError("set --config.data.qa_train to a SQuAD JSON file")
        check_version(train, config.data, "train")
        source = None
        if config.get("init_from"):
            source, tokenizer, model_config = start_from_checkpoint(config, workdir)
        else:

            def documents() -> list[list[str]]:
                # Trained on the words as they are encoded: one at a time.
                texts = {" ".join(w.text for w in split_words(text)) for e in train
                         for text in (e.context, e.question)}  # fmt: skip
                return [[text] for text in sorted(texts)]

            tokenizer, model_config = start_fresh(config, workdir, documents)
        return cls(resolve_run_config(config, model_config), model_config, tokenizer, source, train)

    # ------------------------------------------------------------------- training

    def init_params(self, rng: jax.Array) -> Any:
        ids = jnp.ones((1, self.config.data.max_seq_length), jnp.int32)
        return self.model.init(rng, ids)["params"]

    def initial_params(self, params: Any) -> Any:
        """Embeddings and encoder from the checkpoint (its pooler, if any, is not used);
        qa_outputs stays fresh."""
        if self.source is None:
            return params
        encoder = self.source.encoder_params()["bert"]
        kept = {k: v for k, v in encoder.items() if k in params["bert"]}
        return graft_params(params, {"bert": kept})

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {"examples": jnp.sum(batch["weight"]).astype(jnp.float32)}

    def _logits(self, params, batch: Batch, rng=None, deterministic: bool = True):
        return self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            deterministic=deterministic,
            rngs=None if rng is None else {"dropout": rng},
        )

    @staticmethod
    def _sums(start_logits, end_logits, batch: Batch) -> dict[str, jnp.ndarray]:
        """Summed loss and correct start / end positions of the windows (weight 0 rows
        count nothing); the cross entropy runs over all positions, as Hugging Face's."""
        weight = batch["weight"].astype(jnp.float32)
        sums = {"examples": jnp.sum(weight)}
        losses = []
        for kind, logits in (("start", start_logits), ("end", end_logits)):
            target = batch[f"{kind}_positions"]
            losses.append(optax.softmax_cross_entropy_with_integer_labels(logits, target))
            correct = (jnp.argmax(logits, axis=-1) == target).astype(jnp.float32)
            sums[f"{kind}_correct"] = jnp.sum(correct * weight)
        sums["loss"] = jnp.sum((losses[0] + losses[1]) / 2 * weight)
        sums["tokens"] = jnp.sum(batch["attention_mask"] * weight[:, None])
        return sums

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        start_logits, end_logits = self._logits(params, batch, rng, deterministic)
        return self._sums(start_logits, end_logits, batch)

    def objective(self, sums, counts):
        return sums["loss"] / jnp.maximum(counts["examples"], 1.0)

    def summarize(self, sums):
        windows = jnp.maximum(sums["examples"], 1.0)
        return {
            "loss": sums["loss"] / windows,
            "start_accuracy": sums["start_correct"] / windows,
            "end_accuracy": sums["end_correct"] / windows,
            "tokens": sums["tokens"],
        }

    def train_iterator(self, seed: int, process_index: int, process_count: int) -> Iterator:
        if self._train_examples is None:
            self._train_examples = read_split(self.config.data, "train")
        encoded = self.encoder.encode(self._train_examples, training=True)
        if encoded.skipped:
            print(
                f"{encoded.skipped} of {len(self._train_examples)} training answers are not "
                "found at their answer_start; those questions are left out",
                flush=True,
            )
        return qa_features.training_batches(
            encoded.windows,
            pad_id=self.tokenizer.pad_id,
            max_seq_length=self.config.data.max_seq_length,
            batch_size=local_batch_size(self.config.data.batch_size, process_count),
            seed=seed,
            process_index=process_index,
            process_count=process_count,
        )

    def step_flops(self) -> float:
        data = self.config.data
        return bert_classification_flops(self.model_config, data.batch_size, data.max_seq_length)

    # ----------------------------------------------------------------- evaluation

    def encoded_split(self, split: str) -> qa_features.EncodedExamples | None:
        if split not in self._splits:
            # A Hugging Face directory is scored on the given files only, never the demo.
            given = not self.pretrained_path or self.config.data[f"qa_{split}"]
            examples = read_split(self.config.data, split) if given else None
            if examples is not None:
                check_version(examples, self.config.data, split)
            self._splits[split] = examples and self.encoder.encode(examples, training=False)
        return self._splits[split]

    def _batches(self, encoded: qa_features.EncodedExamples, batch_size: int | None = None):
        return qa_features.evaluation_batches(
            encoded.windows,
            pad_id=self.tokenizer.pad_id,
            max_seq_length=self.config.data.max_seq_length,
            batch_size=batch_size or self.evaluation.batch_size,
        )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every window of "dev" or "test" once, in order (padding rows have weight 0)."""
        self.check_split(split)
        encoded = self.encoded_split(split)
        return self._batches(encoded) if encoded else None

    def _forward(self, params, batch: Batch):
        start_logits, end_logits = self._logits(params, batch)
        return self._sums(start_logits, end_logits, batch), start_logits, end_logits

    def answer(self, params, encoded: qa_features.EncodedExamples, batch_size=None):
        """Run the model over every window -> (summed window metrics, one answer dict per
        example: ``answer``, ``start``, ``end``, ``score``, ``null_score``, ``no_answer``)."""
        totals, starts, ends = None, [], []
        for batch in self._batches(encoded, batch_size):
            sums, start_logits, end_logits = jax.device_get(self._outputs(params, batch))
            totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
            rows = int(batch["weight"].sum())
            starts.extend(start_logits[:rows])
            ends.extend(end_logits[:rows])
        by_example: dict[int, list[int]] = {}
        for i, window in enumerate(encoded.windows):
            by_example.setdefault(window.example, []).append(i)
        answers = []
        for index, example in enumerate(encoded.examples):
            windows = by_example[index]
            choice = choose_span(
                [starts[i] for i in windows],
                [ends[i] for i in windows],
                [encoded.windows[i].context_positions for i in windows],
                max_answer_length=self.config.data.max_answer_length,
                allow_no_answer=self.config.data.version_2_with_negative,
                null_score_diff_threshold=self.evaluation.null_score_diff_threshold,
            )
            found = {"answer": "", "start": None, "end": None, "score": choice.score}
            if choice.window >= 0:
                window = encoded.windows[windows[choice.window]]
                text, begin, stop = qa_features.span_text(
                    example.context, encoded.contexts[index], window, choice.start, choice.end
                )
                found.update(answer=text, start=begin, end=stop)
            answers.append(
                {**found, "null_score": choice.null_score, "no_answer": choice.no_answer}
            )
        return totals, answers

    def _scores(self, encoded, answers) -> dict[str, float]:
        predictions = {
            e.id: "" if a["no_answer"] else a["answer"]
            for e, a in zip(encoded.examples, answers, strict=True)
        }
        return squad_scores(
            gold_answers(encoded.examples),
            predictions,
            cjk_characters=self.evaluation.cjk_characters,
            breakdown=self.config.data.version_2_with_negative,
        )

    def extra_eval(self, params, step: int, rows=None) -> dict[str, Any]:
        """Dev exact match and F1 (and the SQuAD 2.0 breakdown), as ``evaluate`` scores them."""
        encoded = self.encoded_split("dev")
        if not encoded:
            return {}
        _, answers = self.answer(params, encoded)
        scores = self._scores(encoded, answers)
        return {k: v for k, v in scores.items() if not k.endswith("total")}

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Scores of ``split`` to OUTDIR/{split}-step{N}[-avgK].json, the answers to
        ``...-predictions.json`` (question id -> answer text, "" for no answer: the input
        of the official evaluate-v1.1.py / evaluate-v2.0.py) and, for SQuAD 2.0,
        ``...-null_odds.json`` (id -> no-answer score minus best span score, their
        --na-prob-file); returns the report."""
        self.check_split(split)
        encoded = self.encoded_split(split)
        if not encoded:
            raise UserError(f"{self.workdir}: its config names no {split} data to evaluate")
        restored = self.restore_params(checkpoint)
        totals, answers = self.answer(restored.params, encoded, (options or {}).get("batch_size"))
        metrics = {k: float(v) for k, v in jax.device_get(self.summarize(totals)).items()}
        del metrics["tokens"]
        scores = self._scores(encoded, answers)
        report: dict[str, Any] = {
            "task": self.name,
            "split": split,
            "step": restored.step,
            "checkpoint": restored.description,
            "examples": len(encoded.examples),
            "windows": len(encoded.windows),
            **scores,
            **metrics,
        }
        outdir = self.outdir(outdir)
        os.makedirs(outdir, exist_ok=True)
        stem = os.path.join(outdir, report_stem(split, restored))
        files = {stem + ".json": report}
        files[stem + "-predictions.json"] = {
            e.id: "" if a["no_answer"] else a["answer"]
            for e, a in zip(encoded.examples, answers, strict=True)
        }
        if self.config.data.version_2_with_negative:
            files[stem + "-null_odds.json"] = {
                e.id: a["null_score"] - a["score"]
                for e, a in zip(encoded.examples, answers, strict=True)
            }
        for path, content in files.items():
            with open(path, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2, ensure_ascii=False)
        shown = "  ".join(
            f"{k} {v:.4f}" for k, v in {**scores, **metrics}.items() if not k.endswith("total")
        )
        print(
            f"{split} ({len(encoded.examples)} questions, {len(encoded.windows)} windows, "
            f"{restored.description}): {shown}\nwrote {stem}.json and {stem}-predictions.json"
        )
        return report

    # ------------------------------------------------------------------- predict

    def predict(self, lines: Sequence[str], *, checkpoint="latest", options=None) -> list[str]:
        """One answer per input line ``{"question": ..., "context": ...}``: a JSON object
        ``{"answer", "start", "end", "score"}`` (character offsets into the context, the
        span's start + end logit) or, when no-answer wins (SQuAD 2.0 runs only),
        ``{"answer": "", "start": null, "end": null, "score": NULL_SCORE, "no_answer": true}``."""
        examples = [parse_question_line(line, n) for n, line in enumerate(lines, 1)]
        if not examples:
            return []
        restored = self.restore_params(checkpoint)
        encoded = self.encoder.encode(examples, training=False)
        _, answers = self.answer(restored.params, encoded, (options or {}).get("batch_size"))
        out = []
        for a in answers:
            if a["no_answer"]:
                result = {"answer": "", "start": None, "end": None, "score": a["null_score"]}
                result["no_answer"] = True
            else:
                result = {k: a[k] for k in ("answer", "start", "end", "score")}
            out.append(json.dumps(result, ensure_ascii=False))
        return out
