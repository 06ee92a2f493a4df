"""The built-in BERT demo corpus: short stories about animals, one document each.

Every document follows one animal through the same sequence of events (who it is, where
it lives, what it eats, its friend, a danger, the escape, the season, today), and every
sentence names the animal, its friend or things introduced earlier in the story. So

- masked words are predictable: template words from their neighbours, names, foods and
  places from their other mentions in the same example; MLM accuracy climbs far above
  chance within a few CPU minutes;
- next-sentence prediction is learnable: a true continuation is the next event about the
  same animal, a random one is usually about another animal at another point of its story.

Everything is a pure function of the seed: nothing is downloaded.
"""

import random
from pathlib import Path


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NAMES = _words(
    "Mira Tomas Lena Oskar Nia Bruno Ada Felix Ivy Hugo Luna Otto Rosa Emil Zoe Max Iris Leo "
    "Kira Paul Nora Finn Ella Jonas Mila Theo Lila Anton Clara Samuel Vera Noah Alma Erik "
    "Hanna Milo Greta Jakob Tilda Bela"
)
ANIMALS = _words(
    "fox otter badger rabbit squirrel hedgehog beaver mouse deer owl duck goose heron frog "
    "turtle lizard weasel mole bat crow robin sparrow swan marten raccoon"
)
SIZES = ("small", "tiny", "large", "young", "old", "quick", "shy", "clever")
COLORS = ("brown", "red", "grey", "black", "white", "golden", "silver", "spotted")
HABITATS = ("forest", "meadow", "valley", "marsh", "river bank", "hills", "garden", "lake shore")
SHELTERS = ("burrow", "nest", "hollow tree", "den", "cave", "lodge", "pile of stones", "hut")
FOODS = _words(
    "berries nuts seeds mushrooms apples worms beetles fish clover acorns grass roots honey corn"
)
PREDATORS = ("wolf", "hawk", "lynx", "eagle", "snake", "bear", "wild cat", "boar")
LANDMARKS = ("old bridge", "big rock", "waterfall", "tall oak", "broken fence", "stone wall")
SEASONS = ("winter", "spring", "summer", "autumn")


def _a(word: str) -> str:
    """The indefinite article and the word: "a fox", "an otter"."""
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _story(rng: random.Random) -> list[str]:
    """One document: the events of one animal's story, in order."""
    name, friend = rng.sample(NAMES, 2)
    animal, friend_animal = rng.choice(ANIMALS), rng.choice(ANIMALS)
    size, color = rng.choice(SIZES), rng.choice(COLORS)
    habitat, shelter = rng.choice(HABITATS), rng.choice(SHELTERS)
    food, food2 = rng.sample(FOODS, 2)
    predator, landmark = rng.choice(PREDATORS), rng.choice(LANDMARKS)
    season, age = rng.choice(SEASONS), rng.randint(2, 9)

    events = [
        [
            f"{name} is {_a(size)} {animal} with {color} fur.",
            f"{name} the {animal} is {size} and has {color} fur.",
        ],
        [
            f"{name} lives in {_a(shelter)} in the {habitat}.",
            f"The {habitat} is home to {name}, who sleeps in {_a(shelter)}.",
        ],
        [
            f"Every morning {name} leaves the {shelter} to look for {food}.",
            f"Each day the {animal} goes out of the {shelter} and searches for {food}.",
        ],
        [
            f"{name} likes {food} best, but also eats {food2} when there is no {food}.",
            f"The {animal} eats {food} and sometimes {food2}.",
        ],
        [
            f"{name} often plays with {friend}, {_a(friend_animal)} from the same {habitat}.",
            f"The best friend of {name} is {friend} the {friend_animal}.",
        ],
        [
            f"One day {_a(predator)} came near the {shelter} of {name}.",
            f"One evening {name} saw a hungry {predator} in the {habitat}.",
        ],
        [
            f"{name} ran to the {landmark} and hid there until the {predator} left.",
            f"The {animal} escaped from the {predator} by hiding near the {landmark}.",
        ],
        [
            f"When {season} came, {name} and {friend} gathered {food2} together.",
            f"In {season} {friend} the {friend_animal} helped {name} to collect {food2}.",
        ],
        [
            f"Now {name} is {age} years old and still lives in the {habitat}.",
            f"Today the {color} {animal} is {age} years old and happy in the {shelter}.",
        ],
    ]
    # The first two and last three events always happen; the others are sometimes left
    # out, so documents differ in length and in which event follows which.
    optional = {2, 3, 4, 7}
    return [
        rng.choice(variants)
        for i, variants in enumerate(events)
        if i not in optional or rng.random() < 0.7
    ]


def demo_documents(num_documents: int = 2000, seed: int = 0) -> list[list[str]]:
    """``num_documents`` stories, each a list of sentences; a pure function of the seed."""
    rng = random.Random(seed)
    return [_story(rng) for _ in range(num_documents)]


def write_demo_corpus(path: str | Path, num_documents: int = 2000, seed: int = 0) -> None:
    """Writes the corpus in the pretraining text format: one sentence a line, a blank
    line between documents."""
    documents = demo_documents(num_documents, seed)
    Path(path).write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n")
