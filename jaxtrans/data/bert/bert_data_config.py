"""Every data field of a BERT run, with its default (suited to the built-in demo corpus).

Pretraining text comes from ``train`` (files in the pretraining format: one sentence a
line, a blank line between documents) or, when it is unset, from the built-in demo corpus
(``jaxtrans.data.bert.demo``). The vocabulary is the WordPiece ``vocab.txt`` of
``hf_checkpoint`` when it is set, else a SentencePiece model trained on the text.
Fine-tuning reads ``classification_train`` / ``classification_dev`` (TSV or JSONL, see
``jaxtrans.data.bert.classification``). Override any field from the command line, e.g.
``--config.data.train=wiki.txt.gz --config.data.max_seq_length=512``.
"""

import ml_collections


def get_bert_data_config() -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict()
    # Pretraining text files, comma-separated (optionally .gz); "" = the demo corpus.
    data.train = ""
    # Held-out pretraining text for MLM/NSP evaluation; "" = demo dev documents.
    data.dev = ""
    # Hugging Face checkpoint directory whose vocab.txt to use; "" = train SentencePiece.
    data.hf_checkpoint = ""
    # SentencePiece vocabulary size (an upper bound; a tiny corpus may yield fewer).
    data.vocab_size = 8000
    # SentencePiece model type: unigram | bpe | char | word.
    data.spm_model_type = "unigram"
    # Fraction of characters covered by the vocabulary: 1.0 keeps every character (small
    # corpora, Chinese); 0.9995 maps the rarest characters of a large Latin corpus to unk.
    data.character_coverage = 1.0
    # Most sentences sampled from the text to train SentencePiece.
    data.spm_max_sentences = 1_000_000
    # Length of every example, [CLS] and both [SEP] included.
    data.max_seq_length = 128
    # Most masked positions per example (BERT: 20 for 128, 80 for 512).
    data.max_predictions_per_seq = 20
    # Fraction of tokens chosen for masked-LM prediction.
    data.masked_lm_prob = 0.15
    # Of the chosen tokens, the fraction replaced by [MASK].
    data.mask_token_prob = 0.8
    # Of the chosen tokens, the fraction replaced by a random token (the rest unchanged).
    data.random_token_prob = 0.1
    # Probability of a shorter random target length for an example.
    data.short_seq_prob = 0.1
    # Probability that segment B is a random sentence from another document.
    data.random_next_prob = 0.5
    # GLOBAL number of examples per training step, split evenly across processes.
    data.batch_size = 32
    # Translation's data.tokens_per_batch, refused here: a BERT step is data.batch_size
    # examples (its rows are not packed to a length); keep 0.
    data.tokens_per_batch = 0
    # Seed of chunking, pairing and masking; the training loop may override it.
    data.seed = 0
    # Threads that make examples in parallel.
    data.read_threads = 2
    # Batches prepared ahead of the training step.
    data.prefetch_batches = 4
    # Number of documents of the built-in demo corpus (training split).
    data.demo_documents = 4000
    # Number of documents of the demo dev split (generated with another seed).
    data.demo_dev_documents = 200
    # Seed of the demo corpus generator (the corpus is a pure function of it).
    data.demo_seed = 0
    # Fine-tuning: labelled training file (.tsv or .jsonl, optionally .gz).
    data.classification_train = ""
    # Fine-tuning: labelled development file, read in order for accuracy.
    data.classification_dev = ""
    # Fine-tuning: the label names in model order, comma-separated; "" = sorted labels of
    # the training file.
    data.labels = ""
    return data
