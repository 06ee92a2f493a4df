"""Entity spans and entity-level precision / recall / F1 equal seqeval's default
(conlleval-compatible) mode on random tag sequences, ill-formed ones included; scheme
conversion keeps the entities."""

import random
import warnings

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities, precision_recall_fscore_support

from jaxtrans.inference.entities import (
    Entity,
    EntityCounts,
    convert_tags,
    count_entities,
    count_entities_by_type,
    entity_spans,
    label_scheme,
    parse_tag,
)

TYPES = ("PER", "LOC", "ORG")


def random_tags(rng: random.Random, length: int, prefixes: str) -> list[str]:
    """Tags drawn independently: I- without B-, type changes inside a chunk, E- after O..."""
    tags = []
    for _ in range(length):
        prefix = rng.choice("O" + prefixes) if rng.random() < 0.7 else "O"
        tags.append("O" if prefix == "O" else f"{prefix}-{rng.choice(TYPES)}")
    return tags


def random_corpus(seed: int, prefixes: str, sentences: int = 40):
    rng = random.Random(seed)
    lengths = [rng.randint(0, 12) for _ in range(sentences)]
    gold = [random_tags(rng, n, prefixes) for n in lengths]
    # Predictions: the gold tags with some changed, so that many entities match.
    predicted = [
        [t if rng.random() < 0.8 else random_tags(rng, 1, prefixes)[0] for t in sentence]
        for sentence in gold
    ]
    return gold, predicted


def seqeval_scores(gold, predicted) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division warnings of empty corpora
        return {
            "precision": precision_score(gold, predicted),
            "recall": recall_score(gold, predicted),
            "f1": f1_score(gold, predicted),
        }


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
@pytest.mark.parametrize("seed", range(25))
def test_entity_spans_equal_seqeval_get_entities(seed, prefixes):
    tags = random_tags(random.Random(seed), 30, prefixes)
    expected = [(t, start, end + 1) for t, start, end in get_entities(tags)]
    assert [(e.type, e.start, e.end) for e in entity_spans(tags)] == expected


@pytest.mark.parametrize("prefixes", ["BI", "BIES"])
@pytest.mark.parametrize("seed", range(20))
def test_precision_recall_f1_equal_seqeval(seed, prefixes):
    gold, predicted = random_corpus(seed, prefixes)
    counts = count_entities(gold, predicted)
    assert counts.scores() == pytest.approx(seqeval_scores(gold, predicted), abs=1e-12)
    flat = [t for s in gold for t in [*s, "O"]]
    assert counts.gold == len(get_entities(flat))
    assert counts.predicted == len(get_entities([t for s in predicted for t in [*s, "O"]]))


def test_scores_by_type_equal_seqeval():
    gold, predicted = random_corpus(7, "BIES", sentences=80)
    ours = count_entities_by_type(gold, predicted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, r, f, support = precision_recall_fscore_support(gold, predicted, average=None)
    for i, kind in enumerate(sorted(TYPES)):
        scores = ours[kind].scores()
        assert (scores["precision"], scores["recall"], scores["f1"]) == pytest.approx(
            (p[i], r[i], f[i]), abs=1e-12
        )
        assert ours[kind].gold == support[i]
    assert sum(ours.values(), EntityCounts()) == count_entities(gold, predicted)


def test_ill_formed_sequences_read_as_conlleval_reads_them():
    # I- without B- starts an entity; a type change inside a chunk cuts it in two.
    assert entity_spans(["O", "I-PER", "I-PER"]) == [Entity(1, 3, "PER")]
    assert entity_spans(["B-PER", "I-LOC", "I-LOC"]) == [Entity(0, 1, "PER"), Entity(1, 3, "LOC")]
    assert entity_spans(["E-PER", "E-PER"]) == [Entity(0, 1, "PER"), Entity(1, 2, "PER")]
    assert entity_spans(["S-PER", "I-PER"]) == [Entity(0, 1, "PER"), Entity(1, 2, "PER")]


def test_no_entities_score_zero_as_seqeval():
    assert count_entities([["O"]], [["O"]]).scores() == {"precision": 0, "recall": 0, "f1": 0}
    assert count_entities([["B-PER"]], [["O"]]).scores() == seqeval_scores([["B-PER"]], [["O"]])


@pytest.mark.parametrize("scheme", ["bio", "iobes"])
@pytest.mark.parametrize("seed", range(10))
def test_converting_the_scheme_keeps_the_entities(seed, scheme):
    tags = random_tags(random.Random(seed), 25, "BIES")
    converted = convert_tags(tags, scheme)
    assert entity_spans(converted) == entity_spans(tags)
    allowed = {"bio": "OBI", "iobes": "OBIES"}[scheme]
    assert all(parse_tag(t)[0] in allowed for t in converted)
    assert convert_tags(converted, scheme) == converted


def test_label_scheme_and_tag_parsing():
    assert label_scheme(["O", "B-PER", "I-PER"]) == "bio"
    assert label_scheme(["O", "B-PER", "I-PER", "E-PER", "S-PER"]) == "iobes"
    assert parse_tag("B-WORK-OF-ART") == ("B", "WORK-OF-ART")
    for bad in ("LABEL_0", "B-", "X-PER", "PER", ""):
        with pytest.raises(ValueError, match="not an entity tag"):
            parse_tag(bad)
    with pytest.raises(ValueError, match="2 gold tags but 1"):
        count_entities([["O", "O"]], [["O"]])
