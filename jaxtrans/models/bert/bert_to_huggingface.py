"""jaxtrans BERT parameters -> a Hugging Face BERT state dict and config.json: the inverse
of ``bert_from_huggingface.py``.

    check_exportable(config)                        UserError naming what HF BERT lacks
    state = to_state_dict(params, config)           {"bert.embeddings...": [out, in], ...}
    hf = huggingface_config(config, "BertForSequenceClassification", ["neg", "pos"])

The tensors are named as ``save_pretrained`` writes a ``BertFor*`` model: ``bert.`` for
the encoder (with ``bert.pooler`` when the model has a pooler), then the heads present in
``params``: ``cls.predictions`` (masked LM; its decoder weight is the word-embedding
table, tied, so only its bias ``cls.predictions.bias`` is written), ``cls.seq_relationship``
(next sentence), ``classifier`` (sequence or token classification), ``qa_outputs``
(answer spans). Linear layers are ``weight [out, in]``: flax kernels transposed, and the
attention projections ``[d_model, heads, head_dim]`` / ``[heads, head_dim, d_model]``
flattened back to ``[d_model, d_model]``.
"""

from typing import Any

import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.models.bert.bert_model import BertConfig
from jaxtrans.models.layer_stacks import unstack_layers

# The position kinds Hugging Face BERT holds: a learned table of absolute positions
# (position_embedding_type "absolute"; jaxtrans.nn.positions).
POSITIONS = ("learned",)
# jaxtrans activation -> Hugging Face hidden_act.
HIDDEN_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def check_exportable(cfg: BertConfig) -> None:
    """UserError naming the first model setting Hugging Face BERT cannot express."""
    if cfg.norm != "post":
        raise UserError(
            f"model.norm={cfg.norm!r}: Hugging Face BERT has only Post-LN (norm='post'); "
            "this run cannot be exported"
        )
    if cfg.position not in POSITIONS:
        raise UserError(
            f"model.position={cfg.position!r}: Hugging Face BERT has only learned absolute "
            "positions (position='learned'); this run cannot be exported"
        )
    if cfg.activation not in HIDDEN_ACTS:
        raise UserError(
            f"model.activation={cfg.activation!r}: Hugging Face BERT's hidden_act has no "
            f"counterpart; only {', '.join(HIDDEN_ACTS)} can be exported"
        )


def huggingface_config(
    cfg: BertConfig, architecture: str, labels: list[str] | None = None
) -> dict[str, Any]:
    """The config.json of the exported model: ``architecture`` (e.g. BertForPreTraining)
    and, for a classifier head, ``labels`` as id2label / label2id."""
    check_exportable(cfg)
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.d_ff,
        "hidden_act": HIDDEN_ACTS[cfg.activation],
        "hidden_dropout_prob": cfg.dropout_rate,
        "attention_probs_dropout_prob": cfg.attention_dropout_rate,
        "classifier_dropout": cfg.classifier_dropout_rate,
        "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": 0.02,
        "layer_norm_eps": cfg.layer_norm_epsilon,
        "pad_token_id": cfg.pad_id,
        "position_embedding_type": "absolute",
        "is_decoder": False,
        "add_cross_attention": False,
        "tie_word_embeddings": True,
        "dtype": "float32",
    }
    if labels:
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    return config


def _array(value: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(value, dtype=np.float32))


def _linear(state: dict, name: str, params: dict) -> None:
    state[f"{name}.weight"] = _array(params["kernel"]).T
    state[f"{name}.bias"] = _array(params["bias"])


def _norm(state: dict, name: str, params: dict) -> None:
    state[f"{name}.weight"] = _array(params["scale"])
    state[f"{name}.bias"] = _array(params["bias"])


def _attention(state: dict, prefix: str, params: dict, d_model: int) -> None:
    for name in ("query", "key", "value"):
        state[f"{prefix}.self.{name}.weight"] = (
            _array(params[name]["kernel"]).reshape(d_model, d_model).T
        )
        state[f"{prefix}.self.{name}.bias"] = _array(params[name]["bias"]).reshape(d_model)
    out = params["out"]
    state[f"{prefix}.output.dense.weight"] = _array(out["kernel"]).reshape(d_model, d_model).T
    state[f"{prefix}.output.dense.bias"] = _array(out["bias"])


def to_state_dict(params: dict[str, Any], cfg: BertConfig) -> dict[str, np.ndarray]:
    """Params of any jaxtrans BERT model (``bert`` plus its heads) -> float32 numpy tensors
    by Hugging Face name (see the module doc); per-layer or stacked (``scan_layers``)."""
    check_exportable(cfg)
    params = unstack_layers(params)
    known = {"bert", "mlm_head", "nsp_head", "classifier", "qa_outputs"}
    unknown = set(params) - known
    if unknown:
        raise UserError(f"parameters {sorted(unknown)} have no Hugging Face BERT counterpart")
    bert, state = params["bert"], {}
    embeddings = "bert.embeddings"
    state[f"{embeddings}.word_embeddings.weight"] = _array(bert["word_embeddings"]["embedding"])
    state[f"{embeddings}.position_embeddings.weight"] = _array(
        bert["position_embeddings"]["embedding"]
    )
    state[f"{embeddings}.token_type_embeddings.weight"] = _array(
        bert["token_type_embeddings"]["embedding"]
    )
    _norm(state, f"{embeddings}.LayerNorm", bert["embeddings_norm"])
    for i in range(cfg.num_layers):
        layer, prefix = bert["encoder"][f"layer_{i}"], f"bert.encoder.layer.{i}"
        _attention(state, f"{prefix}.attention", layer["self_attention"], cfg.d_model)
        _norm(state, f"{prefix}.attention.output.LayerNorm", layer["self_attention_norm"])
        _linear(state, f"{prefix}.intermediate.dense", layer["feed_forward"]["wi"])
        _linear(state, f"{prefix}.output.dense", layer["feed_forward"]["wo"])
        _norm(state, f"{prefix}.output.LayerNorm", layer["feed_forward_norm"])
    if "pooler" in bert:
        _linear(state, "bert.pooler.dense", bert["pooler"])
    if "mlm_head" in params:
        head = params["mlm_head"]
        _linear(state, "cls.predictions.transform.dense", head["transform"])
        _norm(state, "cls.predictions.transform.LayerNorm", head["transform_norm"])
        state["cls.predictions.bias"] = _array(head["output_bias"])
    if "nsp_head" in params:
        _linear(state, "cls.seq_relationship", params["nsp_head"])
    if "classifier" in params:
        _linear(state, "classifier", params["classifier"])
    if "qa_outputs" in params:
        _linear(state, "qa_outputs", params["qa_outputs"])
    return {name: np.ascontiguousarray(tensor) for name, tensor in state.items()}
