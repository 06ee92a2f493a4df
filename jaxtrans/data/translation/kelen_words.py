"""The demo corpus's words (demo.py): Kelen stems with their English forms, by part of
speech. Which words exist is data; how they combine is demo.py's grammar."""

from typing import NamedTuple


class Noun(NamedTuple):
    kelen: str
    singular: str
    plural: str


class Verb(NamedTuple):
    kelen: str
    base: str
    third_singular: str
    past: str


class Adjective(NamedTuple):
    kelen: str
    english: str


# People and animals: subjects of every verb, objects of some.
ANIMATE = tuple(
    Noun(*row)
    for row in (
        ("kano", "dog", "dogs"),
        ("miso", "cat", "cats"),
        ("tipi", "bird", "birds"),
        ("balu", "horse", "horses"),
        ("nemo", "fish", "fish"),
        ("pelu", "child", "children"),
        ("doru", "man", "men"),
        ("sela", "woman", "women"),
        ("mavi", "teacher", "teachers"),
        ("golu", "farmer", "farmers"),
        ("raso", "king", "kings"),
        ("rasi", "queen", "queens"),
        ("tenu", "doctor", "doctors"),
        ("luvi", "student", "students"),
        ("hapo", "friend", "friends"),
        ("kiri", "mouse", "mice"),
        ("vulo", "wolf", "wolves"),
        ("pani", "baker", "bakers"),
        ("mare", "sailor", "sailors"),
        ("tila", "girl", "girls"),
        ("bode", "boy", "boys"),
        ("ojvi", "owl", "owls"),
    )
)

# Things: objects of transitive verbs.
THINGS = tuple(
    Noun(*row)
    for row in (
        ("aplo", "apple", "apples"),
        ("libu", "book", "books"),
        ("keto", "stone", "stones"),
        ("arbo", "tree", "trees"),
        ("soku", "letter", "letters"),
        ("tasi", "cup", "cups"),
        ("boko", "box", "boxes"),
        ("nawa", "boat", "boats"),
        ("kanti", "song", "songs"),
        ("klavi", "key", "keys"),
        ("pilo", "ball", "balls"),
        ("poru", "door", "doors"),
        ("fene", "window", "windows"),
        ("sedu", "chair", "chairs"),
        ("ovo", "egg", "eggs"),
        ("flori", "flower", "flowers"),
        ("kapo", "hat", "hats"),
        ("sapu", "shoe", "shoes"),
        ("moni", "coin", "coins"),
        ("lumi", "lamp", "lamps"),
        ("funo", "rope", "ropes"),
        ("kuto", "knife", "knives"),
        ("umbro", "umbrella", "umbrellas"),
    )
)

# Places: the noun of a locative phrase, always singular and definite.
PLACES = tuple(
    Noun(*row)
    for row in (
        ("hausu", "house", "houses"),
        ("gardo", "garden", "gardens"),
        ("silvu", "forest", "forests"),
        ("urbi", "city", "cities"),
        ("riva", "river", "rivers"),
        ("meko", "market", "markets"),
        ("skolo", "school", "schools"),
        ("vilu", "village", "villages"),
        ("kampu", "field", "fields"),
        ("kuku", "kitchen", "kitchens"),
        ("monti", "mountain", "mountains"),
        ("vako", "road", "roads"),
    )
)

# Postpositions of place (Kelen: PLACE ta POSTPOSITION; English: PREPOSITION the PLACE).
POSTPOSITIONS = (("ma", "in"), ("sul", "on"), ("pe", "near"), ("ti", "under"), ("dek", "behind"))

ADJECTIVES = tuple(
    Adjective(*row)
    for row in (
        ("muri", "big"),
        ("pika", "small"),
        ("vetu", "old"),
        ("jovi", "young"),
        ("rubi", "red"),
        ("verdi", "green"),
        ("nero", "black"),
        ("bjanu", "white"),
        ("felo", "happy"),
        ("lasu", "tired"),
        ("rapi", "quick"),
        ("lenti", "slow"),
        ("alto", "tall"),
        ("kalmi", "quiet"),
        ("irku", "angry"),
        ("fami", "hungry"),
        ("vazi", "empty"),
        ("gravi", "heavy"),
        ("novi", "new"),
        ("klaru", "bright"),
    )
)

TRANSITIVE = tuple(
    Verb(*row)
    for row in (
        ("vise", "see", "sees", "saw"),
        ("trova", "find", "finds", "found"),
        ("manja", "eat", "eats", "ate"),
        ("porta", "carry", "carries", "carried"),
        ("prena", "take", "takes", "took"),
        ("ama", "like", "likes", "liked"),
        ("segi", "follow", "follows", "followed"),
        ("aju", "help", "helps", "helped"),
        ("voka", "call", "calls", "called"),
        ("teni", "hold", "holds", "held"),
        ("vola", "want", "wants", "wanted"),
        ("apri", "open", "opens", "opened"),
        ("kompa", "buy", "buys", "bought"),
        ("buri", "bring", "brings", "brought"),
        ("mira", "watch", "watches", "watched"),
        ("pinta", "paint", "paints", "painted"),
        ("perda", "lose", "loses", "lost"),
        ("jeta", "throw", "throws", "threw"),
        ("kapta", "catch", "catches", "caught"),
        ("lava", "wash", "washes", "washed"),
    )
)

INTRANSITIVE = tuple(
    Verb(*row)
    for row in (
        ("dormi", "sleep", "sleeps", "slept"),
        ("kura", "run", "runs", "ran"),
        ("kanta", "sing", "sings", "sang"),
        ("nata", "swim", "swims", "swam"),
        ("rida", "laugh", "laughs", "laughed"),
        ("atena", "wait", "waits", "waited"),
        ("pasa", "walk", "walks", "walked"),
        ("bala", "dance", "dances", "danced"),
        ("plora", "cry", "cries", "cried"),
        ("seda", "sit", "sits", "sat"),
    )
)

# Subject pronouns: Kelen, English subject, English object, person key.
PRONOUNS = (
    ("mi", "I", "me", "1s"),
    ("tu", "you", "you", "2"),
    ("eru", "he", "him", "3s"),
    ("ela", "she", "her", "3s"),
    ("nos", "we", "us", "1p"),
    ("ilu", "they", "them", "3p"),
)

# Numerals after the adjectives (they make the noun plural).
NUMERALS = (("du", "two"), ("tri", "three"), ("kvar", "four"))
