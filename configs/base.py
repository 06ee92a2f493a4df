"""Transformer base on WMT14 EN->DE (Vaswani et al. 2017): 512/8/2048, 6+6 layers.

Shared 32k SentencePiece vocabulary, Adam(0.9, 0.98, 1e-9) with the Noam schedule
(warmup 4000), label smoothing 0.1, dropout 0.1, about 25k target tokens per step,
100k steps; evaluation with beam 4 and length penalty 0.6.

    python train.py --config configs/base.py --workdir runs/wmt_base
"""

import ml_collections

from configs._dataclass_section import dataclass_section
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.models.transformer import TransformerConfig
from jaxtrans.training import sharding


def get_model_config() -> ml_collections.ConfigDict:
    """TransformerConfig's fields (described there), less those set at run time: vocab_size
    and target_vocab_size come from the tokenizer, pad_id is the vocabulary's, and decode
    is switched on by the decoding code."""
    return dataclass_section(
        TransformerConfig,
        exclude=("vocab_size", "target_vocab_size", "pad_id", "decode"),
        # 1e-6 as in tensor2tensor, the paper's code (and Flax's LayerNorm); TransformerConfig
        # keeps PyTorch's 1e-5, which the parity tests compare against.
        layer_norm_epsilon=1e-6,
    )


def get_optimizer_config() -> ml_collections.ConfigDict:
    optimizer = ml_collections.ConfigDict()
    # adam | adamw (decoupled weight decay on matrices, not on biases or LayerNorm).
    optimizer.name = "adam"
    # Adam beta1.
    optimizer.b1 = 0.9
    # Adam beta2 (0.98 in the paper).
    optimizer.b2 = 0.98
    # Adam epsilon (1e-9 in the paper).
    optimizer.eps = 1e-9
    # AdamW weight decay (ignored by adam).
    optimizer.weight_decay = 0.0
    # noam: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); linear: warm-up
    # to learning_rate then linear decay to 0; constant: learning_rate.
    optimizer.schedule = "noam"
    # Noam schedule factor (1.0 is the paper's formula).
    optimizer.noam_factor = 1.0
    # Peak learning rate of the linear and constant schedules.
    optimizer.learning_rate = 1e-3
    # Warm-up steps (4000 in the paper).
    optimizer.warmup_steps = 4000
    # Clip gradients to this global norm (0 disables clipping).
    optimizer.clip_norm = 1.0
    return optimizer


def get_train_config() -> ml_collections.ConfigDict:
    train = ml_collections.ConfigDict()
    # Optimizer updates in the whole run (0: count them from train.num_epochs).
    train.num_steps = 100_000
    # Passes over the training data (translation runs), instead of num_steps: the steps of
    # one epoch are counted from the packed training data at start; 0 = use num_steps.
    train.num_epochs = 0
    # Wall-clock budget in minutes, 0 = no limit. Counted from the program's start (the
    # tokenizer, compilation and data loading included; a resumed run counts from its own
    # start); when it is spent the run saves a checkpoint, runs the final dev evaluation and
    # says why it stopped. With num_steps=0 and num_epochs=0 the run lasts until then (the
    # console estimates its steps from the step time), and a linear schedule decays to 0 at
    # the last step that fits, estimated from the step time at the second log (the steps
    # compiled again; the length is kept in checkpoints, so a resumed run keeps it).
    train.max_minutes = 0.0
    # Log train metrics every this many steps.
    train.log_every = 100
    # Save a checkpoint every this many steps (and always at the end and on SIGTERM).
    train.checkpoint_every = 2_000
    # Evaluate on the dev split every this many steps (0 disables).
    train.eval_every = 5_000
    # Checkpoints kept on disk (the newest ones).
    train.keep_checkpoints = 5
    # Write checkpoints in the background while training continues.
    train.async_checkpoints = True
    # Label smoothing epsilon (0.1 in the paper).
    train.label_smoothing = 0.1
    # Split each step's batch into this many micro-batches (same update, less memory).
    train.grad_accum_steps = 1
    # A NaN/Inf loss or gradient: "stop" (name the step and tensor, exit) or "skip" the
    # update and count it. Either way no non-finite state is ever saved.
    train.on_nonfinite = "stop"
    # Peak FLOP/s of one device for MFU (0 = look the device up in a table).
    train.peak_flops_per_device = 0.0
    # Persistent XLA compilation cache directory ("" disables it).
    train.compilation_cache_dir = "~/.cache/jaxtrans/xla"
    return train


def get_mesh_config() -> ml_collections.ConfigDict:
    mesh = ml_collections.ConfigDict()
    # Data-parallel devices (-1 = all devices not used by the other axes).
    mesh.data = -1
    # Fully sharded data-parallel devices (parameters split along d_model).
    mesh.fsdp = 1
    # Tensor-parallel devices (heads and feed-forward width split).
    mesh.tensor = 1
    # Logical axis -> mesh axes, comma-separated logical=axes: the axes joined by +, none =
    # not split. Given rules replace those of this default table, the others stay, e.g.
    # --config.mesh.rules=embed=none,mlp=fsdp+tensor. Parameters (jaxtrans/nn/layers.py)
    # and the train step's activations (jaxtrans/nn/blocks.py) carry these logical names.
    mesh.rules = sharding.rules_text(sharding.LOGICAL_RULES)
    return mesh


def get_eval_config() -> ml_collections.ConfigDict:
    evaluation = ml_collections.ConfigDict()
    # Beam size (4 in the paper; 1 = greedy).
    evaluation.beam_size = 4
    # Length penalty alpha: beam scores are divided by ((5 + length) / 6) ** alpha, or by
    # length ** alpha with penalty_form "hf".
    evaluation.alpha = 0.6
    # The length penalty's form: "gnmt" (((5 + length) / 6) ** alpha, of the GNMT paper) or
    # "hf" (length ** alpha: Hugging Face's and Marian's length_penalty, as transformers'
    # generate decodes).
    evaluation.penalty_form = "gnmt"
    # Longest output = source length + this.
    evaluation.max_extra_length = 50
    # Sentences per decoding batch.
    evaluation.batch_size = 64
    # Decode the dev set and report BLEU at each evaluation during training.
    evaluation.bleu_during_training = True
    # Use only the first N dev sentences during training (0 = all).
    evaluation.dev_sentences = 0
    return evaluation


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    # What is trained: translation | bert_pretraining | bert_classification |
    # bert_token_classification | bert_question_answering (jaxtrans/tasks/).
    config.task = "translation"
    # Seed of parameter initialisation, dropout and data shuffling.
    config.seed = 0
    # Model shape and regularisation.
    config.model = get_model_config()
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
    # 96 packed rows of 256 target tokens: about 25k target tokens per step.
    config.data.batch_size = 96
    # Optimizer and learning-rate schedule.
    config.optimizer = get_optimizer_config()
    # Steps, logging, checkpoints.
    config.train = get_train_config()
    # Device mesh.
    config.mesh = get_mesh_config()
    # Decoding and BLEU.
    config.eval = get_eval_config()
    return config
