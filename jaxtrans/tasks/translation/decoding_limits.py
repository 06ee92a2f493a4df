"""The largest decoding sizes a translation model can take: settings beyond them are
refused at once with one line naming the limit, instead of a search that never ends or
runs out of memory.

    beam_size, nbest   <= the target vocabulary (model.vocab_size / target_vocab_size)
    max_extra_length   <= model.max_len (learned positions: no output is longer), else
                          MAX_EXTRA_LENGTH (sinusoidal and rotary positions set no limit)
    beam_size x batch_size x (data.max_source_length + max_extra_length)
                       x the decoder's cached keys and values a token <= DECODING_MEMORY_GIB

The limits are far beyond what a translation needs; sizes below 1 are left to
jaxtrans.inference.options.SearchOptions.check, and a model section that is not a valid
TransformerConfig to the model's own check.
"""

from typing import Any

import ml_collections

from jaxtrans.errors import UserError
from jaxtrans.inference.options import SearchOptions
from jaxtrans.models import TransformerConfig

# The most memory one decoding batch may hold, in GiB: more than one accelerator has (the
# decoder runs on one device), so only sizes that no device can decode are refused.
DECODING_MEMORY_GIB = 256
# The most tokens an output may add to its source where the model's positions set no
# limit (sinusoidal, rope): far longer than any sentence, each token one step of the search.
MAX_EXTRA_LENGTH = 65_536

SIZES = ("beam_size", "batch_size", "max_extra_length")


def decoding_model(run_config: ml_collections.ConfigDict) -> TransformerConfig | None:
    """The run config's model section as a TransformerConfig; None where there is none,
    or where it is not a valid one (the task's own check of the model says why)."""
    section = run_config.get("model")
    if not isinstance(section, ml_collections.ConfigDict):
        return None
    try:
        return TransformerConfig.from_dict(section.to_dict())
    except (ValueError, TypeError):
        return None


def cache_bytes_per_token(model: TransformerConfig) -> int:
    """Bytes of decoder state a token costs a beam: the keys and values of every decoder
    layer (self-attention for an output token, cross-attention for a source token)."""
    return 2 * model.num_decoder_layers * model.d_model * model.compute_dtype.itemsize


def check_decoding_sizes(
    options: SearchOptions, run_config: ml_collections.ConfigDict, nbest: Any = None
) -> None:
    """UserError for beam_size, batch_size or max_extra_length (of ``options``, from
    decoding_settings) beyond the limits of the module docstring, for the run config's
    model and data.max_source_length, or for an n-best list (``nbest``, as given) longer
    than the vocabulary, which no beam can hold. The vocabulary is checked only where the
    run config holds its size (a resolved config: a workdir's, a pretrained directory's)."""
    model = decoding_model(run_config)
    sizes = [getattr(options, name) for name in SIZES]
    if model is None or not all(isinstance(s, int) and s >= 1 for s in sizes):
        return
    beam_size, batch_size, max_extra_length = sizes
    if "vocab_size" in run_config.model:
        _check_beam(beam_size, nbest, model.output_vocab_size)
    _check_extra_length(max_extra_length, model)
    data = run_config.get("data") or {}
    source = data.get("max_source_length")
    source = source if isinstance(source, int) and source >= 1 else 0
    if model.position == "learned":
        source = min(source, model.max_len)
    _check_memory(beam_size, batch_size, source, max_extra_length, model)


def _check_beam(beam_size: int, nbest: Any, vocab_size: int) -> None:
    if beam_size > vocab_size:
        raise UserError(
            f"beam_size={beam_size} is wider than the target vocabulary ({vocab_size} tokens): "
            f"the first step has no more than {vocab_size} hypotheses to keep; use a "
            f"beam_size <= {vocab_size}"
        )
    if isinstance(nbest, int) and nbest > vocab_size:
        raise UserError(
            f"nbest={nbest}: the list is drawn from the beam, which holds at most as many "
            f"hypotheses as the target vocabulary has tokens ({vocab_size}); use an "
            f"nbest <= {vocab_size}"
        )


def _check_extra_length(max_extra_length: int, model: TransformerConfig) -> None:
    if model.position == "learned":
        limit = model.max_len
        why = f"the model's learned positions end at model.max_len={limit}, no output is longer"
    else:
        limit = MAX_EXTRA_LENGTH
        why = (
            f"an output may add at most {limit} tokens to its source (the model's "
            f"{model.position} positions set no limit, but each token is one decoding step)"
        )
    if max_extra_length > limit:
        raise UserError(
            f"max_extra_length={max_extra_length}: {why}; use a max_extra_length <= {limit}"
        )


def _check_memory(
    beam_size: int, batch_size: int, source: int, max_extra_length: int, model: TransformerConfig
) -> None:
    per_token = cache_bytes_per_token(model)
    need = beam_size * batch_size * (source + max_extra_length) * per_token
    if need <= DECODING_MEMORY_GIB * 2**30:
        return
    raise UserError(
        f"decoding would hold {need / 2**30:,.0f} GiB: beam_size={beam_size} x "
        f"batch_size={batch_size} x (data.max_source_length={source} + max_extra_length="
        f"{max_extra_length}) tokens x {per_token} bytes of decoder keys and values a token "
        f"(model.num_decoder_layers={model.num_decoder_layers}, d_model={model.d_model}, "
        f"{model.dtype}), over the {DECODING_MEMORY_GIB} GiB a decoding batch may take (more "
        "than one accelerator holds); lower batch_size, beam_size or max_extra_length"
    )
