"""BERT-base's shapes against Hugging Face's parameter count, and the pretraining step's
analytic FLOPs against XLA's cost analysis."""

import os
import sys

from paths import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from jaxtrans.models.bert.bert_model import BertForPretraining
from jaxtrans.tasks.bert.bert_pretraining import BertPretrainingTask
from jaxtrans.tasks.bert.bert_task import bert_config

sys.path.insert(0, REPO)

from configs import bert_base, bert_demo  # noqa: E402


def test_bert_base_config_has_the_parameters_of_huggingface_bert_base():
    config = bert_base.get_config()
    model_config = bert_config({**config.model.to_dict(), "vocab_size": 30522, "pad_id": 0})
    ids = jnp.ones((1, 8), jnp.int32)
    shapes = jax.eval_shape(
        lambda: BertForPretraining(model_config).init(jax.random.key(0), ids)["params"]
    )
    ours = sum(np.prod(x.shape) for x in jax.tree.leaves(nn.unbox(shapes)))
    with torch.device("meta"):
        reference = transformers.BertForPreTraining(transformers.BertConfig())
    assert ours == sum(p.numel() for p in reference.parameters())  # tied decoder counted once


def test_pretraining_step_flops_match_xla_matmul_count():
    """The analytic matmul count against XLA's cost analysis of one forward pass, with ReLU
    and shapes where elementwise work (softmax, LayerNorm, biases) stays under 2%."""
    config = bert_demo.get_config()
    config.update_from_flattened_dict(
        {"model.d_model": 256, "model.d_ff": 1024, "model.num_layers": 2,
         "model.activation": "relu",
         "data.batch_size": 2, "data.max_seq_length": 64, "data.max_predictions_per_seq": 10}
    )  # fmt: skip
    model_config = bert_config({**config.model.to_dict(), "vocab_size": 1000, "pad_id": 0})
    task = BertPretrainingTask(config, model_config, tokenizer=None)
    ids, positions = jnp.ones((2, 64), jnp.int32), jnp.zeros((2, 10), jnp.int32)
    params = jax.eval_shape(
        lambda: nn.unbox(task.model.init(jax.random.key(0), ids, masked_positions=positions))
    )["params"]
    forward = jax.jit(lambda p: task.model.apply({"params": p}, ids, ids, ids, positions))
    xla = forward.lower(params).cost_analysis()["flops"]
    assert task.step_flops() / 3 == pytest.approx(xla, rel=0.02)
