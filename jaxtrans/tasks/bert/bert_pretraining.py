"""BERT pretraining: masked-LM + next-sentence prediction on plain text (or the demo
corpus), with a SentencePiece vocabulary trained into the workdir or the WordPiece
vocabulary of ``data.hf_checkpoint``; evaluated on held-out text (``data.dev``, or the
demo corpus's dev documents); asked to fill each ``[MASK]`` of a text (``predict``)."""

from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.data.bert import bert_pipeline
from jaxtrans.data.bert.bert_data_config import get_bert_data_config
from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer, load_or_train_bert_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_model import BertConfig, BertForPretraining
from jaxtrans.models.model_flops import bert_pretraining_flops
from jaxtrans.tasks.base import Batch
from jaxtrans.tasks.bert import bert_init, bert_predict
from jaxtrans.tasks.bert.bert_objectives import (
    example_rows,
    pretraining_sums,
    summarize_pretraining,
)
from jaxtrans.tasks.bert.bert_task import (
    BertTask,
    bert_config,
    check_sequence_length,
    resolve_run_config,
)

# Predictions reported at each [MASK] of an input line.
TOP_K = 5


class BertPretrainingTask(BertTask):
    """Masked-LM + next-sentence pretraining; loss = mean MLM loss + mean NSP loss."""

    name = "bert_pretraining"
    model_class = BertForPretraining
    splits = ("dev",)
    headline = ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")
    predicts = True
    # A masked-LM checkpoint has no next-sentence head (nor pooler): filling masks needs
    # only the masked-LM head.
    huggingface_architectures = ("BertForPreTraining", "BertForMaskedLM")
    head_params = ("mlm_head",)
    pretrained_data_defaults = get_bert_data_config().to_dict()

    def __init__(
        self,
        run_config: ml_collections.ConfigDict,
        model_config: BertConfig,
        tokenizer: BertTokenizer,
        documents: list[list[str]] | None = None,
    ):
        """``documents``: the training text (lists of sentences), needed for training only."""
        super().__init__(run_config, model_config, tokenizer)
        self.documents = documents
        self._dev_batches: list[Batch] | None = None
        self._top_predictions = jax.jit(self.top_predictions)
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
            "nsp_examples": jnp.sum(example_rows(batch)).astype(jnp.float32),
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
        return bert_pipeline.pretraining_train_iterator(
            self.config.data,
            self.tokenizer,
            self.documents,
            seed=seed,
            process_index=process_index,
            process_count=process_count,
        )

    def check_split(self, split: str) -> None:
        if split != "dev":
            raise UserError(
                f"--split {split}: a pretraining run is evaluated on its held-out text; "
                "use --split dev"
            )

    def split_batches(self, split: str) -> list[Batch] | None:
        """Held-out batches of "dev" (``data.dev``, or the demo dev documents when training
        on the demo corpus); None when there is no held-out text (a Hugging Face directory
        asked with evaluate.py --init_from has only ``data.dev``)."""
        self.check_split(split)
        data = self.config.data
        if (data.train or self.pretrained_path) and not data.dev:
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

    def step_flops(self) -> float:
        data = self.config.data
        return bert_pretraining_flops(
            self.model_config, data.batch_size, data.max_seq_length, data.max_predictions_per_seq
        )

    # ----------------------------------------------------------------- filling masks

    def top_predictions(self, params, batch: Batch) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(probabilities, ids), each [batch, masks, TOP_K]: the most probable vocabulary
        entries at ``batch["masked_positions"]`` [batch, masks], most probable first."""
        logits, _ = self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["token_type_ids"],
            batch["attention_mask"],
            batch["masked_positions"],
        )
        k = min(TOP_K, self.model_config.vocab_size)
        return jax.lax.top_k(jax.nn.softmax(logits, axis=-1), k)

    def predict(self, lines: Sequence[str], *, checkpoint="latest", options=None) -> list[str]:
        """Fill every ``[MASK]`` of each line (a TAB separates sentences A and B). One JSON
        object a line: ``{"text", ["text_b",] "masks": [{"position", "predictions":
        [{"token", "id", "probability"}, ...]}]}``, one entry per [MASK] in order, its
        TOP_K predictions most probable first; ``position`` is the mask's index in
        ``[CLS] A [SEP] B [SEP]`` ([CLS] = 0). A line without [MASK], or longer than
        data.max_seq_length tokens, is a UserError naming it."""
        tokenizer, limit = self.tokenizer, self.config.data.max_seq_length
        rows, texts = [], []
        for number, line in enumerate(lines, 1):
            text, text_b = bert_predict.input_texts(line, number)
            row = bert_predict.encode_pair(tokenizer, text, text_b, masks=True)
            (positions,) = (row["input_ids"] == tokenizer.mask_id).nonzero()
            if not len(positions):
                raise UserError(
                    f"--input line {number} has no [MASK]; write [MASK] where a token is to "
                    "be predicted"
                )
            if len(row["input_ids"]) > limit:
                raise UserError(
                    f"--input line {number} is {len(row['input_ids'])} tokens with [CLS] and "
                    f"[SEP], more than data.max_seq_length={limit}; shorten it"
                )
            rows.append({**row, "masked_positions": positions.astype("int32")})
            texts.append(bert_predict.text_fields(text, text_b))
        size = bert_predict.batch_size(self.config, options)
        if not rows:
            return []
        restored = self.restore_params(checkpoint)
        length = bert_predict.padded_length(max(len(r["input_ids"]) for r in rows), limit)
        masks = max(len(row["masked_positions"]) for row in rows)
        probabilities, ids = bert_predict.run_batches(
            self._top_predictions,
            restored.params,
            rows,
            size,
            {
                **dict.fromkeys(("input_ids", "token_type_ids", "attention_mask"), length),
                "masked_positions": masks,
            },
            {"input_ids": tokenizer.pad_id},
        )
        records = []
        for i, (row, fields) in enumerate(zip(rows, texts, strict=True)):
            filled = []
            for j, position in enumerate(row["masked_positions"]):
                predictions = [
                    {
                        "token": tokenizer.id_to_piece(token),
                        "id": int(token),
                        "probability": bert_predict.probability(p),
                    }
                    for token, p in zip(ids[i, j], probabilities[i, j], strict=True)
                ]
                filled.append({"position": int(position), "predictions": predictions})
            records.append(bert_predict.json_line({**fields, "masks": filled}))
        return records
