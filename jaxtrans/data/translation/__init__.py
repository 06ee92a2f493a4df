"""Translation data: sentence-pair sources (text files, TFDS, the demo corpus), the
SentencePiece tokenizer of a run, packed training batches, evaluation batches."""
