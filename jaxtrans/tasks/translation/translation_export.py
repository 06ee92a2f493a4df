"""A trained translation workdir -> a Hugging Face Marian directory (``python -m
jaxtrans.export``), which ``MarianMTModel.from_pretrained`` and
``MarianTokenizer.from_pretrained`` load, and so the tools built on them (pipelines,
CTranslate2's Marian converter) and evaluate.py --init_from.

    config.json              MarianMTModel's config (models/marian/marian_to_huggingface.py)
    generation_config.json   beam size, length penalty and logits processors of the
                             run's eval section, the padding start token never generated
    model.safetensors        the checkpoint's parameters under Marian's names, float32
    source.spm, target.spm,  the run's SentencePiece model(s) and vocabularies in Marian's
    vocab.json, ...          order (data/translation/marian_tokenizer_files.py); a run
                             that started from a Marian directory gets that
                             directory's files back

The vocabulary the tokenizer files define and the rows the weights take are computed
separately (data/translation/marian_tokenizer_files.py and
models/marian/marian_to_huggingface.py); they are checked to
agree before anything is written.
"""

import json
from pathlib import Path

import jax
import numpy as np
from safetensors.numpy import save_file

from jaxtrans.data.translation.marian_tokenizer_files import (
    huggingface_rows,
    write_marian_tokenizer,
)
from jaxtrans.data.translation.tokenizer import tokenizer_dir
from jaxtrans.errors import UserError
from jaxtrans.inference.options import DEFAULT_OPTIONS
from jaxtrans.models.marian.marian_to_huggingface import (
    LEARNED_START_NOTE,
    check_exportable,
    to_huggingface,
    token_rows,
)
from jaxtrans.tasks.base import Task
from jaxtrans.tasks.export_directory import written_whole
from jaxtrans.tasks.translation.decoding_settings import decoding_settings

CONFIG_FILE = "config.json"
GENERATION_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"


def languages(task: Task) -> tuple[str, str]:
    """(source, target) language names of the run, after data.reverse ("" when unnamed)."""
    data = task.run_config.data
    source, target = data.get("source_lang", ""), data.get("target_lang", "")
    return (target, source) if data.get("reverse") else (source, target)


def generation_config(task: Task, hf_config: dict) -> dict:
    """How generate() decodes by default: the run's beam size; Hugging Face's length
    penalty is len ** alpha, the run's alpha when its eval section uses that form; the
    run's repetition_penalty and no_repeat_ngram_size where they are on (generate()
    has both, with the same meaning)."""
    options = decoding_settings(task.run_config).options
    pad_id = hf_config["pad_token_id"]
    settings = {
        "decoder_start_token_id": pad_id,
        "eos_token_id": 0,
        "pad_token_id": pad_id,
        "bad_words_ids": [[pad_id]],
        "forced_eos_token_id": None,
        "max_length": hf_config["max_position_embeddings"],
    }
    settings["num_beams"] = options.beam_size
    # generate() divides by len ** length_penalty: the run's alpha where the run decodes
    # with that form (eval.penalty_form="hf"); GNMT's penalty it cannot express.
    if options.penalty_form == "hf":
        settings["length_penalty"] = options.alpha
    if options.repetition_penalty != DEFAULT_OPTIONS.repetition_penalty:
        settings["repetition_penalty"] = options.repetition_penalty
    if options.no_repeat_ngram_size != DEFAULT_OPTIONS.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = options.no_repeat_ngram_size
    return settings


def check_rows(task: Task, tokenizer) -> None:
    """The rows the weights are written in must be the ids the tokenizer files give."""
    for side, expected in zip(("source", "target"), token_rows(task.model_config), strict=True):
        rows = huggingface_rows(getattr(tokenizer, f"{side}_vocabulary"))
        if not np.array_equal(rows, expected):
            raise UserError(
                f"the run's {side} vocabulary is not laid out as Marian's (</s> 0, <pad> "
                "the last id of the smaller vocabulary, in both); it cannot be exported"
            )


def export_translation(task: Task, target: Path, checkpoint: str = "latest") -> str:
    """Write the Marian directory ``target`` (new or empty, checked by the caller) of a
    translation task's ``checkpoint`` (latest, a step, or avg:K); returns what was
    written, in words. UserError (nothing written) for a setting Marian cannot express."""
    check_exportable(task.model_config)  # before reading the checkpoint
    restored = task.restore_params(checkpoint)
    params = jax.tree.map(jax.device_get, restored.params)
    hf_config, state = to_huggingface(task.model_config, params)
    source_lang, target_lang = languages(task)
    with written_whole(target) as scratch:
        tokenizer = write_marian_tokenizer(
            tokenizer_dir(task.workdir), str(scratch), source_lang, target_lang
        )
        check_rows(task, tokenizer)
        for name, contents in (
            (CONFIG_FILE, hf_config),
            (GENERATION_FILE, generation_config(task, hf_config)),
        ):
            (scratch / name).write_text(
                json.dumps(contents, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
        save_file(state, str(scratch / WEIGHTS_FILE), metadata={"format": "pt"})
    written = f"MarianMTModel, {restored.description} of {task.workdir}"
    if task.model_config.decoder_start_embedding != "zero":
        written += f"; {LEARNED_START_NOTE}"
    return written
