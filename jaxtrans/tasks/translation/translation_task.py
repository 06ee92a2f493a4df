"""The translation task: SentencePiece (or Hugging Face) tokenizer, encoder-decoder
Transformer, label-smoothed cross entropy over non-pad targets; dev loss and dev BLEU/chrF
while training; BLEU reports, translation of user input and attention pictures of a
trained run; the steps of an epoch (train.num_epochs).

Dev BLEU during training and evaluate.py's reports decode and score through the same
function (jaxtrans.inference.report.translate_and_score). A configured dev split is read
when the task is built for training with dev evaluation on, so that a wrong path or a
malformed line stops the run before it trains; only a run with no dev split at all (files
without ``data.dev``) trains without one.
"""

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from jaxtrans.data.tokenizers.marian_tokenizer import read_marian
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.evaluation import eval_batches
from jaxtrans.data.translation.id_shards import IdShards, ensure_id_shards
from jaxtrans.data.translation.sources import SplitPairs, read_dev_split, read_split
from jaxtrans.data.translation.tokenizer import Tokenizer, load_or_train_tokenizer, load_tokenizer
from jaxtrans.errors import UserError
from jaxtrans.inference.report import ReportContext, evaluate_translations, translate_and_score
from jaxtrans.models import Transformer, TransformerConfig
from jaxtrans.models.layer_stacks import graft_params
from jaxtrans.models.model_flops import train_step_flops
from jaxtrans.tasks.base import Batch, Restored, Task, report_stem
from jaxtrans.tasks.translation import translation_init
from jaxtrans.tasks.translation.decoding_settings import (
    decoding_name,
    decoding_settings,
    target_language,
)
from jaxtrans.tasks.translation.eval_section import eval_section
from jaxtrans.tasks.translation.translation_loss import translation_loss_sums
from jaxtrans.tasks.translation.translation_predict import answer_lines
from jaxtrans.tasks.translation.vocabulary_sizes import vocabulary_without_data
from jaxtrans.training import sharding


def resolve_config(config: ml_collections.ConfigDict, tokenizer) -> ml_collections.ConfigDict:
    """The run config with the vocabulary sizes the tokenizer decided."""
    resolved = ml_collections.ConfigDict(config.to_dict())
    resolved.model.vocab_size = tokenizer.source_vocab_size
    resolved.model.target_vocab_size = None if tokenizer.shared else tokenizer.target_vocab_size
    return resolved


def model_config_of(run_config: ml_collections.ConfigDict, where: str = "config.model"):
    """The TransformerConfig of a (resolved) run config."""
    try:
        return TransformerConfig.from_dict(run_config.model.to_dict())
    except (ValueError, TypeError) as error:
        raise UserError(f"{where}: {error}") from error


# The dev split of a task that has not read it yet.
_NOT_READ = object()


class TranslationTask(Task):
    name = "translation"
    model_class = Transformer
    splits = ("test", "dev")
    predicts = True
    plots_attention = True
    export_format = "Hugging Face Marian"
    other_export_formats = {"ctranslate2": "CTranslate2"}
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
        tokenizer: Tokenizer | None = None,
    ):
        """A task for a given model; ``tokenizer`` is needed for batches and evaluation."""
        super().__init__(config, model_config, tokenizer)
        self._dev: Any = _NOT_READ
        self.id_shards: IdShards | None = None  # prepare_data's; None: tokenised into memory
        self._workdir: str | None = None  # from_config's: where prepare_data writes them
        # Whether a dev record has said how many malformed dev lines were skipped.
        self._told_skipped = False

    # The Marian directory of a task made by ``from_pretrained``: its weights are the params.
    pretrained_path: str | None = None

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, workdir: str) -> "TranslationTask":
        """Read the dev split (when dev evaluation is on), train (or load) the workdir's
        tokenizer, then size the model by its vocabulary. With ``init_from`` (a Marian
        directory) the model and tokenizer are the directory's (translation_init)."""
        if "init_from" in config:
            if not config.init_from:
                raise UserError(
                    "--config.init_from is required: the Marian directory to fine-tune "
                    "(configs/marian_finetune.py)"
                )
            config = translation_init.fine_tuning_config(config)
        for key in ("max_source_length", "max_target_length"):
            value = config.data[key]
            if not isinstance(value, int) or value < 2:
                raise UserError(f"--config.data.{key}={value!r}: use a whole number >= 2")
        decoding_settings(config)  # a misspelt or unusable eval setting stops the run here
        # First, so that a mistyped --config.data.dev or a broken dev file stops the run
        # before anything is written, rather than dropping dev evaluation at step N.
        dev = read_dev_split(config.data) if config.train.eval_every else _NOT_READ
        tokenizer = load_or_train_tokenizer(config.data, workdir)
        run_config = resolve_config(config, tokenizer)
        task = cls(run_config, model_config_of(run_config), tokenizer)
        task._dev, task._workdir = dev, workdir
        return task

    def prepare_data(self) -> None:
        """The training pairs tokenised once into the workdir's id shards (rewritten when
        the tokenizer or data changed), which the iterator reads."""
        if self._workdir is not None and self.id_shards is None:
            self.id_shards = ensure_id_shards(self.config.data, self.tokenizer, self._workdir)

    @classmethod
    def for_compiling(cls, config: ml_collections.ConfigDict) -> "TranslationTask":
        """The task ``from_config`` makes, with no data read and no tokenizer trained, to
        compile its step ahead of time (python -m jaxtrans.compile): a SentencePiece
        vocabulary has data.vocab_size pieces (the size it is trained to on enough
        text); a pretrained tokenizer (data.tokenizer, init_from) is read."""
        if "init_from" in config and config.init_from:
            config = translation_init.fine_tuning_config(config)
        run_config = resolve_config(config, vocabulary_without_data(config.data))
        return cls(run_config, model_config_of(run_config))

    @classmethod
    def from_pretrained(
        cls, path: str, config: ml_collections.ConfigDict | None = None
    ) -> "TranslationTask":
        """A Marian directory as it is, to translate and score with no training:
        evaluate.py --init_from DIR, Translator.load(DIR). ``config``: a run config whose
        data and eval sections are used (test/dev files, decoding settings)."""
        flag = "--init_from"
        model_config = translation_init.pretrained_model_config(path, None, flag)
        run_config = ml_collections.ConfigDict({"task": cls.name, "init_from": path})
        run_config.data = get_data_config().to_dict()
        run_config.data.max_source_length = run_config.data.max_target_length = 512
        # Decoded as transformers' generate() does by default: scores / length ** 1.0.
        run_config.eval = eval_section(alpha=1.0, penalty_form="hf").to_dict()
        if config is not None:
            for section in ("data", "eval"):
                if not isinstance(config.get(section), ml_collections.ConfigDict):
                    raise UserError(f"the config has no {section} section; give a task's config")
                run_config[section].update(config[section].to_dict())
        run_config.data.tokenizer = path
        run_config.model = translation_init.model_fields(model_config)
        tokenizer = read_marian(path)
        tokenizer.check_vocab_size(model_config.vocab_size, model_config.output_vocab_size)
        task = cls(run_config, model_config, tokenizer)
        task.pretrained_path = path
        return task

    def restore_params(self, checkpoint: str = "latest") -> Restored:
        """A workdir's checkpoint (Task.restore_params), or for a task made by
        ``from_pretrained`` the directory's weights (``checkpoint`` must be latest)."""
        if self.pretrained_path is None:
            return super().restore_params(checkpoint)
        if checkpoint != "latest":
            raise UserError(f"--checkpoint {checkpoint}: a Marian directory has one set of weights")
        params = translation_init.pretrained_params(self.pretrained_path, self.model_config)
        return Restored(params, 0, f"the weights of {self.pretrained_path}", checkpoint)

    @classmethod
    def from_workdir(cls, workdir: str, run_config: ml_collections.ConfigDict) -> "TranslationTask":
        """The saved config's model and DIR/tokenizer, checked against each other."""
        model_config = model_config_of(run_config, f"{workdir}/config.json: model")
        tokenizer = load_tokenizer(workdir)
        tokenizer.check_vocab_size(model_config.vocab_size, model_config.output_vocab_size)
        task = cls(run_config, model_config, tokenizer)
        task.workdir = workdir
        return task

    # ----------------------------------------------------------------- training

    def init_params(self, rng: jax.Array) -> Any:
        data_config = self.config.data
        return self.model.init(
            rng,
            jnp.ones((1, data_config.max_source_length), jnp.int32),
            jnp.ones((1, data_config.max_target_length), jnp.int32),
        )["params"]

    def initial_params(self, params: Any) -> Any:
        """A fine-tuning run (``init_from``) starts from the directory's weights."""
        path = self.config.get("init_from")
        if not path:
            return params
        return graft_params(params, translation_init.pretrained_params(path, self.model_config))

    def counts(self, batch: Batch) -> dict[str, jnp.ndarray]:
        return {"tokens": jnp.sum(batch["target_out"] != self.model_config.pad_id)}

    def loss_sums(self, params, batch: Batch, rng, deterministic: bool):
        return translation_loss_sums(
            self.model, self.model_config, self.config.train, params, batch, rng, deterministic
        )

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
        from jaxtrans.data.translation import pipeline  # grain: when training

        return pipeline.train_iterator(
            self.config.data,
            self.tokenizer,
            seed=seed,
            process_index=process_index,
            process_count=process_count,
            shards=self.id_shards,
        )

    def steps_per_epoch(self, seed: int, process_count: int) -> tuple[int, str]:
        """An exact count: one pass tokenises and packs the training data as the pipeline
        does (jaxtrans.data.translation.epochs)."""
        from jaxtrans.data.translation.epochs import batches_per_epoch  # grain: when training

        data, shards = self.config.data, self.id_shards
        steps, usable = batches_per_epoch(
            data, self.tokenizer, seed=seed, process_count=process_count, shards=shards
        )
        rows = self.config.data.batch_size
        return steps, f"counted: {usable} usable pairs packed into batches of {rows} rows"

    def dev_split(self) -> SplitPairs | None:
        """The dev split (read once), or None when the run has none."""
        if self._dev is _NOT_READ:
            self._dev = read_dev_split(self.config.data)
        return self._dev

    def dev_pairs(self) -> list | None:
        """The dev pairs evaluated during training: the first ``eval.dev_sentences`` (0: all)."""
        dev = self.dev_split()
        if dev is None:
            return None
        limit = self.config.eval.dev_sentences
        return dev.pairs[:limit] if limit else dev.pairs

    def eval_batches(self) -> Iterable[Batch] | None:
        pairs = self.dev_pairs()
        if not pairs:
            return None
        return (
            {k: v for k, v in batch.items() if k != "index"}
            for batch in eval_batches(
                pairs,
                self.tokenizer,
                self.config.eval.batch_size,
                self.config.data.max_source_length,
                self.config.data.max_target_length,
            )
        )

    def extra_eval(self, params, step: int, rows=None) -> dict[str, Any]:
        """Dev BLEU and chrF, decoded and scored as evaluate.py does (config.eval settings),
        over the devices of ``rows`` (the loop's split of a batch's rows; None: one device),
        the parameters as laid out; the first evaluation also says how many malformed dev
        lines were skipped (if any)."""
        pairs = self.dev_pairs()
        if not pairs:
            return {}
        metrics: dict[str, Any] = {}
        if self.config.eval.bleu_during_training:
            with sharding.rows_axis_rules(rows, self.config.mesh.rules):
                _, scores, _ = translate_and_score(
                    self.model_config,
                    jax.device_get(params) if rows is None else params,
                    self.tokenizer,
                    pairs,
                    decoding_settings(self.config).options,
                    target_lang=target_language(self.config.data),
                    rows=rows,
                )
            metrics.update(bleu=scores.bleu, chrf=scores.chrf)
        skipped = self.dev_split().lines_skipped
        if skipped and not self._told_skipped:
            metrics["lines_skipped"] = skipped
            self._told_skipped = True
        return metrics

    def batch_shapes(self, rows: int) -> Batch:
        """int32 [rows, max_source_length] or [rows, max_target_length] (packed_rows.py)."""
        from jaxtrans.data.translation.packed_rows import SOURCE_KEYS, TARGET_KEYS  # grain

        data = self.config.data
        source = jax.ShapeDtypeStruct((rows, int(data.max_source_length)), jnp.int32)
        target = jax.ShapeDtypeStruct((rows, int(data.max_target_length)), jnp.int32)
        return {**dict.fromkeys(SOURCE_KEYS, source), **dict.fromkeys(TARGET_KEYS, target)}

    def step_flops(self) -> float:
        data_config = self.config.data
        return train_step_flops(
            self.model_config,
            data_config.batch_size,
            data_config.max_source_length,
            data_config.max_target_length,
        )

    # ----------------------------------------------------------------- a trained run

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Translate the split, score it with sacreBLEU and write
        OUTDIR/{split}-step{N}[-avgK]-{DECODING}.json, .md and .hyp.txt, DECODING being
        ``decoding_name`` of the settings (e.g. ``greedy``, ``beam4``); returns the report."""
        self.check_split(split)
        restored = self.restore_params(checkpoint)
        split_pairs = read_split(self.run_config.data, split)
        search, nbest = decoding_settings(self.run_config, **(options or {}))
        name = decoding_name(search, decoding_settings(self.run_config).options)
        context = ReportContext(
            self.outdir(outdir),
            restored.step,
            split,
            restored.description,
            stem=report_stem(split, restored, f"-{name}"),
            target_lang=target_language(self.run_config.data),
            lines_skipped=split_pairs.lines_skipped,
        )
        model = (self.model_config, restored.params, self.tokenizer)
        return evaluate_translations(*model, split_pairs.pairs, context, search, nbest)

    def predict(self, lines: Sequence[str], *, checkpoint="latest", options=None) -> list[str]:
        """The translation of each line, or with options nbest N its n-best list as JSON;
        options prefix / prefix_from_input force a target prefix (translation_predict)."""
        decoding = decoding_settings(self.run_config, **(options or {}))
        restored = self.restore_params(checkpoint)
        model = (self.model_config, restored.params, self.tokenizer)
        return answer_lines(*model, lines, decoding, options)

    def export(self, output, checkpoint="latest", export_format="huggingface") -> str:
        """A MarianMTModel directory with MarianTokenizer files
        (jaxtrans.tasks.translation.translation_export), or with "ctranslate2" a
        CTranslate2 model and its SentencePiece files (ctranslate2_export)."""
        if export_format == "ctranslate2":
            from jaxtrans.tasks.translation.ctranslate2_export import export_ctranslate2

            return export_ctranslate2(self, output, checkpoint)
        from jaxtrans.tasks.translation.translation_export import export_translation

        return export_translation(self, output, checkpoint)

    def plot_attention(self, sentence, output_png, *, checkpoint="latest", options=None) -> str:
        """Attention heatmaps of one sentence per layer and head: cross-attention to
        output_png, encoder and decoder self-attention and the masks beside it
        (``*-encoder.png``, ``*-decoder.png``, ``*-masks.png``); returns the translation."""
        from jaxtrans.inference.plots import plot_attention, sibling  # matplotlib: when drawing

        restored = self.restore_params(checkpoint)
        search = decoding_settings(self.run_config, **(options or {})).options
        masks_png = os.path.splitext(output_png)[0] + "-masks.png"
        model = (self.model_config, restored.params, self.tokenizer)
        translation = plot_attention(*model, sentence, output_png, search, masks_png=masks_png)
        written = [output_png, *(sibling(output_png, k) for k in ("encoder", "decoder")), masks_png]
        print(f"{sentence}\n-> {translation}\nwrote {', '.join(written)}")
        return translation
