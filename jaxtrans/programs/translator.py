"""``from jaxtrans import Translator``: a trained translation model in three lines.

    translator = Translator.load("runs/demo")            # a workdir (or a Marian directory)
    translator.translate(["ke tafo miro lesa ."])        # -> ["the ..."]
    translator.score(sources, references).bleu           # sacreBLEU BLEU and chrF
    translator.translate(sentences, sampling=True, top_p=0.9, seed=1)  # back-translation
    translator.translate(sentences, nbest=4)             # [[Hypothesis(text, score, logprob)]]
    translator.translate(sentences, prefix="the")        # every translation starts "the ..."
    translator.translate(sentences, repetition_penalty=1.2, no_repeat_ngram_size=3)
    Translator.load(["runs/a", "runs/a:avg:2", "runs/b:best"])  # an ensemble, decoding as one

``load`` reads the tokenizer and restores the parameters once; ``translate`` then decodes
as evaluate.py does: sentences sorted by length into batches of static shapes, results in
the input order, the run config's decoding settings unless given.
"""

import os
from collections.abc import Sequence
from typing import Any

from jaxtrans import tasks
from jaxtrans.compilation_cache import use_run_compilation_cache
from jaxtrans.errors import UserError
from jaxtrans.inference.bleu import CorpusScores, corpus_scores
from jaxtrans.inference.nbest import Hypothesis
from jaxtrans.tasks.translation.decoding_settings import (
    Decoding,
    decoding_settings,
    target_language,
)
from jaxtrans.tasks.translation.translation_ensemble import TranslationEnsemble
from jaxtrans.tasks.translation.translation_predict import translate_with
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.workdirs.workdir import huggingface_model_type


class Translator:
    """A translation model with its tokenizer and parameters, ready to translate."""

    def __init__(self, task: TranslationTask | TranslationEnsemble, checkpoint: str = "latest"):
        """``task``: a restored translation task, or an ensemble of them
        (``Translator.load`` makes either)."""
        self.task = task
        restored = task.restore_params(checkpoint)
        self.params = restored.params
        self.step = restored.step
        # "step N", "average of steps [...]", the pretrained directory it came from, or
        # "ensemble of N: ..." listing each member's.
        self.description = restored.description

    @classmethod
    def load(
        cls,
        path: str | Sequence[str],
        checkpoint: str = "latest",
        *,
        compilation_cache_dir: str | None = None,
    ) -> "Translator":
        """A translation workdir written by train.py (``checkpoint``: latest, best, a step
        or avg:K), or a Hugging Face Marian directory (its one set of weights). A list of
        them (each ``DIR`` or ``DIR:CHECKPOINT``) is an ensemble: its members share one
        tokenizer and decode together, each token chosen by the mean of their
        probabilities (jaxtrans.inference.ensemble).

        compilation_cache_dir: where this process keeps its compiled decoders for the next
        (jaxtrans.compilation_cache); None: the run config's train.compilation_cache_dir
        (the first member's), "" none."""
        if not isinstance(path, str | os.PathLike):
            task = TranslationEnsemble.load(list(path))
        else:
            path = os.fspath(path)
            if huggingface_model_type(path) is not None:
                task = tasks.pretrained_task("translation", path)
            else:
                task = tasks.restore_task(path)
            if not isinstance(task, TranslationTask):
                raise UserError(
                    f"{path} is a {task.name} run; a Translator needs a translation run"
                )
        use_run_compilation_cache(task.run_config, compilation_cache_dir)
        return cls(task, checkpoint)

    def settings(self, **given: Any) -> Decoding:
        """The decoding settings of a call, (options, nbest): each SearchOptions field
        (jaxtrans.inference.options) the given one, else the run config's eval section,
        else its default (beam 4, alpha 0.6, ...; sampling off: sampling=True,
        temperature=1.0, top_k=0, top_p=1.0, seed=0 draw the tokens instead; no logits
        processor); nbest 0: one translation a sentence."""
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
        nbest: int = 0,
        repetition_penalty: float | None = None,
        no_repeat_ngram_size: int | None = None,
        prefix: str | Sequence[str] | None = None,
        **decoding: Any,
    ) -> list[str] | list[list[Hypothesis]]:
        """The translation of each sentence, in order. ``decoding``: beam_size (1: greedy),
        alpha, batch_size, max_extra_length, ... (SearchOptions' fields); sampling
        (False), temperature (1.0), top_k (0), top_p (1.0), seed (0) to sample instead
        (``settings``). repetition_penalty (1.0: none) divides the logits of the tokens
        already in a translation (multiplies where negative), as transformers' and
        CTranslate2's; no_repeat_ngram_size N (0: none) keeps any N tokens from appearing
        twice in one; None: the run config's eval section.

        nbest N (<= beam_size): for each sentence its N best hypotheses instead, best
        first, each a Hypothesis(text, score, logprob): score = logprob / length penalty.
        prefix: the text every translation starts with (one for all, or one a sentence),
        forced in greedy search, beam search and sampling; its tokens' log-probabilities
        count in the scores."""
        if isinstance(sentences, str):
            raise UserError("translate takes a list of sentences; wrap one in a list")
        sample = dict(sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p)
        processors = dict(
            repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size
        )
        settings = self.settings(**sample, seed=seed, nbest=nbest, **processors, **decoding)
        model = (self.task.model_config, self.params, self.task.tokenizer)
        return translate_with(*model, list(sentences), *settings, prefix)

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
        if decoding.get("nbest"):
            raise UserError("score takes one translation a sentence; leave nbest out")
        hypotheses = self.translate(sentences, **decoding)
        lang = target_lang or target_language(self.task.run_config.data)
        return corpus_scores(hypotheses, references, lang)
