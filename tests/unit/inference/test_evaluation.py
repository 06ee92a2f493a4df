"""BLEU/chrF scoring, the evaluation report files and the attention pictures."""

import functools
import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sacrebleu
from PIL import Image
from tiny_configs import WordTokenizer, tiny_transformer_config

from jaxtrans.inference.bleu import corpus_scores
from jaxtrans.inference.options import SearchOptions
from jaxtrans.inference.plots import plot_attention
from jaxtrans.inference.report import ReportContext, evaluate_translations
from jaxtrans.models import Transformer

HYPOTHESES = [
    "The cat sat on the mat.",
    "There is a dog in the garden, isn't there?",
    "Press Ctrl+C to copy the selected text.",
    "No GID is available in the range.",
]
REFERENCES = [
    "The cat was sitting on the mat.",
    "There's a dog in the garden, isn't there?",
    "Press Ctrl+C to copy the selection.",
    "No GID is available in the range %d-%d.",
]
CHINESE_HYPOTHESES = ["正在添加新组", "没有可用的 GID。", "复制所选文本"]
CHINESE_REFERENCES = ["正在添加新组“%s”...", "范围里没有可用的 GID。", "复制选中的文本"]


def test_bleu_and_chrf_equal_sacrebleu_corpus_scores():
    scores = corpus_scores(HYPOTHESES, REFERENCES, target_lang="en")
    bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert scores.bleu == bleu.score
    assert scores.chrf == sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score
    assert 0 < scores.bleu < 100
    assert scores.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert scores.chrf_signature.startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|")


@pytest.mark.parametrize("target_lang", ["zh", "zh-CN", None])
def test_chinese_targets_are_scored_with_the_zh_tokenizer(target_lang):
    scores = corpus_scores(CHINESE_HYPOTHESES, CHINESE_REFERENCES, target_lang)
    zh = sacrebleu.corpus_bleu(CHINESE_HYPOTHESES, [CHINESE_REFERENCES], tokenize="zh")
    assert scores.bleu == zh.score
    assert "tok:zh" in scores.bleu_signature
    assert zh.score != sacrebleu.corpus_bleu(CHINESE_HYPOTHESES, [CHINESE_REFERENCES]).score


def test_english_targets_are_not_taken_for_chinese():
    assert corpus_scores(HYPOTHESES, REFERENCES).tokenize == "13a"


CONFIG = tiny_transformer_config()


@functools.cache
def params():
    source = jnp.ones((1, 4), jnp.int32)
    return nn.unbox(jax.jit(Transformer(CONFIG).init)(jax.random.key(3), source, source))["params"]


@pytest.mark.slow
def test_report_files_carry_the_exact_keys_and_sacrebleu_scores(tmp_path, capsys):
    pairs = [("5 6 7", "6 5 4"), ("8 9 10 11 12", "9 9 12"), ("9 9", "2 2 2")]
    report = evaluate_translations(
        CONFIG, params(), WordTokenizer(), pairs,
        ReportContext(str(tmp_path), 1200, "test", "latest"),
        SearchOptions(beam_size=2, alpha=0.6, batch_size=4, max_extra_length=3),
    )  # fmt: skip
    written = json.loads((tmp_path / "test-step1200.json").read_text())
    assert written == report
    required = {
        "step", "split", "checkpoint", "bleu", "chrf", "signature", "num_sentences",
        "lines_read", "lines_skipped", "beam_size", "alpha", "decode_seconds",
        "sentences_per_sec", "repetition_penalty", "no_repeat_ngram_size",
    }  # fmt: skip
    assert required <= written.keys()
    assert (written["step"], written["split"], written["checkpoint"]) == (1200, "test", "latest")
    assert (written["num_sentences"], written["beam_size"], written["alpha"]) == (3, 2, 0.6)
    assert (written["lines_read"], written["lines_skipped"]) == (3, 0)
    assert (written["repetition_penalty"], written["no_repeat_ngram_size"]) == (1.0, 0)
    assert written["sentences_per_sec"] == pytest.approx(3 / written["decode_seconds"])

    hypotheses = (tmp_path / "test-step1200.hyp.txt").read_text().splitlines()
    references = [reference for _, reference in pairs]
    assert len(hypotheses) == 3
    assert written["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert written["chrf"] == sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert (
        written["signature"]
        == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )

    markdown = (tmp_path / "test-step1200.md").read_text()
    assert f"{written['bleu']:.2f}" in markdown and "| 9 9 | 2 2 2 |" in markdown
    assert "| sentences | 3 sentences |" in markdown  # nothing skipped, nothing said
    assert "logits processors" not in markdown  # none on, none said
    printed = capsys.readouterr().out
    assert "| # | source | reference | hypothesis |" in printed and "8 9 10 11 12" in printed
    assert "lines read" not in printed


@pytest.mark.slow
def test_skipped_lines_are_counted_in_the_report_the_markdown_and_the_console(tmp_path, capsys):
    pairs = [("5 6 7", "6 5 4"), ("9 9", "2 2 2")]
    report = evaluate_translations(
        CONFIG, params(), WordTokenizer(), pairs,
        ReportContext(str(tmp_path), 7, "dev", "step 7", stem="dev-step7-greedy", lines_skipped=5),
        SearchOptions(beam_size=1, max_extra_length=3, no_repeat_ngram_size=2),
    )  # fmt: skip
    assert (report["lines_read"], report["lines_skipped"], report["num_sentences"]) == (7, 5, 2)
    assert (report["repetition_penalty"], report["no_repeat_ngram_size"]) == (1.0, 2)
    markdown = (tmp_path / "dev-step7-greedy.md").read_text()
    assert "| logits processors | no_repeat_ngram_size 2 |" in markdown
    assert json.loads((tmp_path / "dev-step7-greedy.json").read_text()) == report
    said = "2 sentences (7 lines read, 5 malformed skipped)"
    assert f"| sentences | {said} |" in (tmp_path / "dev-step7-greedy.md").read_text()
    console = capsys.readouterr().out.splitlines()[0]
    assert console.startswith("dev step 7: BLEU") and said in console


@pytest.mark.slow
def test_attention_picture_is_a_valid_png(tmp_path):
    output, masks = tmp_path / "attention.png", tmp_path / "masks.png"
    translation = plot_attention(
        CONFIG, params(), WordTokenizer(), "5 6 7 8", str(output),
        SearchOptions(beam_size=1, max_extra_length=3), masks_png=str(masks),
    )  # fmt: skip
    assert isinstance(translation, str)
    siblings = [tmp_path / f"attention-{kind}.png" for kind in ("encoder", "decoder")]
    for path in (output, masks, *siblings):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L"))
        assert min(pixels.shape) > 100 and pixels.std() > 0  # a picture, not a blank
