"""Every data field of a run, with its default (suited to the built-in demo corpus).

Which source feeds training: ``tfds_name`` set -> TFDS; else ``train`` set -> local files;
else the built-in demo corpus. Override any field from the command line, e.g.
``--config.data.train=a.tsv,b.tsv.gz --config.data.dev=dev.tsv``.
"""

import ml_collections


def get_data_config() -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict()
    # Training files, comma-separated (.tsv, .jsonl, optionally .gz); "" = unset.
    data.train = ""
    # Development file read in order for validation and BLEU; "" = unset.
    data.dev = ""
    # Test file read in order for the final BLEU report; "" = unset.
    data.test = ""
    # TFDS translation dataset and config, e.g. "wmt14_translate/de-en"; "" = unset.
    data.tfds_name = ""
    # TFDS data directory ("" = TFDS default, ~/tensorflow_datasets).
    data.tfds_data_dir = ""
    # Language of the sources as stored, before data.reverse: the TFDS feature ("" = first
    # language of the config name); for files it only names the language.
    data.source_lang = ""
    # Language of the targets as stored, before data.reverse: the TFDS feature ("" = second
    # language of the config name). The language after reverse picks BLEU's tokenizer (zh
    # for Chinese, else 13a; "" = zh if the references look Chinese).
    data.target_lang = ""
    # JSONL field holding the source sentence (translation2019zh: "english").
    data.jsonl_source_field = "source"
    # JSONL field holding the target sentence (translation2019zh: "chinese").
    data.jsonl_target_field = "target"
    # Swap source and target after reading (any source: TSV, JSONL, TFDS, demo).
    data.reverse = False
    # Skip and count malformed lines instead of stopping with an error naming file and line.
    data.skip_malformed = False
    # Longest source in tokens, EOS included; longer training pairs are dropped or truncated.
    data.max_source_length = 32
    # Longest target in tokens, BOS/EOS included; longer training pairs are dropped or cut.
    data.max_target_length = 32
    # Cut over-long training pairs to the maximum lengths instead of dropping them.
    data.truncate = False
    # GLOBAL number of rows per training step, split evenly across processes (0: from
    # data.tokens_per_batch).
    data.batch_size = 64
    # About this many target tokens a step, instead of data.batch_size (set that to 0), as
    # fairseq's --max-tokens: ceil(N / max_target_length) packed rows, rounded up to a
    # multiple of the data-parallel devices (said at start; a run resumed on another mesh
    # may get another count); needs data.pack. 0 = use data.batch_size.
    data.tokens_per_batch = 0
    # Pack several pairs into one row (segment ids + positions) instead of one pair a row.
    data.pack = True
    # Open rows the first-fit packer fills at once, in local batches (more: less padding).
    data.pack_pool_batches = 8
    # Shuffle training pairs (a fresh permutation each epoch, from the run's seed); False
    # reads them in file order.
    data.shuffle = True
    # Batches prepared ahead of the training step, in a background thread.
    data.prefetch_batches = 8
    # Worker processes that pack and batch the training data (grain), -1 = one a core
    # (at most 8), 0 = in the training process (prefetched in a thread). A new run makes
    # its batches in max(workers, 1) packing streams; resumed, any count makes the same.
    data.workers = -1
    # "sentencepiece" (trained into the workdir with the spm_* settings below) or a Hugging
    # Face tokenizer.json, or a directory with one or with a BERT vocab.txt (WordPiece, BPE,
    # Unigram), or a Marian (opus-mt) directory (source.spm, vocab.json, ...), copied into
    # the workdir; its own special tokens ([PAD]/[SEP]/[CLS] or <pad>/</s>/<s>) serve as
    # pad, end and start.
    data.tokenizer = "sentencepiece"
    # With data.tokenizer a Hugging Face tokenizer: another one for the target side (the
    # target after data.reverse; needs model.share_embeddings=False); "" = one for both.
    data.target_tokenizer = ""
    # SentencePiece vocabulary size (an upper bound; a tiny corpus may yield fewer).
    data.vocab_size = 1000
    # SentencePiece model type: unigram | bpe | char | word.
    data.spm_model_type = "unigram"
    # Fraction of characters covered by the vocabulary (1.0 suits Chinese, 0.9995 Latin).
    data.character_coverage = 1.0
    # SentencePiece text normalisation: identity keeps decode(encode(x)) == x; nmt_nfkc folds.
    data.spm_normalization = "identity"
    # One SentencePiece model for both languages (needed for shared embeddings).
    data.shared_vocab = True
    # Most sentences (per language model) sampled from the training data for SentencePiece.
    data.spm_max_sentences = 1_000_000
    # Number of training pairs of the built-in demo corpus.
    data.demo_train_size = 20_000
    # Number of dev pairs of the built-in demo corpus.
    data.demo_dev_size = 500
    # Number of test pairs of the built-in demo corpus.
    data.demo_test_size = 500
    # Seed of the demo corpus generator (the corpus is a pure function of it).
    data.demo_seed = 1234
    return data
