"""Data: sentence pairs, tokenizers, examples and batches for every task; no knowledge of
models.

Shared pieces sit at this level (reserved_pieces.py, records.py, iterators.py, packing.py,
data_shards.py, tfds_source.py); each kind of data has its folder, and the task-data
folders never import one another:

    translation/   sentence-pair sources, the run's SentencePiece tokenizer, packed batches
    tokenizers/    SentencePiece training, WordPiece, Hugging Face and Marian tokenizer files
    bert/          pretraining examples (80/10/10 masking, next sentence), classification
    ner/           CoNLL entity tags and token-classification windows
    qa/            SQuAD questions and answer-span windows

Each of translation/, bert/, ner/ and qa/ has its built-in generated corpus in ``demo.py``.
"""
