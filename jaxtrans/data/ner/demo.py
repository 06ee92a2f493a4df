"""The built-in named-entity demo corpus: news-like sentences about invented people (PER),
places (LOC) and organisations (ORG), tagged in BIO (IOB2).

Names are made from syllables, so the corpus is a pure function of its seed and nothing
is downloaded. Each kind has its own look, and the sentence around it says more:

    PER  Talia Renvik, Orno Vessaberg, Kel Amaro Dunsen (1-3 words)
    LOC  Brastad, Port Elvara, Lake Mirren, New Tolva, Sorvik City
    ORG  Dunvar Bank, Kestrel Group, University of Brastad, Ministry of Water

About 40 templates ("PER told reporters in LOC that ORG would ...") place them, with
capitalised words that are not entities (sentence starts, weekdays, months) and sentences
without any entity. A fifth of every name pool is held out of training: dev and test
draw half their names from it, so they hold entity strings training never saw and a
model must read the context and the shape of a name, not remember it.
"""

import random

from jaxtrans.data.ner.conll import TaggedSentence


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SYLLABLES = _words(
    "ka ri lo ne ma to el sa vi an da mi ro te ul ber gan sor vel tor bra mir dun kes "
    "ren tal or ves lin har qui nor fen ast lum del zan"
)
SURNAME_ENDINGS = ("", "", "son", "sen", "berg", "ova", "ez", "ski", "ton")
PLACE_ENDINGS = ("", "stad", "vik", "mouth", "ford", "ia", "ton", "heim")
PLACE_FORMS = ("{}", "{}", "{}", "Port {}", "Lake {}", "New {}", "{} City", "North {}")
ORG_FORMS = (
    "{} Bank", "{} Group", "{} Motors", "{} Airlines", "{} Times", "{} Energy",
    "{} Holdings", "University of {place}", "Bank of {place}", "{place} United",
    "Ministry of Water", "Ministry of Trade", "{} and {} Partners",
)  # fmt: skip
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
MONTHS = _words("January March April June August October December")

TEMPLATES = (
    "{PER} visited {LOC} on {DAY} .",
    "{PER} , a spokesman for {ORG} , said the deal was done .",
    "{ORG} opened a new office in {LOC} .",
    "shares of {ORG} rose {NUM} percent on {DAY} .",
    "{PER} met {PER} in {LOC} last week .",
    "the mayor of {LOC} , {PER} , resigned in {MONTH} .",
    "{PER} joined {ORG} in {YEAR} .",
    "{LOC} beat {LOC} {NUM} - {NUM} in the final .",
    "according to {ORG} , prices in {LOC} fell by {NUM} percent .",
    "{PER} was born in {LOC} in {YEAR} .",
    "police in {LOC} arrested two men on {DAY} .",
    "the weather was cold on {DAY} morning .",
    "{ORG} said on {DAY} that {PER} would lead the team .",
    "talks between {LOC} and {LOC} ended without a deal .",
    "{PER} told reporters in {LOC} that {ORG} would not comment .",
    "the river rose after heavy rain in {MONTH} .",
    "{ORG} hired {PER} as its new chief executive .",
    "in {MONTH} , {PER} flew from {LOC} to {LOC} .",
    "{PER} and {PER} signed the letter .",
    "a report by {ORG} warned of floods near {LOC} .",
    "{LOC} and {ORG} agreed on a plan to build a bridge .",
    "{PER} won the race in {LOC} on {DAY} .",
    "the company lost {NUM} million in {YEAR} .",
    "{ORG} bought a stake in {ORG} for {NUM} million .",
    "{PER} , who lives in {LOC} , works for {ORG} .",
    "voters in {LOC} chose {PER} as their leader .",
    "{PER} thanked {PER} after the meeting .",
    "the festival in {LOC} drew {NUM} thousand visitors .",
    "{ORG} will move its headquarters to {LOC} next year .",
    "officials said the road to {LOC} was closed .",
    "{PER} left {ORG} after {NUM} years .",
    "{PER} spoke to {PER} of {ORG} by phone .",
    "prices rose again in {MONTH} .",
    "fans of {LOC} waited outside the stadium .",
    "{ORG} and {ORG} announced a merger on {DAY} .",
    "the trial of {PER} began in {LOC} .",
    "a storm hit the coast of {LOC} on {DAY} night .",
    "{PER} said the talks with {ORG} went well .",
    "students at {ORG} protested on {DAY} .",
    "{PER} returned home to {LOC} .",
)


def _pools(seed: int) -> dict[str, list[str]]:
    """Distinct names of each pool (first names, surnames, place names, company names)."""
    rng = random.Random(seed)

    def make(count: int, syllables: tuple[int, int], endings: tuple[str, ...]) -> list[str]:
        names: set[str] = set()
        while len(names) < count:
            parts = rng.choices(SYLLABLES, k=rng.randint(*syllables))
            names.add(("".join(parts) + rng.choice(endings)).capitalize())
        return sorted(names)

    pools = {
        "first": make(300, (2, 2), ("", "", "a", "o")),
        "last": make(400, (2, 3), SURNAME_ENDINGS),
        "place": make(300, (2, 2), PLACE_ENDINGS),
        "company": make(300, (1, 2), ("", "", "ex", "a", "on")),
    }
    for names in pools.values():
        rng.shuffle(names)
    # Names used in more than one pool would be ambiguous; keep each in its first pool.
    seen: set[str] = set()
    for key, names in pools.items():
        pools[key] = [n for n in names if n not in seen]
        seen.update(pools[key])
    return pools


class NameMaker:
    """Entities of each type; ``held_out``: the share of names drawn from the held-out
    fifth of each pool (0 for training, so training never sees those names)."""

    def __init__(self, rng: random.Random, pools: dict[str, list[str]], held_out: float):
        self.rng = rng
        self.held_out = held_out
        self.pools = {k: (v[len(v) // 5 :], v[: len(v) // 5]) for k, v in pools.items()}

    def name(self, pool: str) -> str:
        seen, held = self.pools[pool]
        return self.rng.choice(held if self.rng.random() < self.held_out else seen)

    def entity(self, kind: str) -> list[str]:
        rng = self.rng
        if kind == "PER":
            form = rng.random()
            if form < 0.15:
                return [self.name("last")]
            if form < 0.3:
                return [self.name("first"), self.name("first"), self.name("last")]
            return [self.name("first"), self.name("last")]
        if kind == "LOC":
            return rng.choice(PLACE_FORMS).format(self.name("place")).split()
        form = rng.choice(ORG_FORMS)
        company = (self.name("company"), self.name("company"))
        return form.format(*company, place=self.name("place")).split()


def _sentence(rng: random.Random, names: NameMaker) -> TaggedSentence:
    words: list[str] = []
    tags: list[str] = []
    for slot in rng.choice(TEMPLATES).split():
        kind = slot.strip("{}")
        if kind in ("PER", "LOC", "ORG"):
            entity = names.entity(kind)
            words += entity
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(entity) - 1)
            continue
        if kind == "DAY":
            slot = rng.choice(WEEKDAYS)
        elif kind == "MONTH":
            slot = rng.choice(MONTHS)
        elif kind == "NUM":
            slot = str(rng.randint(2, 99))
        elif kind == "YEAR":
            slot = str(rng.randint(1950, 2024))
        words.append(slot)
        tags.append("O")
    words[0] = words[0][0].upper() + words[0][1:]
    return TaggedSentence(tuple(words), tuple(tags))


SPLIT_SEEDS = {"train": 1, "dev": 2, "test": 3}


def demo_sentences(split: str, count: int, seed: int = 0) -> list[TaggedSentence]:
    """``count`` tagged sentences of ``split`` (train, dev or test); a pure function of
    the arguments. Dev and test draw half their names from the held-out pools."""
    names = NameMaker(random.Random(seed * 10 + SPLIT_SEEDS[split]), _pools(seed), 0.0)
    if split != "train":
        names.held_out = 0.5
    return [_sentence(names.rng, names) for _ in range(count)]
