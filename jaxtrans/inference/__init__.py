"""Inference: cached decoding, greedy and beam search, translation, BLEU and reports."""
