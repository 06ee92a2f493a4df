"""Inference: cached decoding, greedy and beam search, translation, BLEU and reports.

options.py    SearchOptions: every decoding setting in one frozen object (a pytree)
decoding.py   encode once, one cached decoder step per token (greedy_decode, beam_decode)
stored_decoders.py  jax.jit whose traced decoders are kept on disk for the next process
ensemble.py   several models decoding as one: the mean of their probabilities at each step
search.py     greedy search and sampling over any step function, in one while_loop
beam_search.py  beam search over the same step functions, in one while_loop
top_tokens.py each row's best tokens under log_softmax, by blocks of the vocabulary
cpu_decoding.py  decoding on CPU: its XLA kernels by rows, finished rows dropped, finer lengths
translate.py  sentence lists -> hypotheses (length-sorted, bucketed static shapes), forced prefixes
nbest.py      the N best hypotheses of beam search with their scores
bleu.py       sacreBLEU BLEU (13a, or zh for Chinese) and chrF with signatures
report.py     translate + score a split, write {split}-step{N}.json/.hyp.txt/.md
plots.py      cross-attention heatmaps and masks as PNG (imports matplotlib)
"""

from jaxtrans.inference.beam_search import beam_search, length_penalty
from jaxtrans.inference.bleu import CorpusScores, corpus_scores
from jaxtrans.inference.decoding import beam_decode, generate, greedy_decode
from jaxtrans.inference.nbest import Hypothesis, nbest_ids, translate_nbest
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.report import evaluate_translations, translate_and_score
from jaxtrans.inference.search import greedy_search
from jaxtrans.inference.translate import translate, translate_ids

__all__ = [
    "CorpusScores",
    "Hypothesis",
    "SearchOptions",
    "beam_decode",
    "beam_search",
    "corpus_scores",
    "evaluate_translations",
    "generate",
    "greedy_decode",
    "greedy_search",
    "length_penalty",
    "nbest_ids",
    "translate",
    "translate_and_score",
    "translate_ids",
    "translate_nbest",
]
