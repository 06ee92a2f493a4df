"""Fine-tune a pretrained Marian (opus-mt) translation model on your own sentence pairs.

Starts from --config.init_from: a Hugging Face Marian directory on disk (config.json,
model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json). The model's
shape and its tokenizer are the directory's (docs/pretrained.md); the run may change only
dropout and how the model is computed (the model fields below). The recipe of the usual
Marian fine-tuning: a small peak rate with warm-up then linear decay, label smoothing 0.1,
beam 4 with Hugging Face's length penalty (scores / length ** 1.0).

    python train.py --config configs/marian_finetune.py --workdir runs/opus-zh-en-ft \\
        --config.init_from=checkpoints/opus-mt-zh-en \\
        --config.data.train=train.tsv --config.data.dev=dev.tsv --config.data.test=test.tsv
    python evaluate.py --workdir runs/opus-zh-en-ft
"""

import ml_collections

from jaxtrans.config_sections import dataclass_section
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.tasks.run_config import translation_run_config
from jaxtrans.tasks.translation.translation_init import FINE_TUNING_FIELDS

DROPOUT_FIELDS = ("dropout_rate", "attention_dropout_rate", "activation_dropout_rate")


def get_model_config() -> ml_collections.ConfigDict:
    """The TransformerConfig fields fine-tuning may set; all others come from init_from."""
    section = dataclass_section(
        TransformerConfig, only=[f for f in FINE_TUNING_FIELDS if f not in DROPOUT_FIELDS]
    )
    unset = ml_collections.config_dict.placeholder
    # Dropout on the embeddings and each sublayer's output; unset (None): the directory's
    # config.json's dropout (opus-mt: 0.1).
    section.dropout_rate = unset(float)
    # Dropout on the attention weights; unset: the directory's attention_dropout (opus-mt: 0).
    section.attention_dropout_rate = unset(float)
    # Dropout inside the feed-forward layers; unset: the directory's activation_dropout
    # (opus-mt: 0).
    section.activation_dropout_rate = unset(float)
    return section


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    # The Marian directory to fine-tune (required).
    config.init_from = ""
    config.model = get_model_config()
    # bfloat16 compute with float32 parameters, as configs/base.py.
    config.model.dtype = "bfloat16"

    # Your sentence pairs: --config.data.train / dev / test (TSV or JSONL files; TFDS with
    # --config.data.tfds_name). The languages name TFDS features and pick BLEU's tokenizer
    # (zh for a Chinese target); unset, BLEU looks at the references.
    config.data.tfds_name = ""
    config.data.source_lang = ""
    config.data.target_lang = ""
    config.data.max_source_length = 128
    config.data.max_target_length = 128
    config.data.batch_size = 32
    config.data.tokens_per_batch = 0

    config.optimizer.schedule = "linear"
    config.optimizer.learning_rate = 5e-5
    config.optimizer.warmup_steps = 200

    config.train.num_steps = 5000
    config.train.log_every = 50
    config.train.checkpoint_every = 500
    config.train.eval_every = 1000
    config.train.keep_checkpoints = 3

    config.eval.alpha = 1.0
    config.eval.penalty_form = "hf"
    config.eval.batch_size = 32
    config.eval.dev_sentences = 500
    return config
