"""BERT data: pretraining examples (80/10/10 masking, next sentence), the story demo, sentence
(pair) classification files and GLUE."""
