"""The decoding settings of a translation run: beam size, length penalty, batch and length
limits, taken from evaluate.py's flags, else the run config's eval section, else the
defaults; sampling (temperature, top_k, top_p, seed: given, else SAMPLING_DEFAULTS); the
n-best list's length (nbest: given, else 0, none); the part of a report's file name that
tells settings apart; BLEU's language."""

from typing import Any

import ml_collections

from jaxtrans.config_sections import section_values
from jaxtrans.errors import UserError
from jaxtrans.inference.nbest import check_nbest
from jaxtrans.inference.options import check_sampling
from jaxtrans.tasks.translation.decoding_limits import check_decoding_sizes
from jaxtrans.tasks.translation.eval_section import TranslationEvalConfig

PENALTY_FORMS = ("gnmt", "hf")

# Decoding settings used when neither evaluate.py's flags nor the run config give one.
DEFAULT_DECODING = {
    "beam_size": 4,
    "alpha": 0.6,
    "batch_size": 64,
    "max_extra_length": 50,
    "penalty_form": "gnmt",
}
# Sampling settings (never in the run config): draw the tokens instead of searching.
SAMPLING_DEFAULTS = {"sampling": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0}
# The hypotheses a sentence answers with (never in the run config): 0 is the translation
# alone, N >= 1 an n-best list of the beam's N best with their scores.
NBEST_DEFAULT = 0


def decoding_settings(run_config: ml_collections.ConfigDict, **given: Any) -> dict[str, Any]:
    """beam_size, alpha, batch_size, max_extra_length, penalty_form: the given value (not
    None), else the run config's eval section, else DEFAULT_DECODING; then sampling,
    temperature, top_k, top_p, seed: the given value, else SAMPLING_DEFAULTS; then nbest,
    else NBEST_DEFAULT. Sampling decodes with beam size 1 (a beam size > 1 given with it is
    an error); an n-best list is drawn from the beam (beam_size >= nbest, no sampling).
    Sizes beyond the model's limits (decoding_limits: the vocabulary, the positions,
    memory) are a UserError."""
    evaluation = section_values(TranslationEvalConfig, run_config.get("eval"))
    settings = {}
    for name in DEFAULT_DECODING:
        value = given.get(name)
        settings[name] = value if value is not None else getattr(evaluation, name)
    if settings["penalty_form"] not in PENALTY_FORMS:
        raise UserError(
            f"eval.penalty_form={settings['penalty_form']!r}: use gnmt (the length penalty "
            "((5 + len) / 6) ** alpha) or hf (len ** alpha, as transformers' generate)"
        )
    sample = {n: given[n] if given.get(n) is not None else d for n, d in SAMPLING_DEFAULTS.items()}
    check_sampling(sample["temperature"], sample["top_k"], sample["top_p"])
    settings.update({n: type(d)(sample[n]) for n, d in SAMPLING_DEFAULTS.items()})
    if settings["sampling"]:
        if given.get("beam_size") is not None and int(given["beam_size"]) > 1:
            raise UserError(
                f"sampling with beam_size={given['beam_size']}: sampling draws one "
                "hypothesis; drop beam_size or sampling"
            )
        settings["beam_size"] = 1
    check_decoding_sizes(settings, run_config, nbest=given.get("nbest"))
    settings["nbest"] = _nbest(given.get("nbest"), settings)
    return settings


def _nbest(given: Any, settings: dict[str, Any]) -> int:
    """The checked nbest setting: 0 (none) unless given; then a beam of at least that
    many, without sampling."""
    if not given:
        return NBEST_DEFAULT
    if settings["sampling"]:
        raise UserError(
            f"nbest={given} with sampling: sampling draws one hypothesis a sentence; drop "
            "nbest or sampling"
        )
    check_nbest(given, int(settings["beam_size"]))
    return int(given)


def decoding_name(settings: dict[str, Any], run_defaults: dict[str, Any]) -> str:
    """The decoding part of a report's file name: ``greedy`` or ``beam{K}``, then
    ``-alpha{A}`` (beam search only: greedy search has no length penalty) and
    ``-maxextra{N}`` where they differ from the run config's eval section (``run_defaults``,
    from ``decoding_settings(run_config)``), and the length penalty's form (``-hf``) where
    it differs. batch_size changes no output and is not named, nor is nbest (the report
    scores the list's first hypothesis, the beam's own). A sampled decoding is
    ``sample-t{T}-k{K}-p{P}-s{SEED}`` (e.g. ``sample-t0.7-k0-p0.9-s0``), then
    ``-maxextra{N}`` where it differs."""
    beam_size = int(settings["beam_size"])
    name = "greedy" if beam_size == 1 else f"beam{beam_size}"
    if settings.get("sampling"):
        name = (
            f"sample-t{float(settings['temperature'])!r}-k{int(settings['top_k'])}"
            f"-p{float(settings['top_p'])!r}-s{int(settings['seed'])}"
        )
        beam_size = 1
    if beam_size > 1 and float(settings["alpha"]) != float(run_defaults["alpha"]):
        name += f"-alpha{float(settings['alpha'])!r}"
    if beam_size > 1 and settings["penalty_form"] != run_defaults["penalty_form"]:
        name += f"-{settings['penalty_form']}"
    if int(settings["max_extra_length"]) != int(run_defaults["max_extra_length"]):
        name += f"-maxextra{int(settings['max_extra_length'])}"
    return name


def target_language(data_config: ml_collections.ConfigDict) -> str | None:
    """The language of the targets after ``data.reverse`` (it picks BLEU's tokenizer: zh
    for Chinese); None when unset, and BLEU looks at the references instead."""
    lang = data_config.get("source_lang" if data_config.get("reverse") else "target_lang")
    return lang or None
