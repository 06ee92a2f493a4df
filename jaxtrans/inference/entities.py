"""Entity tags -> entity spans, and entity-level precision / recall / F1 as conlleval
(the CoNLL-2000 evaluation script, and ``seqeval``'s default mode) counts them.

A tag is ``O`` or ``PREFIX-TYPE`` with PREFIX one of B (begin), I (inside), E (end), S
(single). The three schemes use them so:

    bio (IOB2)  B-PER I-PER O B-LOC        every entity starts with B
    iob1        I-PER I-PER O I-LOC        B only where an entity follows one of its type
    iobes       B-PER E-PER O S-LOC        E ends, S is a one-word entity

``entity_spans`` reads any of them, and ill-formed sequences too, with conlleval's rules:
an entity starts at B or S, at I or E after O, E or S, or where the type changes; it ends
before a B, S or O, after an E or S, or where the type changes. So ``I-PER`` after ``O``
starts an entity and ``B-PER I-LOC`` is two. An entity is correct when its type and its
exact span equal a gold entity's.

Pure Python: tags are strings, spans are word indices.
"""

import dataclasses
from collections.abc import Sequence

PREFIXES = ("B", "I", "E", "S")
# The prefixes each scheme's files may use.
SCHEME_PREFIXES = {"bio": ("B", "I"), "iob1": ("B", "I"), "iobes": ("B", "I", "E", "S")}
SCHEMES = tuple(SCHEME_PREFIXES)


@dataclasses.dataclass(frozen=True, order=True)
class Entity:
    """An entity of ``type`` over words ``[start, end)`` of its sentence."""

    start: int
    end: int
    type: str


def parse_tag(tag: str) -> tuple[str, str]:
    """``"B-PER"`` -> ("B", "PER"); ``"O"`` -> ("O", ""). ValueError for anything else
    (no prefix, an unknown prefix, an empty type)."""
    if tag == "O":
        return "O", ""
    prefix, dash, type_ = tag.partition("-")
    if not dash or prefix not in PREFIXES or not type_:
        raise ValueError(f"{tag!r} is not an entity tag (O, or B-, I-, E-, S- and a type)")
    return prefix, type_


def _ends_an_entity(prev: str, prev_type: str, prefix: str, type_: str) -> bool:
    """Whether the entity of the previous word ends before this word (conlleval)."""
    if prev == "O":
        return False
    return prev in "ES" or prefix in "BSO" or prev_type != type_


def _starts_an_entity(prev: str, prev_type: str, prefix: str, type_: str) -> bool:
    """Whether an entity starts at this word (conlleval)."""
    if prefix == "O":
        return False
    return prefix in "BS" or prev in "OES" or prev_type != type_


def entity_spans(tags: Sequence[str]) -> list[Entity]:
    """The entities of one sentence's tags, in order (see module doc for the rules).
    ValueError for a tag that does not parse."""
    entities: list[Entity] = []
    prev, prev_type, start = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        prefix, type_ = parse_tag(tag)
        if _ends_an_entity(prev, prev_type, prefix, type_):
            entities.append(Entity(start, i, prev_type))
        if _starts_an_entity(prev, prev_type, prefix, type_):
            start = i
        prev, prev_type = prefix, type_
    return entities


def spans_to_tags(entities: Sequence[Entity], length: int, scheme: str) -> list[str]:
    """Tags of a sentence of ``length`` words holding ``entities`` (non-overlapping) in
    ``scheme`` ("bio" or "iobes"); ``entity_spans`` of the result gives them back."""
    if scheme not in ("bio", "iobes"):
        raise ValueError(f"cannot write tags in the {scheme!r} scheme; use bio or iobes")
    tags = ["O"] * length
    for e in entities:
        for i in range(e.start, e.end):
            tags[i] = f"I-{e.type}"
        tags[e.start] = f"B-{e.type}"
        if scheme == "iobes":
            if e.end - e.start == 1:
                tags[e.start] = f"S-{e.type}"
            else:
                tags[e.end - 1] = f"E-{e.type}"
    return tags


def convert_tags(tags: Sequence[str], scheme: str) -> list[str]:
    """The same entities written in ``scheme`` (bio or iobes), from tags of any scheme."""
    return spans_to_tags(entity_spans(tags), len(tags), scheme)


def label_scheme(labels: Sequence[str]) -> str:
    """The scheme a model's label set speaks: iobes if any label is E- or S-, else bio."""
    return "iobes" if any(parse_tag(label)[0] in "ES" for label in labels) else "bio"


@dataclasses.dataclass(frozen=True)
class EntityCounts:
    """Entity counts over a set of sentences; they add up across sentences."""

    correct: int = 0
    predicted: int = 0
    gold: int = 0

    def __add__(self, other: "EntityCounts") -> "EntityCounts":
        return EntityCounts(
            self.correct + other.correct,
            self.predicted + other.predicted,
            self.gold + other.gold,
        )

    def scores(self) -> dict[str, float]:
        """Precision, recall and F1 (each 0 where its denominator is 0, as seqeval)."""
        precision = self.correct / self.predicted if self.predicted else 0.0
        recall = self.correct / self.gold if self.gold else 0.0
        total = precision + recall
        return {
            "precision": precision,
            "recall": recall,
            "f1": 2 * precision * recall / total if total else 0.0,
        }


def count_entities_by_type(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> dict[str, EntityCounts]:
    """Correct / predicted / gold entities of each type, over sentences' gold and
    predicted tags (each pair of one length; the schemes may differ)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    counts: dict[str, EntityCounts] = {}
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"{len(gold_tags)} gold tags but {len(predicted_tags)} predicted")
        g, p = set(entity_spans(gold_tags)), set(entity_spans(predicted_tags))
        for e in g | p:
            found = EntityCounts(int(e in g and e in p), int(e in p), int(e in g))
            counts[e.type] = counts.get(e.type, EntityCounts()) + found
    return dict(sorted(counts.items()))


def count_entities(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> EntityCounts:
    """Correct / predicted / gold entities of all types (see count_entities_by_type)."""
    return sum(count_entities_by_type(gold, predicted).values(), EntityCounts())
