"""``from jaxtrans import Translator``: a trained translation model in three lines.

    translator = Translator.load("runs/demo")            # a workdir (or a Marian directory)
    translator.translate(["ke tafo miro lesa ."])        # -> ["the ..."]
    translator.score(sources, references).bleu           # sacreBLEU BLEU and chrF
    translator.translate(sentences, sampling=True, top_p=0.9, seed=1)  # back-translation

``load`` reads the tokenizer and restores the parameters once; ``translate`` then decodes
as evaluate.py does: sentences sorted by length into batches of static shapes, results in
the input order, the run config's decoding settings unless given.
"""

from collections.abc import Sequence
from typing import Any

from jaxtrans import tasks
from jaxtrans.errors import UserError
from jaxtrans.inference.bleu import CorpusScores, corpus_scores
from jaxtrans.inference.translate import translate
from jaxtrans.tasks.translation.decoding_settings import decoding_settings, target_language
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.workdir import huggingface_model_type


class Translator:
    """A translation model with its tokenizer and parameters, ready to translate."""

    def __init__(self, task: TranslationTask, checkpoint: str = "latest"):
        """``task``: a restored translation task (``Translator.load`` makes one)."""
        self.task = task
        restored = task.restore_params(checkpoint)
        self.params = restored.params
        self.step = restored.step
        # "step N", "average of steps [...]" or the pretrained directory it came from.
        self.description = restored.description

    @classmethod
    def load(cls, path: str, checkpoint: str = "latest") -> "Translator":
        """A translation workdir written by train.py (``checkpoint``: latest, a step or
        avg:K), or a Hugging Face Marian directory (its one set of weights)."""
        if huggingface_model_type(path) is not None:
            task = tasks.pretrained_task("translation", path)
        else:
            task = tasks.restore_task(path)
        if not isinstance(task, TranslationTask):
            raise UserError(f"{path} is a {task.name} run; a Translator needs a translation run")
        return cls(task, checkpoint)

    def settings(self, **given: Any) -> dict[str, Any]:
        """The decoding settings of a call: the given ones, else the run config's eval
        section, else the defaults (beam 4, alpha 0.6, ...; sampling off: sampling=True,
        temperature=1.0, top_k=0, top_p=1.0, seed=0 draw the tokens instead)."""
        return decoding_settings(self.task.run_config, **given)

    def translate(
        self,
        sentences: Sequence[str] | str,
        *,
        sampling: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        **decoding: Any,
    ) -> list[str]:
        """The translation of each sentence, in order. ``decoding``: beam_size (1: greedy),
        alpha, batch_size, max_extra_length, ...; sampling (False), temperature (1.0),
        top_k (0), top_p (1.0), seed (0) to sample instead (``settings``)."""
        if isinstance(sentences, str):
            raise UserError("translate takes a list of sentences; wrap one in a list")
        return translate(
            self.task.model_config,
            self.params,
            self.task.tokenizer,
            list(sentences),
            **self.settings(
                sampling=sampling,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed,
                **decoding,
            ),
        )

    def score(
        self,
        sentences: Sequence[str],
        references: Sequence[str],
        target_lang: str | None = None,
        **decoding: Any,
    ) -> CorpusScores:
        """Translate ``sentences`` and score them against one reference each: sacreBLEU
        BLEU (tokenizer zh for Chinese targets) and chrF, with their signatures."""
        if len(sentences) != len(references):
            raise UserError(
                f"{len(sentences)} sentences but {len(references)} references; "
                "give one reference per sentence"
            )
        hypotheses = self.translate(sentences, **decoding)
        lang = target_lang or target_language(self.task.run_config.data)
        return corpus_scores(hypotheses, references, lang)
