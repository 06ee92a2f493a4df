"""Load a Hugging Face BERT checkpoint directory into jaxtrans parameters.

A checkpoint directory (what ``save_pretrained`` writes, or a download of e.g.
``bert-base-uncased``) holds ``config.json`` and the weights as ``model.safetensors``
(possibly sharded, with ``model.safetensors.index.json``) or ``pytorch_model.bin``.
Nothing is downloaded: the directory must be on disk.

    pretrained = from_huggingface("checkpoints/bert-base-uncased")
    model = BertForClassification(pretrained.config.replace(num_labels=3))
    params = model.init(rng, ids)["params"]
    params = graft_params(params, pretrained.params)   # encoder from the checkpoint

The converted parameters are per layer (``layer_{i}``); ``graft_params``
(jaxtrans.models.layer_stacks) stacks them for a model with ``scan_layers``.

Hugging Face stores a linear layer as ``weight [out, in]``; flax keeps ``kernel [in, out]``,
and our attention projections are ``[d_model, heads, head_dim]`` / ``[heads, head_dim,
d_model]``, so the conversion transposes and reshapes. Older checkpoints name the
LayerNorm parameters ``gamma`` / ``beta`` instead of ``weight`` / ``bias``.
"""

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrans.errors import UserError, describe, json_type
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.huggingface_files import load_state_dict, rate, shard_files, whole_number

__all__ = [
    "PretrainedBert",
    "bert_config_from_huggingface",
    "convert_state_dict",
    "from_huggingface",
    "load_state_dict",
    "read_huggingface_config",
    "shard_files",
]

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
        ``nsp_head``, ``classifier``, ``qa_outputs`` when the checkpoint holds those heads.
        The encoder is per layer (``layer_{i}``), as a model without ``scan_layers``
        keeps it; ``layer_stacks.stack_layers`` gives the scanned layout.
    """

    config: BertConfig
    params: dict[str, Any]


# config.json fields read as whole numbers: (field, default; None = required).
_INT_FIELDS = (
    ("vocab_size", None),
    ("hidden_size", None),
    ("num_attention_heads", None),
    ("intermediate_size", None),
    ("num_hidden_layers", None),
    ("max_position_embeddings", 512),
    ("type_vocab_size", 2),
)
# config.json fields read as numbers in [0, 1) (rates, the epsilon): (field, default).
_FLOAT_FIELDS = (
    ("hidden_dropout_prob", 0.1),
    ("attention_probs_dropout_prob", 0.1),
    ("layer_norm_eps", 1e-12),
)


def _whole_number(hf: dict[str, Any], field: str, default: int | None) -> int:
    if hf.get(field, default) is None:
        raise UserError(f"no {field}; is it the config.json of a BERT checkpoint?")
    return whole_number(hf, field, default)


def bert_config_from_huggingface(hf: dict[str, Any]) -> BertConfig:
    """Hugging Face ``config.json`` contents -> BertConfig (float32). Every field read is
    checked: a wrong type or value is a UserError naming the field (callers add the file)."""
    if not isinstance(hf, dict):
        raise UserError(f"{json_type(hf)}, not an object")
    if hf.get("model_type") != "bert":
        raise UserError(
            f"model_type={hf.get('model_type')!r}; only 'bert' checkpoints can be loaded"
        )
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise UserError("decoder BERT checkpoints are not supported; use an encoder checkpoint")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(
            f"position_embedding_type={hf['position_embedding_type']!r} is not supported; "
            "only 'absolute' position embeddings can be loaded"
        )
    act = hf.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise UserError(f"hidden_act={act!r} is not supported; use one of {sorted(_ACTIVATIONS)}")
    ints = {field: _whole_number(hf, field, default) for field, default in _INT_FIELDS}
    rates = {field: rate(hf, field, default) for field, default in _FLOAT_FIELDS}
    id2label = hf.get("id2label")
    if id2label:
        if not isinstance(id2label, dict):
            raise UserError(f"id2label={id2label!r}; expected an object")
        num_labels = len(id2label)
    else:
        num_labels = _whole_number(hf, "num_labels", 2)
    pad_id = hf.get("pad_token_id") or 0
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or pad_id < 0:
        raise UserError(f"pad_token_id={pad_id!r}; expected a token id")
    classifier_dropout = hf.get("classifier_dropout")
    if classifier_dropout is not None:
        classifier_dropout = rate(hf, "classifier_dropout", 0.0)
    try:
        return BertConfig(
            vocab_size=ints["vocab_size"],
            d_model=ints["hidden_size"],
            num_heads=ints["num_attention_heads"],
            d_ff=ints["intermediate_size"],
            num_layers=ints["num_hidden_layers"],
            activation=_ACTIVATIONS[act],
            dropout_rate=rates["hidden_dropout_prob"],
            attention_dropout_rate=rates["attention_probs_dropout_prob"],
            max_len=ints["max_position_embeddings"],
            type_vocab_size=ints["type_vocab_size"],
            layer_norm_epsilon=rates["layer_norm_eps"],
            pad_id=pad_id,
            num_labels=num_labels,
            classifier_dropout_rate=classifier_dropout,
        )
    except (ValueError, TypeError) as error:
        raise UserError(str(error)) from None


def read_huggingface_config(config_file: Path) -> BertConfig:
    """A checkpoint's config.json -> BertConfig; UserError naming the file when it is
    missing, not JSON or not a BERT config."""
    if not config_file.is_file():
        raise UserError(f"{config_file} not found; pass a Hugging Face checkpoint directory")
    try:
        contents = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(f"{config_file} is not valid JSON ({describe(error)})") from None
    try:
        return bert_config_from_huggingface(contents)
    except UserError as error:
        raise UserError(f"{config_file}: {error}") from None


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
    if w.has("classifier.weight"):  # sequence or token classification
        params["classifier"] = w.linear("classifier")
    if w.has("qa_outputs.weight"):  # extractive question answering: start, end
        params["qa_outputs"] = w.linear("qa_outputs")
    return params


def from_huggingface(path: str | Path) -> PretrainedBert:
    """Load a Hugging Face BERT checkpoint directory (no network access).

    Returns the BertConfig the checkpoint was trained with and its parameters as numpy
    float32 arrays. Raises UserError for a missing directory or file, another model
    type, or BERT variants this model does not implement.
    """
    directory = Path(path)
    config = read_huggingface_config(directory / "config.json")
    try:
        params = convert_state_dict(load_state_dict(directory), config)
    except ValueError as error:  # a tensor of another shape than config.json says
        raise UserError(
            f"the weights in {directory} do not fit its config.json ({describe(error)})"
        ) from None
    return PretrainedBert(config=config, params=params)
