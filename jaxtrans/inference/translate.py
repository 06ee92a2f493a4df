"""Translate lists of sentences: tokenise, batch by length, decode, detokenise, restore order.

Sentences are sorted by length so that a batch holds similar lengths, and every batch
is padded to one of a few fixed shapes (jaxtrans.inference.length_buckets: rows the batch
size, lengths up a ladder of ``length_multiple`` times 1, 2, ..., 8, 10, 12, 14, 16, 20,
...) so that a few compiled decoders serve any input. Results do not depend on the batching: padding
rows and positions are masked out and every sentence keeps its own maximum output length
(its source length + max_extra_length, plus its forced target prefix if it has one).

A forced target prefix (``prefix``: one text for every sentence or one a sentence) is
tokenised as a target (``encode_target``, no EOS); each output starts with its prefix's
tokens and goes on from there (jaxtrans.inference.search).

``config`` and ``params`` are one model's, or an ensemble's: a tuple of configs and a
tuple of parameter trees, one a member (jaxtrans.inference.ensemble).

Over several devices (``rows``: a sharding of a batch's rows, e.g. a training mesh's
data and fsdp axes) the parameters stay as they are laid out (over several processes too:
never gathered to one), each batch's rows are split over the devices (``rows``'s parts
times batch_size rows, batch_size a part) and the tokens are gathered whole onto every
process, so every host gets the same translations as one device gives.
"""

from collections.abc import Sequence
from typing import Any, Protocol

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding

from jaxtrans.errors import UserError
from jaxtrans.inference.decoding import generate
from jaxtrans.inference.ensemble import ModelConfig, is_ensemble, members
from jaxtrans.inference.length_buckets import LengthBatch, decoded_batches, length_batches
from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.inference.search import row_keys
from jaxtrans.models.layer_stacks import unstack_layers
from jaxtrans.vocab import BOS_ID, EOS_ID, PAD_ID


class TranslationTokenizer(Protocol):
    """What translation needs of a tokenizer (data/translation/tokenizer.py's Tokenizer has it)."""

    def encode_source(self, text: str) -> list[int]: ...

    def encode_target(self, text: str) -> list[int]: ...

    def decode_target(self, ids: list[int]) -> str: ...


def hypothesis_ids(tokens: np.ndarray, eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> list[int]:
    """One row of decoder output [max_len] -> the ids before EOS, without PAD."""
    out = []
    for t in tokens.tolist():
        if t == eos_id:
            break
        if t != pad_id:
            out.append(t)
    return out


def check_prefixes(
    prefixes: Sequence[Sequence[int]] | None, count: int, reserved: Sequence[int]
) -> None:
    """UserError unless there is one prefix a sentence (or None) and none holds a reserved
    id (PAD, BOS, EOS: a prefix is target text)."""
    if prefixes is None:
        return
    if len(prefixes) != count:
        raise UserError(f"{len(prefixes)} prefixes for {count} sentences; give one a sentence")
    for i, prefix in enumerate(prefixes):
        wrong = sorted(set(map(int, prefix)) & set(reserved))
        if wrong:
            raise UserError(
                f"the prefix of sentence {i} holds the reserved id {wrong[0]} (PAD, BOS or "
                "EOS); a prefix is target text without them"
            )


def target_prefixes(
    tokenizer: TranslationTokenizer, prefix: str | Sequence[str] | None, count: int
) -> list[list[int]] | None:
    """The target ids of ``prefix`` for each of ``count`` sentences: one text for all, or a
    list of one text a sentence; None for no prefix."""
    if prefix is None:
        return None
    texts = [prefix] * count if isinstance(prefix, str) else list(prefix)
    if len(texts) != count:
        raise UserError(f"{len(texts)} prefixes for {count} sentences; give one a sentence")
    encoded = {text: tokenizer.encode_target(text) if text else [] for text in set(texts)}
    return [encoded[text] for text in texts]


def decoding_params(config: ModelConfig, params, placed: bool = False) -> tuple[ModelConfig, Any]:
    """(config, params) as decoding wants them: unboxed, layer by layer, on the device (or
    with ``placed`` where they are: laid out over a mesh); an ensemble's (tuples,
    jaxtrans.inference.ensemble) member by member."""
    if is_ensemble(config):
        pairs = [decoding_params(c, p, placed) for c, p in members(config, params)]
        return tuple(c for c, _ in pairs), tuple(p for _, p in pairs)
    params = nn.unbox(params)
    if config.scan_layers:
        # Decoded layer by layer: the scanned decoder would move every layer's key/value
        # cache between its layouts at each token (twice the time; docs/benchmarks.md).
        params, config = unstack_layers(params), config.replace(scan_layers=False)
    if placed:
        return config, params
    return config, jax.device_put(params)  # once, not at every batch (host arrays)


def row_parts(rows: Sharding) -> int:
    """The parts ``rows`` splits a batch's rows into (its devices, or fewer where parts
    are repeated, e.g. over a mesh's tensor axis)."""
    devices = len(rows.device_set)  # a row count that every split divides
    return devices // rows.shard_shape((devices,))[0]


def place_rows(x, rows: Sharding) -> jax.Array:
    """A host array (the same on every process) or PRNG key array [rows, ...] -> an array
    whose rows are split by ``rows`` (over several processes too)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = place_rows(np.asarray(jax.random.key_data(x)), rows)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, rows, lambda index: x[index])


def gather_rows(x: jax.Array) -> np.ndarray:
    """An array split over devices (of several processes, maybe) -> the whole, as NumPy,
    on every process."""
    if x.is_fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def translate_ids(
    config: ModelConfig,
    params,
    sources: Sequence[Sequence[int]],
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
    prefixes: Sequence[Sequence[int]] | None = None,
    rows: Sharding | None = None,
) -> list[list[int]]:
    """Source id lists (EOS included) -> hypothesis id lists (EOS and PAD removed), decoded
    as ``options`` say (options.SearchOptions; checked first, a UserError where unusable).

    A hypothesis has at most len(source) + options.max_extra_length tokens, EOS included
    (plus its prefix's). options.penalty_form: beam search's length penalty, "gnmt"
    ((5 + len) / 6) ** alpha or "hf" len ** alpha (as Hugging Face's length_penalty=alpha).

    options.sampling: draw each token (search.sample_search: temperature, then top_k, then
    top_p; temperature 0 is greedy) instead of searching; beam_size is then not used.
    Sentence i samples with the key fold_in(key(seed), i): the same seed and sources give
    the same output, whatever the batch size.

    prefixes: forced target ids, one list a sentence (none of them PAD, BOS or EOS; [] for
    none): each hypothesis starts with its prefix, in greedy search, beam search (every
    beam carries it) and sampling alike.

    rows: decode over the devices of this sharding of a batch's rows (the module's
    docstring), options.batch_size rows a part; None: one device. Every process must call
    with the same sources and settings.
    """
    options.check()
    check_prefixes(prefixes, len(sources), (pad_id, bos_id, eos_id))
    config, params = decoding_params(config, params, placed=rows is not None)
    parts = 1 if rows is None else row_parts(rows)
    hypotheses: list[list[int]] = [[] for _ in sources]
    batches = length_batches(
        config,
        sources,
        prefixes,
        batch_size=options.batch_size * parts,
        max_extra_length=options.max_extra_length,
        length_multiple=options.length_multiple,
        pad_id=pad_id,
        row_multiple=parts,
    )
    place = (lambda x: x) if rows is None else (lambda x: place_rows(x, rows))  # noqa: E731
    ids = dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)

    def decode(batch: LengthBatch) -> jax.Array:
        keys = None
        if options.sampling:
            # Dummy rows get numbers of their own, past the sentences'.
            count = len(batch.max_lengths)
            numbers = np.arange(len(sources), len(sources) + count, dtype=np.int32)
            numbers[: len(batch.indices)] = batch.indices
            keys = place(row_keys(options.seed, numbers))
        prefix = None if batch.prefix is None else place(batch.prefix)
        return generate(
            params,
            place(batch.source),
            place(batch.max_lengths),
            options,
            config=config,
            max_len=batch.max_len,
            keys=keys,
            prefix=prefix,
            **ids,
        )

    read = np.asarray if rows is None else gather_rows
    for batch, tokens in decoded_batches(batches, decode, read=read):
        for row, i in enumerate(batch.indices):
            hypotheses[i] = hypothesis_ids(tokens[row], eos_id, pad_id)
    return hypotheses


def translate(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    sentences: Sequence[str],
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    prefix: str | Sequence[str] | None = None,
    rows: Sharding | None = None,
) -> list[str]:
    """Source sentences -> translations, in the input order.

    Sources are tokenised as in training (``encode_source`` ids + EOS) and decoded as
    ``options`` say (translate_ids). prefix: the text every translation starts with (one
    for all, or a list of one a sentence; "" for none), tokenised by ``encode_target``.
    rows: decode over several devices (translate_ids).
    """
    sources = [[*tokenizer.encode_source(s), EOS_ID] for s in sentences]
    hypotheses = translate_ids(
        config,
        params,
        sources,
        options,
        prefixes=target_prefixes(tokenizer, prefix, len(sentences)),
        rows=rows,
    )
    return [tokenizer.decode_target(ids) for ids in hypotheses]
