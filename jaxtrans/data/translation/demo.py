"""The built-in demo corpus: Kelen, a small synthetic language, translated into English.

Kelen is verb-final (subject, object, verb), puts adjectives, numerals and the article
after the noun, marks the object and places with postpositions, and inflects nouns for
number and verbs for tense and person. Relative clauses come before their noun and a
"because" clause before the main clause. English needs all of these reordered and its
own agreement (sees/see, is/are/was/were, does/do/did, a/an) inferred from words that
stand elsewhere in the Kelen sentence, so the corpus is a real translation problem for
a sequence-to-sequence model. The grammar is written out in docs/demo_corpus.md.

Everything is a pure function of the seed: the demo and the tests need no download.
"""

import random
from typing import NamedTuple

from jaxtrans.data.records import TranslationPair
from jaxtrans.data.translation.kelen_words import (
    ADJECTIVES,
    ANIMATE,
    INTRANSITIVE,
    NUMERALS,
    PLACES,
    POSTPOSITIONS,
    PRONOUNS,
    THINGS,
    TRANSITIVE,
    Noun,
    Verb,
)

# Kelen inflection.
NOUN_PLURAL = "ul"  # kano -> kanoul (dogs)
ADJECTIVE_PLURAL = "n"  # muri -> murin, agreeing with a plural noun
DEFINITE = "ta"  # the article, last word of the noun phrase
OBJECT = "ko"  # object postposition
NEGATION = "na"  # before the verb
QUESTION = "ku"  # sentence-final yes/no question particle
BECAUSE = "ven"  # ends the reason clause, which comes first
TENSE_SUFFIX = {"present": "", "past": "ri", "future": "lo"}
PERSON_SUFFIX = {"1s": "m", "2": "t", "3s": "", "1p": "mu", "3p": "n"}
RELATIVE_SUFFIX = "ki"  # replaces the person suffix on a relative-clause verb

MIN_WORDS = 4
MAX_WORDS = 12


class Phrase(NamedTuple):
    """A constituent in both languages, with the English agreement it triggers."""

    kelen: list[str]
    english: list[str]
    person: str = "3s"
    english_object: list[str] | None = None  # pronouns change form as objects


def _indefinite_article(next_word: str) -> str:
    return "an" if next_word[0] in "aeiou" else "a"


def _noun_phrase(rng: random.Random, nouns: tuple[Noun, ...], *, allow_relative: bool) -> Phrase:
    """NOUN ADJ* NUM? ta?  ->  (the|a|an)? NUM? ADJ* NOUN (that VERB OBJECT)?"""
    noun = rng.choice(nouns)
    numeral = rng.choice(NUMERALS) if rng.random() < 0.15 else None
    plural = numeral is not None or rng.random() < 0.4
    definite = rng.random() < 0.6
    num_adjectives = rng.choices((0, 1, 2), weights=(0.5, 0.4, 0.1))[0]
    adjectives = rng.sample(ADJECTIVES, num_adjectives)

    kelen = [noun.kelen + (NOUN_PLURAL if plural else "")]
    kelen += [a.kelen + (ADJECTIVE_PLURAL if plural else "") for a in adjectives]
    # English adjectives mirror the Kelen order (Kelen is head-first, English head-last).
    english = [a.english for a in reversed(adjectives)] + [noun.plural if plural else noun.singular]
    if numeral is not None:
        kelen.append(numeral[0])
        english.insert(0, numeral[1])
    if definite:
        kelen.append(DEFINITE)
        english.insert(0, "the")
    elif not plural:
        english.insert(0, _indefinite_article(english[0]))

    if allow_relative and rng.random() < 0.12:
        # Kelen: [OBJECT ko VERB-TENSE-ki] NOUN ...; English: ... NOUN that VERB OBJECT.
        verb = rng.choice(TRANSITIVE)
        tense = rng.choice(("present", "past"))
        obj = _noun_phrase(rng, THINGS, allow_relative=False)
        kelen = [*obj.kelen, OBJECT, verb.kelen + TENSE_SUFFIX[tense] + RELATIVE_SUFFIX, *kelen]
        english = [
            *english,
            "that",
            _finite_verb(verb, tense, "3p" if plural else "3s"),
            *obj.english,
        ]
    return Phrase(kelen, english, "3p" if plural else "3s")


def _subject(rng: random.Random) -> Phrase:
    if rng.random() < 0.3:
        kelen, subject, obj, person = rng.choice(PRONOUNS)
        return Phrase([kelen], [subject], person, [obj])
    return _noun_phrase(rng, ANIMATE, allow_relative=True)


def _object(rng: random.Random) -> Phrase:
    if rng.random() < 0.15:
        kelen, _, obj, person = rng.choice(PRONOUNS)
        return Phrase([kelen], [obj], person)
    return _noun_phrase(rng, ANIMATE if rng.random() < 0.3 else THINGS, allow_relative=False)


def _finite_verb(verb: Verb, tense: str, person: str) -> str:
    """The English verb of a plain affirmative clause (future is built by the caller)."""
    if tense == "past":
        return verb.past
    return verb.third_singular if person == "3s" else verb.base


def _be(tense: str, person: str) -> str:
    if tense == "past":
        return "was" if person in ("1s", "3s") else "were"
    return {"1s": "am", "3s": "is"}.get(person, "are")


def _do(tense: str, person: str) -> str:
    if tense == "past":
        return "did"
    return "does" if person == "3s" else "do"


def _kelen_inflect(stem: str, tense: str, person: str) -> str:
    return stem + TENSE_SUFFIX[tense] + PERSON_SUFFIX[person]


def _clause(
    rng: random.Random, kind: str, *, question: bool = False, simple: bool = False
) -> Phrase:
    """One clause without final punctuation; kind is transitive | intransitive | copula.

    Kelen order: SUBJECT (PLACE ta POSTP)? (OBJECT ko)? na? VERB (ku)?
    English order: SUBJECT (not) VERB OBJECT (PREP the PLACE)?, questions inverted.
    """
    tense = rng.choice(("present", "past", "future"))
    subject = _subject(rng) if not simple else _simple_subject(rng)
    negative = not question and rng.random() < 0.2
    place = None
    if kind != "copula" and not simple and rng.random() < 0.3:
        noun = rng.choice(PLACES)
        postposition, preposition = rng.choice(POSTPOSITIONS)
        place = Phrase([noun.kelen, DEFINITE, postposition], [preposition, "the", noun.singular])

    kelen = list(subject.kelen)
    if place is not None:
        kelen += place.kelen
    if kind == "copula":
        adjective = rng.choice(ADJECTIVES)
        predicate_kelen = _kelen_inflect(adjective.kelen, tense, subject.person)
        complement = [adjective.english]
        verb_kelen = predicate_kelen
    else:
        verb = rng.choice(TRANSITIVE if kind == "transitive" else INTRANSITIVE)
        obj = _object(rng) if kind == "transitive" else None
        if obj is not None:
            kelen += [*obj.kelen, OBJECT]
        verb_kelen = _kelen_inflect(verb.kelen, tense, subject.person)
        complement = obj.english if obj is not None else []
    if negative:
        kelen.append(NEGATION)
    kelen.append(verb_kelen)
    if question:
        kelen.append(QUESTION)

    tail = complement + (place.english if place is not None else [])
    subj = subject.english
    if kind == "copula":
        if tense == "future":
            head = (
                ["will", *subj, "be"] if question else [*subj, "will", *(["not"] * negative), "be"]
            )
        else:
            be = _be(tense, subject.person)
            head = [be, *subj] if question else [*subj, be, *(["not"] * negative)]
    elif tense == "future":
        if question:
            head = ["will", *subj, verb.base]
        else:
            head = [*subj, "will", *(["not"] * negative), verb.base]
    elif question or negative:
        do = _do(tense, subject.person)
        head = [do, *subj, verb.base] if question else [*subj, do, "not", verb.base]
    else:
        head = [*subj, _finite_verb(verb, tense, subject.person)]
    return Phrase(kelen, head + tail, subject.person)


def _simple_subject(rng: random.Random) -> Phrase:
    """A pronoun or a bare definite noun, to keep two-clause sentences short."""
    if rng.random() < 0.5:
        kelen, subject, obj, person = rng.choice(PRONOUNS)
        return Phrase([kelen], [subject], person, [obj])
    noun = rng.choice(ANIMATE)
    plural = rng.random() < 0.4
    return Phrase(
        [noun.kelen + (NOUN_PLURAL if plural else ""), DEFINITE],
        ["the", noun.plural if plural else noun.singular],
        "3p" if plural else "3s",
    )


def _sentence(rng: random.Random) -> tuple[list[str], list[str], str]:
    """Kelen words, English words and the final punctuation of one sentence."""
    pattern = rng.choices(
        ("transitive", "intransitive", "copula", "question", "because"),
        weights=(0.38, 0.17, 0.15, 0.15, 0.15),
    )[0]
    if pattern == "question":
        clause = _clause(rng, rng.choice(("transitive", "intransitive", "copula")), question=True)
        return clause.kelen, clause.english, "?"
    if pattern == "because":
        # Kelen: REASON ven MAIN.  English: MAIN because REASON.
        reason = _clause(rng, rng.choice(("intransitive", "copula")), simple=True)
        main = _clause(rng, rng.choice(("intransitive", "copula")), simple=True)
        return (
            reason.kelen + [BECAUSE] + main.kelen,
            main.english + ["because"] + reason.english,
            ".",
        )
    clause = _clause(rng, pattern)
    return clause.kelen, clause.english, "."


def generate_pair(rng: random.Random) -> TranslationPair:
    """One Kelen sentence of MIN_WORDS..MAX_WORDS words and its English translation."""
    while True:
        kelen, english, mark = _sentence(rng)
        if MIN_WORDS <= len(kelen) <= MAX_WORDS:
            break
    english_text = " ".join(english)
    english_text = english_text[0].upper() + english_text[1:] + mark
    return TranslationPair(" ".join(kelen) + mark, english_text)


# Each split draws from its own stream of the generator.
_SPLIT_STREAM = {"train": 0, "dev": 1, "test": 2}


def _draw(split: str, size: int, seed: int) -> list[TranslationPair]:
    rng = random.Random(seed * 3 + _SPLIT_STREAM[split])
    return [generate_pair(rng) for _ in range(size)]


def demo_split(
    split: str, *, size: int, seed: int, held_out_sizes: tuple[int, int]
) -> list[TranslationPair]:
    """The pairs of one split ("train", "dev" or "test") of the demo corpus, in order.

    Training pairs whose Kelen sentence also occurs in dev or test are left out (and drawn
    again), so BLEU on dev/test measures translation of unseen sentences.
    ``held_out_sizes`` are the dev and test sizes that training must avoid.
    """
    if split != "train":
        return _draw(split, size, seed)
    held_out = {p.source for p in _draw("dev", held_out_sizes[0], seed)}
    held_out |= {p.source for p in _draw("test", held_out_sizes[1], seed)}
    rng = random.Random(seed * 3 + _SPLIT_STREAM["train"])
    pairs = []
    while len(pairs) < size:
        pair = generate_pair(rng)
        if pair.source not in held_out:
            pairs.append(pair)
    return pairs
