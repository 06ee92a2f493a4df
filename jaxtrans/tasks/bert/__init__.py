"""The BERT tasks (pretraining, classification, entity tags, answer spans) and what they share:
objectives, starting weights, predictions, export."""
