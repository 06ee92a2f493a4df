"""The files of a Hugging Face checkpoint directory: its weight files, read as numpy
arrays, and the fields of its ``config.json``, read and checked.

A directory holds ``model.safetensors`` or ``pytorch_model.bin``, each possibly sharded
with an index (``*.index.json``) naming the shard files. PyTorch files are read with
``weights_only=True``: tensors and containers, never arbitrary pickled objects. Nothing
here knows a model: the converters (``bert/``, ``marian/``) map the names.

A ``config.json`` field of the wrong kind is a one-line error naming the key
(``whole_number``, ``rate``, ``flag``).
"""

import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrans.errors import UserError, describe

# Weight files of a checkpoint directory: one file, or an index naming shard files.
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TORCH_FILE = "pytorch_model.bin"
TORCH_INDEX = "pytorch_model.bin.index.json"


def shard_files(directory: Path, index: Path) -> list[Path]:
    """The shard files an index's ``weight_map`` names, each inside ``directory``.

    An index is data from wherever the checkpoint came from: a shard name that is
    absolute or climbs out with ``..`` is refused, so loading reads no file outside the
    checkpoint directory. (Shards may be symbolic links, as in the Hugging Face cache,
    whose snapshot files link to ``../../blobs/``; the names are what is checked.)
    """
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, RecursionError) as error:  # bad JSON, UTF-8, nesting
        raise UserError(f"{index} is not valid JSON ({describe(error)})") from None
    except (KeyError, TypeError, AttributeError):
        raise UserError(
            f'{index} has no "weight_map" object of tensor name -> shard file'
        ) from None
    shards = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise UserError(f"{index} names the shard {name!r}; expected a file name")
        relative = Path(name)
        if relative.anchor or ".." in relative.parts:
            raise UserError(
                f"{index} names the shard {name!r}, outside {directory}; refusing to read it "
                "(an index may only name files in its own directory)"
            )
        path = directory / relative
        if not path.is_file():
            raise UserError(f"{index} names the shard {name!r}, but {path} is not a file")
        shards.append(path)
    return shards


def load_state_dict(directory: Path) -> dict[str, np.ndarray]:
    """Read the weights of a checkpoint directory as numpy arrays keyed by HF names."""
    single, safetensors_index = directory / SAFETENSORS_FILE, directory / SAFETENSORS_INDEX
    legacy, torch_index = directory / TORCH_FILE, directory / TORCH_INDEX
    if single.exists():
        return _load_safetensors(single)
    if safetensors_index.exists():
        state = {}
        for shard in shard_files(directory, safetensors_index):
            state.update(_load_safetensors(shard))
        return state
    if legacy.exists():
        return _load_torch_state_dict(legacy)
    if torch_index.exists():
        state = {}
        for shard in shard_files(directory, torch_index):
            state.update(_load_torch_state_dict(shard))
        return state
    raise UserError(
        f"{directory} has no {SAFETENSORS_FILE} or {TORCH_FILE}; "
        "pass a Hugging Face checkpoint directory"
    )


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(
            f"{path} cannot be read as safetensors ({describe(error)}); "
            "download the checkpoint again"
        ) from None


def _load_torch_state_dict(path: Path) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise UserError(
            f"reading {path} needs PyTorch; install torch or convert it to model.safetensors"
        ) from None
    # weights_only=True refuses arbitrary pickled objects: tensors and containers only.
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged file fails as RuntimeError, UnpicklingError, ...
        raise UserError(
            f"{path} cannot be read as PyTorch weights ({describe(error)}); "
            "download the checkpoint again"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"{path} holds no state dict (tensor name -> tensor)")
    return {k: v.float().numpy() for k, v in state.items()}


# ------------------------------------------------------------ config.json fields


def whole_number(hf: dict[str, Any], key: str, default: int | None = None, low: int = 1) -> int:
    """``hf[key]`` (else ``default``): an int >= ``low``."""
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{key}={value!r}; expected a whole number >= {low}")
    return value


def rate(hf: dict[str, Any], key: str, default: float) -> float:
    """``hf[key]`` (else ``default``): a number in [0, 1), e.g. a dropout rate."""
    value = hf.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise UserError(f"{key}={value!r}; expected a number in [0, 1)")
    return float(value)


def flag(hf: dict[str, Any], key: str, default: bool) -> bool:
    """``hf[key]`` (else ``default``): true or false."""
    value = hf.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"{key}={value!r}; expected true or false")
    return value
