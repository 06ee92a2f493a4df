"""The built-in demo corpus: deterministic, short, a real translation problem."""

import re

import pytest
import sacrebleu

from jaxtrans.data.translation import demo as demo_corpus
from jaxtrans.data.translation.data_config import get_data_config
from jaxtrans.data.translation.sources import load_split, training_pairs

SIZES = dict(demo_train_size=3000, demo_dev_size=200, demo_test_size=200)


@pytest.fixture(scope="module")
def data():
    data = get_data_config()
    data.update(SIZES)
    return data


@pytest.fixture(scope="module")
def train(data):
    return list(training_pairs(data))


def test_corpus_is_a_pure_function_of_the_seed(data, train):
    assert list(training_pairs(data)) == train
    other = data.copy_and_resolve_references()
    other.demo_seed = data.demo_seed + 1
    assert list(training_pairs(other))[:50] != train[:50]


def test_kelen_sentences_have_4_to_12_words(train):
    lengths = [len(p.source.split()) for p in train]
    assert min(lengths) >= 4
    assert max(lengths) <= 12


def test_translation_is_a_function_of_the_source(train):
    seen = {}
    for pair in train:
        assert seen.setdefault(pair.source, pair.target) == pair.target


def test_dev_and_test_sentences_are_not_in_training(data, train):
    train_sources = {p.source for p in train}
    for split in ("dev", "test"):
        pairs = load_split(data, split)
        assert len(pairs) == SIZES[f"demo_{split}_size"]
        assert not train_sources & {p.source for p in pairs}


def test_vocabulary_is_a_few_hundred_words(train):
    def lemmas(text):
        return set(re.findall(r"[a-z]+", text.lower()))

    english = set().union(*(lemmas(p.target) for p in train))
    kelen_stems = {
        entry.kelen
        for table in (demo_corpus.ANIMATE, demo_corpus.THINGS, demo_corpus.PLACES)
        for entry in table
    } | {a.kelen for a in demo_corpus.ADJECTIVES}
    kelen_stems |= {v.kelen for v in demo_corpus.TRANSITIVE + demo_corpus.INTRANSITIVE}
    assert 100 <= len(english) <= 300
    assert 100 <= len(kelen_stems) <= 300


def test_indefinite_article_agrees_with_the_next_english_word(train):
    # "an" before a vowel, "a" before a consonant: the next English word is an adjective or
    # noun that Kelen places elsewhere, so the model must look it up.
    checked = 0
    for pair in train:
        words = pair.target.lower().rstrip(".?").split()
        for article, following in zip(words, words[1:], strict=False):
            if article in ("a", "an"):
                assert (article == "an") == (following[0] in "aeiou"), pair
                checked += 1
    assert checked > 500


def test_neither_copying_nor_a_word_by_word_gloss_scores_well(train):
    # Copying the source scores ~0 BLEU; translating each Kelen word by its dictionary entry
    # in Kelen order (no reordering, no agreement) stays far below the 60 BLEU a model must
    # reach, although it finds most of the right words.
    gloss = {e.kelen: e.singular for t in (demo_corpus.ANIMATE, demo_corpus.THINGS) for e in t}
    gloss |= {e.kelen: e.singular for e in demo_corpus.PLACES}
    gloss |= {a.kelen: a.english for a in demo_corpus.ADJECTIVES}
    gloss |= {v.kelen: v.base for v in demo_corpus.TRANSITIVE + demo_corpus.INTRANSITIVE}
    gloss |= {k: e for k, e, _, _ in demo_corpus.PRONOUNS}
    gloss |= {k: e for k, e in demo_corpus.POSTPOSITIONS} | {"ta": "the"}

    def word_by_word(sentence):
        out = []
        for word in sentence.rstrip(".?").split():
            stem = next(
                (s for s in sorted(gloss, key=len, reverse=True) if word.startswith(s)), None
            )
            if stem is not None:
                out.append(gloss[stem])
        return " ".join(out) + sentence[-1]

    sample = train[:500]
    references = [[p.target for p in sample]]
    copy_bleu = sacrebleu.corpus_bleu([p.source for p in sample], references).score
    glosses = [word_by_word(p.source) for p in sample]
    gloss_bleu = sacrebleu.corpus_bleu(glosses, references, lowercase=True)
    assert copy_bleu < 5
    # The gloss has the right words (unigram precision) in the wrong order (BLEU).
    assert gloss_bleu.precisions[0] > 60
    assert gloss_bleu.score < 10
