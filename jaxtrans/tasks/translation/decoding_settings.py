"""The decoding settings of a translation run: beam size, length penalty, batch and length
limits, taken from evaluate.py's flags, else the run config's eval section, else the
defaults; the part of a report's file name that tells settings apart; BLEU's language."""

from typing import Any

import ml_collections

from jaxtrans.config_sections import section_values
from jaxtrans.errors import UserError
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


def decoding_settings(run_config: ml_collections.ConfigDict, **given: Any) -> dict[str, Any]:
    """beam_size, alpha, batch_size, max_extra_length, penalty_form: the given value (not
    None), else the run config's eval section, else DEFAULT_DECODING."""
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
    return settings


def decoding_name(settings: dict[str, Any], run_defaults: dict[str, Any]) -> str:
    """The decoding part of a report's file name: ``greedy`` or ``beam{K}``, then
    ``-alpha{A}`` (beam search only: greedy search has no length penalty) and
    ``-maxextra{N}`` where they differ from the run config's eval section (``run_defaults``,
    from ``decoding_settings(run_config)``), and the length penalty's form (``-hf``) where
    it differs. batch_size changes no output and is not named."""
    beam_size = int(settings["beam_size"])
    name = "greedy" if beam_size == 1 else f"beam{beam_size}"
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
