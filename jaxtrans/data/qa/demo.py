"""A built-in question-answering corpus: short stories about a few people, generated from
a seed (nothing is downloaded), in the shape of SQuAD 2.0 (splits.py reads a run's
splits: a SQuAD file, else this corpus).

Each story introduces three people by job, first name and surname, in sentences where
they meet, write to or walk with one another, then mentions some of them again by first
name alone, with a sentence about the weather or the town::

    The baker Mira Holm met the pilot Tomas Berg at the market. The poet Ines Dahl stayed
    at home. Later Tomas went back to work. It rained all morning.

A question asks for a person's surname by first name ("What is Mira's surname?" -> "Holm",
"What is the surname of Tomas?" -> "Berg") or for the person with a job ("Who is the
poet?" -> "Ines Dahl"). Every story has three first names, surnames and jobs, and names
come back without their surname, so the answer is found only by matching the question's
name (or job) with the right place of the context. A share of questions
(``unanswerable``) cannot be answered: they ask about a name or a job the story does not
have (SQuAD 2.0's ``is_impossible``; their answer is [CLS]). With ``name_questions``,
training stories are also asked "Who is Mira?" -> "Mira Holm", with ``job_questions``
"Find the poet." -> "poet" (never dev or test).

Dev and test questions ask for combinations no training story contains: training stories
leave out every (first name, job) and (first name, surname) pair whose hash falls in one
fifth, and those are exactly the pairs dev and test ask about.

(The answer stands right after the name or job asked for. Facts stated further from
the name, as in "Mira lives in Oslo", take a small BERT trained from scratch far longer
to bind to the right person than the demo's few minutes allow: docs/bert.md.)
"""

import random
import zlib

from jaxtrans.data.qa.squad import Answer, QAExample

_NAMES = (
    "Mira Tomas Ines Oskar Lena Pavel Nora Felix Ada Bruno Clara Emil Greta Hugo Ida Jonas Kira "
    "Leo Maja Nils Olga Piet Rosa Sven Tara Uli Vera Wim Yara Zeno Alma Boris Cora Dario Elsa "
    "Finn Gina Hans Iris Karl"
)
NAMES = tuple(_NAMES.split())
_JOBS = (
    "baker nurse pilot teacher farmer carpenter lawyer chef painter doctor fisher tailor "
    "miller poet singer gardener potter weaver sailor judge"
)
JOBS = tuple(_JOBS.split())
_SURNAMES = (
    "Holm Berg Lund Dahl Strand Vik Moe Aas Falk Lie Roth Kern Vogt Brand Sand Hart Frost "
    "Stone Reed Marsh"
)
SURNAMES = tuple(_SURNAMES.split())

# Sentences about two people (a, b) or one; {j} job, {n} first name, {s} surname.
PAIR_SENTENCES = (
    "The {ja} {na} {sa} met the {jb} {nb} {sb} at the market.",
    "The {ja} {na} {sa} wrote a letter to the {jb} {nb} {sb}.",
    "The {ja} {na} {sa} and the {jb} {nb} {sb} walked to the river.",
)
ONE_SENTENCES = (
    "The {j} {n} {s} stayed at home.",
    "In the evening the {j} {n} {s} sang a song.",
)
MENTIONS = ("Later {n} went back to work.", "{n} was tired after the long day.")
FILLERS = (
    "It rained all morning.",
    "The market was busy that day.",
    "Snow fell late in the evening.",
    "The village held a small festival.",
)
# Question templates by what they ask: the surname of {n}, or who is the {j}.
QUESTIONS = {
    "surname": ("What is {n}'s surname?", "What is the surname of {n}?"),
    "who": ("Who is the {j}?",),
}
# A training-only kind (``name_questions``): who is {n}, answered by the whole name. Its start
# is the very word the question names, found by one head that matches the two; its end, the
# surname, is the word after that: the step the two kinds above are built on.
NAME_QUESTIONS = ("Who is {n}?",)
# A training-only kind (``job_questions``): find the {j}, answered by the job word itself,
# found by one head that matches it with the question's: the start of "Who is the {j}?" is
# the word after it, as a surname is the word after the name asked for.
JOB_QUESTIONS = ("Find the {j}.",)
EXTRA_QUESTIONS = {"name": NAME_QUESTIONS, "job": JOB_QUESTIONS}


def is_held_out(name: str, fact: str, value: str) -> bool:
    """Whether (first name, "job" or "surname", value) belongs to dev/test only (one in
    five, by a fixed hash)."""
    return zlib.crc32(f"{name}|{fact}|{value}".encode()) % 5 == 0


def _person(rng: random.Random, name: str, training: bool) -> dict[str, str]:
    while True:
        job, surname = rng.choice(JOBS), rng.choice(SURNAMES)
        if not training or not (
            is_held_out(name, "job", job) or is_held_out(name, "surname", surname)
        ):
            return {"n": name, "j": job, "s": surname}


def _story(rng: random.Random, training: bool):
    """Three people with distinct names, jobs and surnames; the context; where each
    person's job, first name and surname start in it."""
    names = rng.sample(NAMES, 3)
    people = [_person(rng, name, training) for name in names]
    if len({p["j"] for p in people}) < 3 or len({p["s"] for p in people}) < 3:
        return _story(rng, training)
    a, b, c = people
    pair = rng.choice(PAIR_SENTENCES).format(
        ja=a["j"], na=a["n"], sa=a["s"], jb=b["j"], nb=b["n"], sb=b["s"]
    )
    sentences = [pair, rng.choice(ONE_SENTENCES).format(**c)]
    rng.shuffle(sentences)
    sentences += [rng.choice(MENTIONS).format(n=rng.choice(names)), rng.choice(FILLERS)]
    context = " ".join(sentences)
    offsets = {}
    for person in people:
        start = context.index(f"{person['j']} {person['n']} {person['s']}")
        name = start + len(person["j"]) + 1
        offsets[person["n"]] = {"job": start, "name": name, "surname": name + len(person["n"]) + 1}
    return people, context, offsets


def _templates(kind: str) -> tuple[str, ...]:
    return EXTRA_QUESTIONS[kind] if kind in EXTRA_QUESTIONS else QUESTIONS[kind]


def _question(rng, kind: str, person: dict[str, str], offsets) -> tuple[str, Answer]:
    question = rng.choice(_templates(kind)).format(n=person["n"], j=person["j"])
    if kind == "job":
        return question, Answer(person["j"], offsets["job"])
    if kind in ("who", "name"):
        return question, Answer(f"{person['n']} {person['s']}", offsets["name"])
    return question, Answer(person["s"], offsets["surname"])


def demo_squad(
    num_questions: int,
    seed: int,
    split: str = "train",
    unanswerable: float = 0.0,
    name_questions: bool = False,
    job_questions: bool = False,
) -> list[QAExample]:
    """``num_questions`` questions of the demo corpus (see module doc). ``split``: "train"
    (stories without the held-out pairs, three questions a story) or "dev" / "test" (one
    question a story, about a held-out pair); ``unanswerable``: the share of questions
    the story cannot answer; ``name_questions``: training stories are also asked "Who is
    {n}?" (NAME_QUESTIONS), ``job_questions``: "Find the {j}." (JOB_QUESTIONS); each extra
    kind takes an equal share of the training questions, dev and test never."""
    rng = random.Random(f"{split}:{seed}")
    training = split == "train"
    kinds = list(QUESTIONS)
    if training:
        kinds += ["name"] * name_questions + ["job"] * job_questions
    examples: list[QAExample] = []
    while len(examples) < num_questions:
        people, context, offsets = _story(rng, training)
        asked = []
        for person in people:
            for kind in kinds:
                fact = "surname" if kind == "surname" else "job"
                value = person["s" if fact == "surname" else "j"]
                if training or is_held_out(person["n"], fact, value):
                    asked.append((kind, person))
        rng.shuffle(asked)
        for kind, person in asked[: 3 if training else 1]:
            if len(examples) == num_questions:
                break
            qid = f"demo-{split}-{seed}-{len(examples)}"
            if rng.random() < unanswerable:
                absent = {
                    "n": rng.choice([n for n in NAMES if n not in offsets]),
                    "j": rng.choice([j for j in JOBS if j not in {p["j"] for p in people}]),
                }
                question = rng.choice(_templates(kind)).format(**absent)
                examples.append(QAExample(qid, question, context, (), True, "demo"))
                continue
            question, answer = _question(rng, kind, person, offsets[person["n"]])
            examples.append(QAExample(qid, question, context, (answer,), False, "demo"))
    return examples
