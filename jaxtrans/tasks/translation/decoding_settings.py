"""The decoding settings of a translation run, built once into a SearchOptions: each
setting is the given one (evaluate.py's flags, Translator.translate's arguments), else the
run config's eval section (the search's fields, TranslationEvalConfig), else SearchOptions'
default; with the n-best list's length (nbest: given, else 0, none). Also the part of a
report's file name that tells settings apart, and BLEU's language.

    flags / Translator arguments -> decoding_settings(run_config, **given)
        -> Decoding(options: SearchOptions, nbest: int) -> translate / translate_nbest
"""

import dataclasses
from typing import Any, NamedTuple

import ml_collections

from jaxtrans.config_sections import section_values
from jaxtrans.errors import UserError
from jaxtrans.inference.nbest import check_nbest
from jaxtrans.inference.options import DEFAULT_OPTIONS, PENALTY_FORMS, SearchOptions
from jaxtrans.tasks.translation.decoding_limits import check_decoding_sizes
from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig

# The SearchOptions fields the run config's eval section holds; the others (sampling,
# temperature, top_k, top_p, seed, length_multiple) are given or take their defaults.
SECTION_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(SearchOptions)
    if field.name in {f.name for f in dataclasses.fields(TranslationEvalConfig)}
)
# The hypotheses a sentence answers with (never in the run config): 0 is the translation
# alone, N >= 1 an n-best list of the beam's N best with their scores.
NBEST_DEFAULT = 0


class Decoding(NamedTuple):
    """How a translation run decodes: the search's options and the n-best list's length."""

    options: SearchOptions
    # 0: one translation a sentence; N: the beam's N best hypotheses with their scores.
    nbest: int = NBEST_DEFAULT


def decoding_settings(run_config: ml_collections.ConfigDict, **given: Any) -> Decoding:
    """Each SearchOptions field: the given value (not None), else the run config's eval
    section (SECTION_FIELDS), else SearchOptions' default; then nbest, else NBEST_DEFAULT.
    Names that are no setting (evaluate.py's prefix, ...) are ignored. Sampling decodes
    with beam size 1 (a beam size > 1 given with it is an error); an n-best list is drawn
    from the beam (beam_size >= nbest, no sampling). Unusable settings
    (SearchOptions.check) and sizes beyond the model's limits (decoding_limits: the
    vocabulary, the positions, memory) are a UserError."""
    evaluation = section_values(TranslationEvalConfig, run_config.get("eval"))
    values = {}
    for field in dataclasses.fields(SearchOptions):
        value = given.get(field.name)
        if value is None and field.name in SECTION_FIELDS:
            value = getattr(evaluation, field.name)
        if value is not None:
            values[field.name] = value
    if values["penalty_form"] not in PENALTY_FORMS:
        raise UserError(
            f"eval.penalty_form={values['penalty_form']!r}: use gnmt (the length penalty "
            "((5 + len) / 6) ** alpha) or hf (len ** alpha, as transformers' generate)"
        )
    if values.get("sampling"):
        if given.get("beam_size") is not None and int(given["beam_size"]) > 1:
            raise UserError(
                f"sampling with beam_size={given['beam_size']}: sampling draws one "
                "hypothesis; drop beam_size or sampling"
            )
        values["beam_size"] = 1
    options = SearchOptions(**values)
    options.check()
    options = _typed(options)
    check_decoding_sizes(options, run_config, nbest=given.get("nbest"))
    return Decoding(options, _nbest(given.get("nbest"), options))


def _typed(options: SearchOptions) -> SearchOptions:
    """``options`` (checked) with each field of the type of its default (a flag or a
    config may give 1 for 1.0): the same settings name and record themselves alike."""
    typed = {}
    for field in dataclasses.fields(SearchOptions):
        default, value = getattr(DEFAULT_OPTIONS, field.name), getattr(options, field.name)
        typed[field.name] = value if default is None or value is None else type(default)(value)
    return options.replace(**typed)


def _nbest(given: Any, options: SearchOptions) -> int:
    """The checked nbest setting: 0 (none) unless given; then a beam of at least that
    many, without sampling."""
    if not given:
        return NBEST_DEFAULT
    if options.sampling:
        raise UserError(
            f"nbest={given} with sampling: sampling draws one hypothesis a sentence; drop "
            "nbest or sampling"
        )
    check_nbest(given, options.beam_size)
    return int(given)


def decoding_name(options: SearchOptions, run_options: SearchOptions) -> str:
    """The decoding part of a report's file name: ``greedy`` or ``beam{K}``, then
    ``-alpha{A}`` (beam search only: greedy search has no length penalty) and
    ``-maxextra{N}`` where they differ from the run config's eval section
    (``run_options``, from ``decoding_settings(run_config)``), and the length penalty's
    form (``-hf``) where it differs. A sampled decoding is ``sample-t{T}-k{K}-p{P}-s{SEED}``
    (e.g. ``sample-t0.7-k0-p0.9-s0``), then ``-maxextra{N}`` where it differs. The logits
    processors follow where they are on: ``-rep{R}`` (repetition_penalty) and
    ``-norep{N}`` (no_repeat_ngram_size), e.g. ``beam4-rep1.2-norep3``. batch_size
    changes no output and is not named, nor is nbest (the report scores the list's first
    hypothesis, the beam's own)."""
    beam_size = options.beam_size
    name = "greedy" if beam_size == 1 else f"beam{beam_size}"
    if options.sampling:
        name = (
            f"sample-t{float(options.temperature)!r}-k{int(options.top_k)}"
            f"-p{float(options.top_p)!r}-s{int(options.seed)}"
        )
        beam_size = 1
    if beam_size > 1 and float(options.alpha) != float(run_options.alpha):
        name += f"-alpha{float(options.alpha)!r}"
    if beam_size > 1 and options.penalty_form != run_options.penalty_form:
        name += f"-{options.penalty_form}"
    if options.max_extra_length != run_options.max_extra_length:
        name += f"-maxextra{int(options.max_extra_length)}"
    if float(options.repetition_penalty) != DEFAULT_OPTIONS.repetition_penalty:
        name += f"-rep{float(options.repetition_penalty)!r}"
    if options.no_repeat_ngram_size != DEFAULT_OPTIONS.no_repeat_ngram_size:
        name += f"-norep{int(options.no_repeat_ngram_size)}"
    return name


def target_language(data_config: ml_collections.ConfigDict) -> str | None:
    """The language of the targets after ``data.reverse`` (it picks BLEU's tokenizer: zh
    for Chinese); None when unset, and BLEU looks at the references instead."""
    lang = data_config.get("source_lang" if data_config.get("reverse") else "target_lang")
    return lang or None
