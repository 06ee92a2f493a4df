"""A trained translation workdir -> a CTranslate2 model directory (``python -m jaxtrans.export
--format ctranslate2``), which ``ctranslate2.Translator`` loads:

    model.bin, config.json   the model (models/ctranslate2_spec.py), float32; quantize when
                             loading (compute_type="int8") or with ct2-transformers-converter's
                             --quantization on a Marian export
    shared_vocabulary.json   the piece of every id (source_ and target_vocabulary.json when
                             the run has one SentencePiece model a side)
    source.spm, target.spm   the run's SentencePiece model(s): cut sources into pieces with
                             source.spm (CTranslate2 appends </s>), join outputs with target.spm

Every model setting converts (Pre-LN, any LayerNorm epsilon, RoPE, learned positions, a
learned decoder start); what is refused is a run tokenized by something other than its own
SentencePiece model(s) (a Marian directory's or a Hugging Face tokenizer), whose pieces
those files cannot cut: export it with --format huggingface instead, which CTranslate2's
Marian converter reads when the decoder starts from a zero vector (it starts every
Marian model so; the refusal says when it would not translate alike).
"""

from pathlib import Path

import jax

from jaxtrans.data.translation.tokenizer import Tokenizer
from jaxtrans.errors import UserError
from jaxtrans.models.ctranslate2_spec import transformer_spec
from jaxtrans.tasks.base import Task
from jaxtrans.tasks.export_directory import written_whole

SIDES = ("source", "target")


def check_ctranslate2() -> str:
    """The installed ctranslate2's version; UserError when it is not installed."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "--format ctranslate2 needs the ctranslate2 package: pip install ctranslate2"
        ) from None
    return ctranslate2.__version__


def check_tokenizer(task: Task) -> Tokenizer:
    """The run's SentencePiece tokenizer; UserError for any other kind, saying which route
    to CTranslate2 is left: a Marian export converted by ct2-transformers-converter, whose
    Marian models start from a zero vector, so only for a model that starts so too."""
    if isinstance(task.tokenizer, Tokenizer):
        return task.tokenizer
    not_written = (
        f"{task.workdir} is tokenized by a Marian directory's or a Hugging Face tokenizer, "
        "which --format ctranslate2 does not write"
    )
    if task.model_config.decoder_start_embedding == "zero":
        raise UserError(
            f"{not_written}; export it with --format huggingface (a Marian run converts "
            "with ct2-transformers-converter)"
        )
    raise UserError(
        f"{not_written}, and ct2-transformers-converter would not translate it alike: its "
        "Marian models start from a zero vector, this model from a learned start row; "
        "export it with --format huggingface for transformers"
    )


def pieces(tokenizer: Tokenizer, side: str) -> list[str]:
    """The piece of every id of one side's SentencePiece model, in id order."""
    model = tokenizer.sentencepiece_model(side)
    return [model.id_to_piece(i) for i in range(model.get_piece_size())]


def export_ctranslate2(task: Task, target: Path, checkpoint: str = "latest") -> str:
    """Write the CTranslate2 directory ``target`` (new or empty, checked by the caller) of
    a translation task's ``checkpoint`` (latest, a step, or avg:K); returns what was
    written, in words. UserError (nothing written) without ctranslate2 installed or for a
    run not tokenized by its own SentencePiece model(s)."""
    version = check_ctranslate2()
    tokenizer = check_tokenizer(task)
    restored = task.restore_params(checkpoint)
    params = jax.tree.map(jax.device_get, restored.params)
    spec = transformer_spec(
        task.model_config, params, pieces(tokenizer, "source"), pieces(tokenizer, "target")
    )
    spec.validate()
    spec.optimize()  # aliases shared tables; no quantization
    with written_whole(target) as scratch:
        spec.save(str(scratch))
        for side in SIDES:
            model = tokenizer.sentencepiece_model(side)
            (scratch / f"{side}.spm").write_bytes(model.serialized_model_proto())
    return f"ctranslate2 {version} model, float32, {restored.description} of {task.workdir}"
