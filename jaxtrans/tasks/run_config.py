"""The package's default run config, and older run configs filled in from the defaults.

    translation_run_config()   the Transformer base on WMT14 EN->DE: every section with its
                               defaults (configs/base.py is exactly this; the other
                               translation configs start from it)
    bert_run_config()          BERT-base pretraining: the same for the BERT tasks
                               (configs/bert_base.py; the fine-tuning configs start from it)
    complete_run_config(c)     a copy of ``c`` with the fields its run sections lack (a
                               config.json of an older version) set to their defaults
    task_sections(task)        the dataclass or defaults of each section of a task's run
                               config (saved_run_config.py checks a config.json by them)

The sections' fields, defaults and comments live in their dataclasses: the model in
``jaxtrans.models.TransformerConfig``, optimizer / train / mesh in
``jaxtrans.training.run_sections``, a translation run's eval in
``jaxtrans.tasks.translation.eval_section``; the data fields in
``jaxtrans.data.translation.data_config`` and ``jaxtrans.data.bert.bert_data_config`` (and
``jaxtrans.data.qa.qa_data_config``); a question-answering run's eval in
``jaxtrans.tasks.bert.qa_eval_section``.
"""

import copy
import dataclasses
from typing import Any

import ml_collections

from jaxtrans.config_sections import complete_section, dataclass_section
from jaxtrans.data.bert.bert_data_config import get_bert_data_config
from jaxtrans.data.qa.qa_data_config import add_qa_data_fields
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.tasks.bert.qa_eval_section import QuestionAnsweringEvalConfig
from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig, eval_section
from jaxtrans.training.run_sections import (
    MeshConfig,
    OptimizerConfig,
    TrainConfig,
    mesh_section,
    optimizer_section,
    train_section,
)

# The run sections every task has, and their dataclasses.
RUN_SECTIONS = {"optimizer": OptimizerConfig, "train": TrainConfig, "mesh": MeshConfig}


def translation_model_section() -> ml_collections.ConfigDict:
    """TransformerConfig's fields (described there), less those set at run time: vocab_size
    and target_vocab_size come from the tokenizer, pad_id is the vocabulary's, and decode
    is switched on by the decoding code. The Transformer base as a GPU or TPU trains it."""
    return dataclass_section(
        TransformerConfig,
        exclude=("vocab_size", "target_vocab_size", "pad_id", "decode"),
        # 1e-6 as in tensor2tensor, the paper's code (and Flax's LayerNorm); TransformerConfig
        # keeps PyTorch's 1e-5, which the parity tests compare against.
        layer_norm_epsilon=1e-6,
        # The paper drops only residual branches and embeddings (P_drop), as fairseq's
        # transformer_wmt_en_de does; without attention dropout the fused kernels apply.
        attention_dropout_rate=0.0,
        activation_dropout_rate=0.0,
        # bfloat16 matmuls and activations; parameters, optimizer state, softmax, LayerNorm
        # statistics and the loss stay float32 (CPU configs set float32).
        dtype="bfloat16",
    )


def translation_run_config() -> ml_collections.ConfigDict:
    """Transformer base on WMT14 EN->DE (Vaswani et al. 2017): the run config of
    configs/base.py, from which the other translation configs start."""
    config = ml_collections.ConfigDict()
    # What is trained: translation | bert_pretraining | bert_classification |
    # bert_token_classification | bert_question_answering (jaxtrans/tasks/).
    config.task = "translation"
    # Seed of parameter initialisation, dropout and data shuffling.
    config.seed = 0
    # Model shape and regularisation.
    config.model = translation_model_section()
    # Data sources, tokenizer and batching.
    config.data = get_data_config()
    config.data.tfds_name = "wmt14_translate/de-en"
    config.data.source_lang = "en"
    config.data.target_lang = "de"
    config.data.vocab_size = 32_000
    config.data.character_coverage = 0.9995
    config.data.spm_max_sentences = 2_000_000
    config.data.max_source_length = 256
    config.data.max_target_length = 256
    # About 25k target tokens per step: 96 packed rows of 256 tokens on 1 to 32 data-parallel
    # devices, rounded up to a multiple of the devices beyond (128 rows on 64).
    config.data.batch_size = 0
    config.data.tokens_per_batch = 24_576
    # Optimizer and learning-rate schedule.
    config.optimizer = optimizer_section()
    # Steps, logging, checkpoints; dropout masks from RngBitGenerator (cheap on a TPU).
    config.train = train_section(dropout_rng_impl="rbg")
    # Device mesh.
    config.mesh = mesh_section()
    # Decoding and BLEU.
    config.eval = eval_section()
    return config


def bert_model_section() -> ml_collections.ConfigDict:
    """BertConfig's fields (described there; its defaults are BERT-base), less vocab_size
    and pad_id, which come from the tokenizer."""
    return dataclass_section(BertConfig, exclude=("vocab_size", "pad_id"))


def bert_eval_section() -> ml_collections.ConfigDict:
    evaluation = ml_collections.ConfigDict()
    # Examples per evaluation batch.
    evaluation.batch_size = 64
    # Held-out pretraining batches per evaluation (the same examples every time).
    evaluation.num_batches = 16
    return evaluation


def bert_run_config() -> ml_collections.ConfigDict:
    """BERT-base pretraining (Devlin et al. 2019): the run config of configs/bert_base.py,
    from which the other BERT configs start."""
    config = ml_collections.ConfigDict()
    # What is trained: translation | bert_pretraining | bert_classification |
    # bert_token_classification | bert_question_answering (jaxtrans/tasks/).
    config.task = "bert_pretraining"
    # Seed of parameter initialisation, dropout, example making and shuffling.
    config.seed = 0
    # Model shape and regularisation.
    config.model = bert_model_section()
    # bfloat16 compute with float32 parameters (CPU configs set float32). BERT's attention
    # dropout (attention_probs_dropout_prob 0.1) stays: it sends attention to xla.
    config.model.dtype = "bfloat16"
    # Text, tokenizer, masking and batching (jaxtrans.data.bert.bert_data_config).
    config.data = get_bert_data_config()
    config.data.vocab_size = 30_000
    config.data.character_coverage = 0.9995
    config.data.max_seq_length = 128
    config.data.max_predictions_per_seq = 20
    config.data.batch_size = 256
    # Optimizer and learning-rate schedule.
    config.optimizer = optimizer_section()
    config.optimizer.name = "adamw"
    config.optimizer.b2 = 0.999
    config.optimizer.eps = 1e-6
    config.optimizer.weight_decay = 0.01
    config.optimizer.schedule = "linear"
    config.optimizer.learning_rate = 1e-4
    config.optimizer.warmup_steps = 10_000
    config.optimizer.clip_norm = 1.0
    # Steps, logging, checkpoints; dropout masks from RngBitGenerator (cheap on a TPU).
    config.train = train_section(dropout_rng_impl="rbg")
    config.train.num_steps = 1_000_000
    config.train.checkpoint_every = 10_000
    config.train.eval_every = 10_000
    # Device mesh.
    config.mesh = mesh_section()
    # Held-out MLM/NSP evaluation.
    config.eval = bert_eval_section()
    return config


def task_sections(task: str) -> dict[str, Any]:
    """The sections of task ``task``'s run config whose fields are known: name -> dataclass,
    or ConfigDict of defaults. The run sections every task has, and the model, data and
    eval sections of translation or of the BERT tasks (which share theirs, each adding a
    few fields of its own; question answering's data and eval fields are known too); an
    unknown task has the run sections only."""
    sections: dict[str, Any] = dict(RUN_SECTIONS)
    if task == "translation":
        sections.update(model=TransformerConfig, data=get_data_config(), eval=TranslationEvalConfig)
    elif task == "bert_question_answering":
        data = add_qa_data_fields(get_bert_data_config())
        sections.update(model=BertConfig, data=data, eval=QuestionAnsweringEvalConfig)
    elif task.startswith("bert_"):
        sections.update(model=BertConfig, data=get_bert_data_config(), eval=bert_eval_section())
    return sections


def complete_run_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A copy of ``config`` whose sections hold every field of their dataclass or defaults
    (task_sections): each field a section lacks (a config.json written before the field
    existed) takes its default; a missing section is added whole. Fields it has are left
    as they are. Not filled: the model (its missing fields take the model dataclass's
    defaults when it is built) and the BERT tasks' eval sections (each task writes its
    own few fields)."""
    completed = copy.deepcopy(config)
    sections = task_sections(config.get("task", "translation"))
    sections.pop("model", None)
    if not dataclasses.is_dataclass(sections.get("eval")):
        sections.pop("eval", None)
    with completed.unlocked():
        for name, cls in sections.items():
            if not isinstance(completed.get(name), ml_collections.ConfigDict):
                if name in completed:
                    continue  # not a section: the task's checks say so
                completed[name] = ml_collections.ConfigDict()
            complete_section(completed[name], cls)
    return completed
