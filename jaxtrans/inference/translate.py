"""Translate lists of sentences: tokenise, batch by length, decode, detokenise, restore order.

Sentences are sorted by length so that a batch holds similar lengths, and every batch
is padded to a static shape (rows: the batch size or a power of two below it; source
length: a multiple of ``length_multiple``) so the compiled decoder is reused. Results
do not depend on the batching: padding rows and positions are masked out and every
sentence keeps its own maximum output length (its source length + max_extra_length).
"""

import math
from collections.abc import Sequence
from typing import Protocol

import flax.linen as nn
import jax
import numpy as np

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import generate
from jaxtrans.inference.search import PENALTY_FORMS, PenaltyForm, row_keys
from jaxtrans.models import TransformerConfig
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID


class TranslationTokenizer(Protocol):
    """What translation needs of a tokenizer (data/translation/tokenizer.py's Tokenizer has it)."""

    def encode_source(self, text: str) -> list[int]: ...

    def decode_target(self, ids: list[int]) -> str: ...


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def _batch_rows(n: int, batch_size: int) -> int:
    """Static row count for n sentences: the batch size, or the next power of two below it."""
    return min(batch_size, 1 << max(0, math.ceil(math.log2(n))))


def hypothesis_ids(tokens: np.ndarray, eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> list[int]:
    """One row of decoder output [max_len] -> the ids before EOS, without PAD."""
    out = []
    for t in tokens.tolist():
        if t == eos_id:
            break
        if t != pad_id:
            out.append(t)
    return out


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """UserError unless temperature >= 0, top_k a whole number >= 0 and 0 < top_p <= 1."""
    if not temperature >= 0:
        raise UserError(f"temperature={temperature}: must be >= 0 (0: greedy)")
    if isinstance(top_k, bool) or not float(top_k).is_integer() or top_k < 0:
        raise UserError(f"top_k={top_k}: must be a whole number >= 0 (0: all tokens)")
    if not 0 < top_p <= 1:
        raise UserError(f"top_p={top_p}: must be in (0, 1] (1.0: all tokens)")


def translate_ids(
    config: TransformerConfig,
    params,
    sources: Sequence[Sequence[int]],
    *,
    batch_size: int = 64,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    length_multiple: int = 16,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    penalty_form: PenaltyForm = "gnmt",
    sampling: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
) -> list[list[int]]:
    """Source id lists (EOS included) -> hypothesis id lists (EOS and PAD removed).

    A hypothesis has at most len(source) + max_extra_length tokens, EOS included.
    penalty_form: beam search's length penalty, "gnmt" ((5 + len) / 6) ** alpha or "hf"
    len ** alpha (as Hugging Face's length_penalty=alpha).

    sampling: draw each token (search.sample_search: temperature, then top_k, then top_p;
    temperature 0 is greedy) instead of searching; beam_size is then not used. Sentence i
    samples with the key fold_in(key(seed), i): the same seed and sources give the same
    output, whatever the batch size.
    """
    if batch_size < 1 or beam_size < 1 or max_extra_length < 1 or length_multiple < 1:
        raise UserError(
            f"batch_size={batch_size}, beam_size={beam_size}, max_extra_length="
            f"{max_extra_length}, length_multiple={length_multiple}: each must be at least 1"
        )
    if alpha < 0:
        raise UserError(f"alpha={alpha}: the length penalty exponent must be >= 0")
    if penalty_form not in PENALTY_FORMS:
        raise UserError(f"penalty_form={penalty_form!r}: use one of {', '.join(PENALTY_FORMS)}")
    if sampling:
        check_sampling(temperature, top_k, top_p)
    params = nn.unbox(params)
    if config.scan_layers:
        # Decoded layer by layer: the scanned decoder would move every layer's key/value
        # cache between its layouts at each token (twice the time; docs/benchmarks.md).
        params, config = unstack_layers(params), config.replace(scan_layers=False)
    params = jax.device_put(params)  # once, not at every batch (host arrays)
    # Learned positions exist only up to max_len: longer sources are cut, outputs capped.
    position_limit = config.max_len if config.position == "learned" else None
    sources = [list(s)[:position_limit] for s in sources]
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))  # longest first
    hypotheses: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        rows = _batch_rows(len(chunk), batch_size)
        src_len = _round_up(max(len(sources[i]) for i in chunk), length_multiple)
        max_len = min(src_len + max_extra_length, position_limit or math.inf)
        source = np.full((rows, src_len), pad_id, np.int32)
        max_lengths = np.zeros((rows,), np.int32)  # 0: a dummy row, finished at once
        for row, i in enumerate(chunk):
            source[row, : len(sources[i])] = sources[i]
            max_lengths[row] = len(sources[i]) + max_extra_length
        sample = {}
        if sampling:
            # Dummy rows get numbers of their own, past the sentences'.
            numbers = np.arange(len(sources), len(sources) + rows, dtype=np.int32)
            numbers[: len(chunk)] = chunk
            sample = dict(
                keys=row_keys(seed, numbers),
                temperature=float(temperature),
                top_k=int(top_k),
                top_p=float(top_p),
            )
        tokens = generate(
            params,
            source,
            max_lengths,
            alpha,
            config=config,
            max_len=int(max_len),
            beam_size=beam_size,
            bos_id=bos_id,
            eos_id=eos_id,
            pad_id=pad_id,
            penalty_form=penalty_form,
            **sample,
        )
        tokens = np.asarray(tokens)
        for row, i in enumerate(chunk):
            hypotheses[i] = hypothesis_ids(tokens[row], eos_id, pad_id)
    return hypotheses


def translate(
    config: TransformerConfig,
    params,
    tokenizer: TranslationTokenizer,
    sentences: Sequence[str],
    *,
    batch_size: int = 64,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    length_multiple: int = 16,
    penalty_form: PenaltyForm = "gnmt",
    sampling: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
) -> list[str]:
    """Source sentences -> translations, in the input order.

    Sources are tokenised as in training (``encode_source`` ids + EOS). beam_size 1 is
    greedy search; alpha is the length-penalty exponent of beam search, penalty_form its
    formula ("gnmt" or "hf", see translate_ids). sampling draws the tokens instead
    (temperature, top_k, top_p, seed: see translate_ids).
    """
    sources = [[*tokenizer.encode_source(s), EOS_ID] for s in sentences]
    hypotheses = translate_ids(
        config,
        params,
        sources,
        batch_size=batch_size,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        length_multiple=length_multiple,
        penalty_form=penalty_form,
        sampling=sampling,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    return [tokenizer.decode_target(ids) for ids in hypotheses]
