"""Fields of a Hugging Face ``config.json``, read and checked: a value of the wrong kind
is a one-line error naming the key (bert/bert_from_huggingface.py for BERT, marian_config.py for
Marian)."""

from typing import Any

from jaxtrans.errors import UserError


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
