"""Load a Hugging Face BERT checkpoint directory into jaxtrans parameters.

A checkpoint directory (what ``save_pretrained`` writes, or a download of e.g.
``bert-base-uncased``) holds ``config.json`` and the weights as ``model.safetensors``
(possibly sharded, with ``model.safetensors.index.json``) or ``pytorch_model.bin``.
Nothing is downloaded: the directory must be on disk.

    pretrained = from_huggingface("checkpoints/bert-base-uncased")
    model = BertForClassification(pretrained.config.replace(num_labels=3))
    params = model.init(rng, ids)["params"]
    params = graft_params(params, pretrained.params)   # encoder from the checkpoint

Hugging Face stores a linear layer as ``weight [out, in]``; flax keeps ``kernel [in, out]``,
and our attention projections are ``[d_model, heads, head_dim]`` / ``[heads, head_dim,
d_model]``, so the conversion transposes and reshapes. Older checkpoints name the
LayerNorm parameters ``gamma`` / ``beta`` instead of ``weight`` / ``bias``.
"""

import dataclasses
import json
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.models.bert import BertConfig

_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


@dataclasses.dataclass(frozen=True)
class PretrainedBert:
    """A converted checkpoint.

    params: nested dict of numpy arrays laid out like ``BertForPretraining`` /
        ``BertForClassification`` params: ``bert`` always, and ``mlm_head``,
        ``nsp_head``, ``classifier`` when the checkpoint holds those heads.
    """

    config: BertConfig
    params: dict[str, Any]


def bert_config_from_huggingface(hf: dict[str, Any]) -> BertConfig:
    """Hugging Face ``config.json`` contents -> BertConfig (float32)."""
    if hf.get("model_type") != "bert":
        raise UserError(
            f"config.json has model_type={hf.get('model_type')!r}; only 'bert' checkpoints "
            "can be loaded"
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise UserError("decoder BERT checkpoints are not supported; use an encoder checkpoint")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(
            f"position_embedding_type={hf['position_embedding_type']!r} is not supported; "
            "only 'absolute' position embeddings can be loaded"
        )
    act = hf.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise UserError(f"hidden_act={act!r} is not supported; use one of {sorted(_ACTIVATIONS)}")
    num_labels = len(hf["id2label"]) if hf.get("id2label") else hf.get("num_labels", 2)
    return BertConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        num_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        activation=_ACTIVATIONS[act],
        dropout_rate=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout_rate=hf.get("attention_probs_dropout_prob", 0.1),
        max_len=hf.get("max_position_embeddings", 512),
        type_vocab_size=hf.get("type_vocab_size", 2),
        layer_norm_epsilon=hf.get("layer_norm_eps", 1e-12),
        pad_id=hf.get("pad_token_id") or 0,
        num_labels=num_labels,
        classifier_dropout_rate=hf.get("classifier_dropout"),
    )


def load_state_dict(directory: Path) -> dict[str, np.ndarray]:
    """Read the weights of a checkpoint directory as numpy arrays keyed by HF names."""
    from safetensors.numpy import load_file

    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    legacy = directory / "pytorch_model.bin"
    if single.exists():
        return load_file(single)
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state = {}
        for shard in shards:
            state.update(load_file(directory / shard))
        return state
    if legacy.exists():
        return _load_torch_state_dict(legacy)
    raise UserError(
        f"{directory} has no model.safetensors or pytorch_model.bin; "
        "pass a Hugging Face checkpoint directory"
    )


def _load_torch_state_dict(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise UserError(
            f"reading {path} needs PyTorch; install torch or convert it to model.safetensors"
        ) from None
    # weights_only=True refuses arbitrary pickled objects: tensors and containers only.
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items()}


class _Weights:
    """Looks up HF tensors by name, accepting ``bert.``-less names and gamma/beta."""

    def __init__(self, state: dict[str, np.ndarray]):
        self.state = state

    def has(self, name: str) -> bool:
        return self._find(name) is not None

    def _find(self, name: str) -> str | None:
        candidates = [name]
        if name.startswith("bert."):  # a bare BertModel saves without the prefix
            candidates.append(name.removeprefix("bert."))
        for c in list(candidates):
            if c.endswith("LayerNorm.weight"):
                candidates.append(c.removesuffix("weight") + "gamma")
            if c.endswith("LayerNorm.bias"):
                candidates.append(c.removesuffix("bias") + "beta")
        return next((c for c in candidates if c in self.state), None)

    def __getitem__(self, name: str) -> np.ndarray:
        key = self._find(name)
        if key is None:
            raise UserError(f"the checkpoint has no tensor {name!r}; is it a BERT checkpoint?")
        return np.asarray(self.state[key], dtype=np.float32)

    def linear(self, prefix: str) -> dict[str, np.ndarray]:
        return {"kernel": self[f"{prefix}.weight"].T, "bias": self[f"{prefix}.bias"]}

    def norm(self, prefix: str) -> dict[str, np.ndarray]:
        return {"scale": self[f"{prefix}.weight"], "bias": self[f"{prefix}.bias"]}


def _attention(w: _Weights, prefix: str, cfg: BertConfig) -> dict[str, Any]:
    heads, head_dim, d = cfg.num_heads, cfg.head_dim, cfg.d_model
    params = {}
    for name in ("query", "key", "value"):
        params[name] = {
            "kernel": w[f"{prefix}.self.{name}.weight"].T.reshape(d, heads, head_dim),
            "bias": w[f"{prefix}.self.{name}.bias"].reshape(heads, head_dim),
        }
    params["out"] = {
        "kernel": w[f"{prefix}.output.dense.weight"].T.reshape(heads, head_dim, d),
        "bias": w[f"{prefix}.output.dense.bias"],
    }
    return params


def convert_state_dict(state: dict[str, np.ndarray], cfg: BertConfig) -> dict[str, Any]:
    """HF BERT tensors -> jaxtrans params (see ``PretrainedBert.params``)."""
    w = _Weights(state)
    encoder = {}
    for i in range(cfg.num_layers):
        p = f"bert.encoder.layer.{i}"
        encoder[f"layer_{i}"] = {
            "self_attention": _attention(w, f"{p}.attention", cfg),
            "self_attention_norm": w.norm(f"{p}.attention.output.LayerNorm"),
            "feed_forward": {
                "wi": w.linear(f"{p}.intermediate.dense"),
                "wo": w.linear(f"{p}.output.dense"),
            },
            "feed_forward_norm": w.norm(f"{p}.output.LayerNorm"),
        }
    bert = {
        "word_embeddings": {"embedding": w["bert.embeddings.word_embeddings.weight"]},
        "position_embeddings": {"embedding": w["bert.embeddings.position_embeddings.weight"]},
        "token_type_embeddings": {"embedding": w["bert.embeddings.token_type_embeddings.weight"]},
        "embeddings_norm": w.norm("bert.embeddings.LayerNorm"),
        "encoder": encoder,
    }
    if w.has("bert.pooler.dense.weight"):
        bert["pooler"] = w.linear("bert.pooler.dense")
    params: dict[str, Any] = {"bert": bert}

    if w.has("cls.predictions.transform.dense.weight"):
        decoder = "cls.predictions.decoder.weight"
        if w.has(decoder) and not np.array_equal(w[decoder], bert["word_embeddings"]["embedding"]):
            raise UserError(
                "the checkpoint's masked-LM output is not tied to the word embeddings; "
                "jaxtrans BERT always ties them"
            )
        bias = "cls.predictions.bias"
        if not w.has(bias):
            bias = "cls.predictions.decoder.bias"
        params["mlm_head"] = {
            "transform": w.linear("cls.predictions.transform.dense"),
            "transform_norm": w.norm("cls.predictions.transform.LayerNorm"),
            "output_bias": w[bias],
        }
    if w.has("cls.seq_relationship.weight"):
        params["nsp_head"] = w.linear("cls.seq_relationship")
    if w.has("classifier.weight"):
        params["classifier"] = w.linear("classifier")
    return params


def from_huggingface(path: str | Path) -> PretrainedBert:
    """Load a Hugging Face BERT checkpoint directory (no network access).

    Returns the BertConfig the checkpoint was trained with and its parameters as numpy
    float32 arrays. Raises UserError for a missing directory or file, another model
    type, or BERT variants this model does not implement.
    """
    directory = Path(path)
    config_file = directory / "config.json"
    if not config_file.exists():
        raise UserError(f"{config_file} not found; pass a Hugging Face checkpoint directory")
    config = bert_config_from_huggingface(json.loads(config_file.read_text()))
    params = convert_state_dict(load_state_dict(directory), config)
    return PretrainedBert(config=config, params=params)


def graft_params(target: Any, source: dict[str, Any], path: str = "") -> Any:
    """Replace the leaves of ``target`` (e.g. freshly initialised params) found in ``source``.

    Subtrees missing from ``source`` (a new classifier head) keep their values. Boxed
    leaves (``nn.Partitioned`` logical-axis metadata) stay boxed. Shapes must agree.
    """
    if isinstance(source, dict):
        if not isinstance(target, dict):
            raise UserError(f"checkpoint parameter {path!r} has no counterpart in the model")
        unknown = set(source) - set(target)
        if unknown:
            raise UserError(f"checkpoint parameters {sorted(unknown)} under {path!r} are unknown")
        out = dict(target)
        for key, value in source.items():
            out[key] = graft_params(target[key], value, f"{path}/{key}")
        return out
    boxed = isinstance(target, nn.meta.AxisMetadata)
    current = target.unbox() if boxed else target
    if tuple(current.shape) != tuple(source.shape):
        raise UserError(
            f"parameter {path!r} has shape {tuple(source.shape)} in the checkpoint but "
            f"{tuple(current.shape)} in the model; make the model config match the checkpoint"
        )
    value = jax.numpy.asarray(source, dtype=current.dtype)
    return target.replace_boxed(value) if boxed else value
