"""Seed 000's recipe: the Transformer on translation2019zh, English -> Chinese.

translation2019zh (5.2M pairs) ships as JSON lines ``{"english": ..., "chinese": ...}``
in ``translation2019zh_train.json`` and ``translation2019zh_valid.json``. As in the seed:
512/8/6/2048, 64 sentence pairs a step, 20 epochs, 128 tokens at most a side, Adam with
the Noam schedule, label smoothing 0.1; BLEU with sacreBLEU's ``zh`` tokenizer for
Chinese targets (``13a`` for English). docs/recipes.md maps each of the seed's settings
onto these keys and gives the smaller sizes for an hour on a CPU.

    python train.py --config configs/translation2019zh.py --workdir runs/t2019zh \\
        --config.data.train=translation2019zh_train.json \\
        --config.data.dev=translation2019zh_valid.json
    # Chinese -> English: add --config.data.reverse=True
    python evaluate.py --workdir runs/t2019zh --split dev
"""

import ml_collections

from jaxtrans.tasks.run_config import translation_run_config


def get_config() -> ml_collections.ConfigDict:
    config = translation_run_config()
    config.data.tfds_name = ""  # local files: set data.train / data.dev / data.test
    config.data.jsonl_source_field = "english"
    config.data.jsonl_target_field = "chinese"
    # The languages as stored; data.reverse=True trains Chinese -> English, and BLEU then
    # scores English (13a) instead of Chinese (zh).
    config.data.source_lang = "en"
    config.data.target_lang = "zh"
    # One 32k SentencePiece vocabulary for both languages (shared embeddings), covering
    # 99.95% of the characters: rare Chinese characters become pieces of UTF-8 bytes.
    config.data.vocab_size = 32_000
    config.data.character_coverage = 0.9995
    config.data.max_source_length = 128
    config.data.max_target_length = 128
    # The seed's batch: 64 pairs, one a row. --config.data.pack=True with batch_size=16
    # puts about as many tokens in each step with a quarter of the padding computed.
    config.data.pack = False
    config.data.batch_size = 64
    config.data.tokens_per_batch = 0

    config.train.num_steps = 0
    config.train.num_epochs = 20
    config.train.log_every = 100
    config.train.checkpoint_every = 5_000
    config.train.eval_every = 20_000

    # Dev BLEU during training on the first 1000 dev pairs (beam 4, as in the report).
    config.eval.dev_sentences = 1_000
    return config
