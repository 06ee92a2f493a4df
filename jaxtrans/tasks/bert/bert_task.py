"""What the BERT tasks share: model fields, the run config they keep, and the evaluation
of a trained BERT workdir by the task's own loss (bert_pretraining.py,
bert_classification.py).

Every BERT workdir keeps its tokenizer in ``WORKDIR/bert_tokenizer/`` (bert_init.py), so
a finished run is evaluated from DIR/config.json, that tokenizer and DIR/checkpoints
alone (nothing from ``init_from`` is read).
"""

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from jaxtrans.data.tokenizers.bert_tokenizer import BertTokenizer, load_or_train_bert_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_from_huggingface import from_huggingface
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.layer_stacks import graft_params
from jaxtrans.tasks.base import Batch, Restored, Task, report_stem
from jaxtrans.tasks.bert import bert_init
from jaxtrans.training.step import make_eval_step

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
    "scan_layers",
    "dtype",
    "param_dtype",
)


def bert_config(values: dict[str, Any], where: str = "config.model") -> BertConfig:
    """The BertConfig of a model section; UserError prefixed by ``where`` (what holds it)."""
    try:
        return BertConfig.from_dict(values)
    except (ValueError, TypeError) as error:
        raise UserError(f"{where}: {error}") from error


def resolve_run_config(
    config: ml_collections.ConfigDict, model_config: BertConfig
) -> ml_collections.ConfigDict:
    """The run config with every model field the run decided (what config.json keeps)."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model = ml_collections.ConfigDict(dataclasses.asdict(model_config))
    return resolved


def check_sequence_length(model_config: BertConfig, max_seq_length: int) -> None:
    limit = model_config.position_encoding.max_length()
    if limit is not None and max_seq_length > limit:
        raise UserError(
            f"--config.data.max_seq_length={max_seq_length} exceeds the model's position "
            f"table (max_len={limit}); use a shorter max_seq_length"
        )


def start_from_checkpoint(
    config: ml_collections.ConfigDict, workdir: str, **model_changes: Any
) -> tuple[bert_init.InitSource, BertTokenizer, BertConfig]:
    """What a fine-tuning run takes from ``config.init_from``: the source checkpoint, its
    tokenizer (the workdir's copy, made on the first start) and its model config with the
    run's FINE_TUNING_FIELDS and ``model_changes`` (e.g. num_labels)."""
    source = bert_init.init_source(config.init_from)
    if config.data.hf_checkpoint:
        raise UserError(
            "the vocabulary of a fine-tuning run comes from --config.init_from; "
            "leave --config.data.hf_checkpoint empty"
        )
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
        model_config = source.config.replace(**changes, **model_changes)
    except (ValueError, TypeError) as error:
        raise UserError(f"config.model: {error}") from error
    return source, tokenizer, model_config


def start_fresh(
    config: ml_collections.ConfigDict,
    workdir: str,
    documents: Callable[[], list[list[str]]],
    **model_changes: Any,
) -> tuple[BertTokenizer, BertConfig]:
    """A fine-tuning run with no ``init_from``: a fresh model of ``config.model``'s shape
    whose tokenizer is the workdir's, else the vocab.txt of ``data.hf_checkpoint``, else
    SentencePiece trained on ``documents()`` (lists of sentences) into the workdir."""
    if bert_init.has_run_tokenizer(workdir):
        tokenizer = bert_init.load_run_tokenizer(workdir)
    elif config.data.hf_checkpoint:
        files = bert_init.huggingface_tokenizer_files(config.data.hf_checkpoint)
        tokenizer = bert_init.install_tokenizer(files, workdir)
    else:
        tokenizer = load_or_train_bert_tokenizer(config.data, workdir, documents())
    model = config.model.to_dict()
    model.update(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, **model_changes)
    return tokenizer, bert_config(model)


def _has_path(tree: dict[str, Any], path: str) -> bool:
    """Whether nested dict ``tree`` holds ``path`` ("a/b": key b inside key a)."""
    for key in path.split("/"):
        if not isinstance(tree, dict) or key not in tree:
            return False
        tree = tree[key]
    return True


class BertTask(Task):
    """A BERT task scored by its own ``loss_sums`` and ``summarize`` on a split's batches,
    exactly as the training loop's dev evaluation does.

    Besides a trained workdir (``from_workdir``), a BERT task can be made from a Hugging
    Face checkpoint directory with no training at all (``from_pretrained``: evaluate.py
    --init_from DIR --task NAME); its ``restore_params`` then returns the directory's
    weights, which must include the task's head.
    """

    shape_fields = SHAPE_FIELDS
    # The Hugging Face classes (config.json "architectures") whose weights hold this
    # task's head, and the converted parameters that head needs ("a/b": b inside a).
    huggingface_architectures: tuple[str, ...] = ()
    head_params: tuple[str, ...] = ()
    # Data settings of a task made by ``from_pretrained`` without a run config.
    pretrained_data_defaults: dict[str, Any] = {"max_seq_length": 128}
    # The Hugging Face directory of a task made by ``from_pretrained``.
    pretrained_path: str | None = None
    plots_attention = True
    export_format = "Hugging Face BERT"

    @classmethod
    def from_pretrained(
        cls, path: str, config: ml_collections.ConfigDict | None = None
    ) -> "BertTask":
        """The task of Hugging Face directory ``path`` as it is: its model config (labels
        from its id2label), its WordPiece vocabulary, and its weights for
        ``restore_params``. ``config``: a run config whose data and eval sections are used
        (evaluate.py --config); else ``pretrained_data_defaults``, eval batch 32."""
        directory = Path(path).expanduser()
        source = bert_init.init_source(str(directory), flag="--init_from")
        if source.kind != "huggingface":
            raise UserError(
                f"--init_from {path} is a jaxtrans workdir; evaluate it with --workdir {path}"
            )
        hf = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        architectures = hf.get("architectures") or []
        if architectures and not set(architectures) & set(cls.huggingface_architectures):
            raise UserError(
                f"--init_from {path} holds a {'/'.join(map(str, architectures))} model; the "
                f"{cls.name} task needs one of {', '.join(cls.huggingface_architectures)}"
            )
        model_config = source.config
        data = dict(cls.pretrained_data_defaults)
        limit = model_config.position_encoding.max_length()
        if limit is not None:  # a small model's position table is shorter
            data["max_seq_length"] = min(data["max_seq_length"], limit)
        run_config = ml_collections.ConfigDict(
            {"task": cls.name, "init_from": str(directory), "data": data}
        )
        run_config.eval = {"batch_size": 32}
        if config is not None:
            for section in ("data", "eval"):
                if not isinstance(config.get(section), ml_collections.ConfigDict):
                    raise UserError(f"the config has no {section} section; give a task's config")
                run_config[section].update(config[section].to_dict())
        labels = hf.get("id2label") or {}
        if labels:
            try:
                order = sorted(labels, key=int)
            except (TypeError, ValueError):
                raise UserError(
                    f"--init_from {path}: config.json id2label keys {sorted(labels)} are not "
                    "label numbers"
                ) from None
            run_config.data.labels = ",".join(str(labels[k]) for k in order)
        if config is not None and "model" in config:
            changes = {k: config.model[k] for k in FINE_TUNING_FIELDS if k in config.model}
            try:
                model_config = model_config.replace(**changes)
            except (ValueError, TypeError) as error:
                raise UserError(f"config.model: {error}") from None
        run_config = resolve_run_config(run_config, model_config)
        tokenizer = bert_init.load_tokenizer(directory)
        task = cls(run_config, model_config, tokenizer)
        task.pretrained_path = str(directory)
        return task

    def restore_params(self, checkpoint: str = "latest") -> Restored:
        """A workdir's checkpoint (see ``Task.restore_params``), or for a task made by
        ``from_pretrained`` the directory's weights (``checkpoint`` must be latest)."""
        if self.pretrained_path is None:
            return super().restore_params(checkpoint)
        if checkpoint != "latest":
            raise UserError(
                f"--checkpoint {checkpoint}: a Hugging Face directory has one set of weights"
            )
        pretrained = from_huggingface(self.pretrained_path).params
        missing = [name for name in self.head_params if not _has_path(pretrained, name)]
        if missing:
            raise UserError(
                f"--init_from {self.pretrained_path} has no {'/'.join(missing)} weights: the "
                f"{self.name} task needs a {' or '.join(self.huggingface_architectures)} "
                "checkpoint (fine-tune one with train.py first)"
            )
        fresh = nn.unbox(jax.jit(self.init_params)(jax.random.key(0)))
        params = graft_params(fresh, pretrained)
        return Restored(params, 0, f"Hugging Face weights of {self.pretrained_path}", checkpoint)

    @classmethod
    def from_workdir(cls, workdir: str, run_config: ml_collections.ConfigDict) -> "BertTask":
        """The saved model config and DIR/bert_tokenizer/ (init_from is not read)."""
        task = cls(
            run_config,
            bert_config(run_config.model.to_dict(), f"{workdir}/config.json: model"),
            bert_init.load_run_tokenizer(workdir),
        )
        task.workdir = workdir
        return task

    def export(
        self, output: Path, checkpoint: str = "latest", export_format: str = "huggingface"
    ) -> str:
        """config.json, model.safetensors and tokenizer files that transformers loads
        (jaxtrans.tasks.bert.bert_export): its one format."""
        from jaxtrans.tasks.bert.bert_export import export_bert

        return export_bert(self, output, checkpoint)

    def plot_attention(self, sentence, output_png, *, checkpoint="latest", options=None) -> str:
        """Self-attention of ``[CLS] sentence [SEP]`` (``text<TAB>text_b``: a pair) per
        layer and head to output_png, the word pieces on the axes; returns the pieces."""
        from jaxtrans.inference.plots import plot_bert_attention  # matplotlib: when drawing
        from jaxtrans.tasks.bert.bert_predict import encode_pair, input_texts

        row = encode_pair(self.tokenizer, *input_texts(sentence, 1), masks=True)
        length, limit = len(row["input_ids"]), self.model_config.position_encoding.max_length()
        if limit is not None and length > limit:
            raise UserError(f"--plot_attention: {length} pieces exceed max_len={limit}")
        pieces = [self.tokenizer.id_to_piece(int(i)) for i in row["input_ids"]]
        bert_params = self.restore_params(checkpoint).params["bert"]
        plot_bert_attention(
            self.model_config, bert_params, row["input_ids"], row["token_type_ids"], pieces,
            output_png,
        )  # fmt: skip
        print(f"{' '.join(pieces)}\nwrote {output_png}")
        return " ".join(pieces)

    def split_batches(self, split: str) -> list[Batch] | None:
        """Every example of ``split`` once, in order; None when the config has none."""
        raise NotImplementedError

    def eval_batches(self) -> list[Batch] | None:
        return self.split_batches("dev")

    def report_extras(self) -> dict[str, Any]:
        """Report fields besides the metrics (e.g. the label names)."""
        return {}

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Metrics of ``split`` to OUTDIR/{split}-step{N}[-avgK].json; returns the report:
        task, split, step, checkpoint, examples and the task's metrics."""
        self.check_split(split)
        batches = self.split_batches(split)
        if not batches:
            where = self.workdir or f"--init_from {self.pretrained_path}"
            raise UserError(
                f"{where}: its config names no {split} data to evaluate; give it with --config"
            )
        restored = self.restore_params(checkpoint)
        eval_step = jax.jit(make_eval_step(self))
        totals = None
        for batch in batches:
            sums = jax.device_get(eval_step(restored.params, batch))
            totals = sums if totals is None else jax.tree.map(np.add, totals, sums)
        metrics = {k: float(v) for k, v in jax.device_get(self.summarize(totals)).items()}
        del metrics["tokens"]
        examples = totals["examples"] if "examples" in totals else totals["nsp_examples"]
        report: dict[str, Any] = {
            "task": self.name,
            "split": split,
            "step": restored.step,
            "checkpoint": restored.description,
            "examples": int(examples),
            **metrics,
            **self.report_extras(),
        }
        outdir = self.outdir(outdir)
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, report_stem(split, restored) + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        print(
            f"{split} ({report['examples']} examples, {restored.description}): {shown}\n"
            f"wrote {path}"
        )
        return report
