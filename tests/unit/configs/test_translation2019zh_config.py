"""configs/translation2019zh.py: seed 000's recipe reads translation2019zh's JSON lines in
either direction and scores Chinese targets with sacreBLEU's zh tokenizer."""

import json
import sys

import pytest
from paths import REPO

from jaxtrans.data.translation.sources import load_split, training_pairs
from jaxtrans.inference.bleu import bleu_tokenizer
from jaxtrans.tasks.translation.decoding_settings import target_language

LINES = [
    {"english": "The cat sings.", "chinese": "猫在唱歌。"},
    {"english": "Hi.", "chinese": "你好。"},
]


@pytest.fixture
def config(tmp_path):
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from configs import translation2019zh

    path = tmp_path / "translation2019zh_valid.json"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in LINES))
    config = translation2019zh.get_config()
    config.data.train = config.data.dev = str(path)
    return config


def test_the_recipe_has_the_seeds_sizes(config):
    model, data, train = config.model, config.data, config.train
    assert (model.d_model, model.num_heads, model.d_ff) == (512, 8, 2048)
    assert (model.num_encoder_layers, model.num_decoder_layers) == (6, 6)
    assert (data.batch_size, data.pack, data.max_source_length, data.max_target_length) == (
        64, False, 128, 128,
    )  # fmt: skip
    assert (train.num_epochs, train.num_steps) == (20, 0)


def test_english_to_chinese_by_default_scored_with_the_zh_tokenizer(config):
    pairs = training_pairs(config.data)
    assert (pairs[0].source, pairs[0].target) == ("The cat sings.", "猫在唱歌。")
    assert bleu_tokenizer(target_language(config.data), []) == "zh"


def test_reverse_reads_chinese_to_english_scored_with_13a(config):
    config.data.reverse = True
    (first, _) = load_split(config.data, "dev")
    assert (first.source, first.target) == ("猫在唱歌。", "The cat sings.")
    assert bleu_tokenizer(target_language(config.data), []) == "13a"
