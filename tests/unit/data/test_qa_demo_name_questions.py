"""The demo corpus's training-only "Who is {name}?" questions (demo_squad(name_questions=True),
data.qa_demo_name_questions): a third of the training questions, answered by the whole
name where the story introduces it, and never asked in dev or test."""

import re

from jaxtrans.data.qa.demo import NAMES, SURNAMES, demo_squad

NAME_QUESTION = re.compile(r"Who is ([A-Z][a-z]+)\?")


def name_questions(examples):
    return [e for e in examples if NAME_QUESTION.fullmatch(e.question)]


def test_name_questions_are_a_third_of_training_answered_by_the_introduced_full_name():
    train = demo_squad(900, seed=0, split="train", unanswerable=0.2, name_questions=True)
    assert train == demo_squad(900, seed=0, split="train", unanswerable=0.2, name_questions=True)
    asked = name_questions(train)
    assert 0.25 < len(asked) / len(train) < 0.42
    answered = [e for e in asked if e.answers]
    assert 0.1 < 1 - len(answered) / len(asked) < 0.3  # unanswerable: a name the story lacks
    for example in answered:
        name = NAME_QUESTION.fullmatch(example.question).group(1)
        (answer,) = example.answers
        first, surname = answer.text.split()
        assert first == name and surname in SURNAMES
        assert example.context[answer.start : answer.start + len(answer.text)] == answer.text
    for example in asked:
        if not example.answers:
            name = NAME_QUESTION.fullmatch(example.question).group(1)
            assert name in NAMES and name not in example.context


def test_without_the_option_and_in_dev_no_name_is_asked():
    assert not name_questions(demo_squad(300, seed=0, split="train", unanswerable=0.2))
    dev = demo_squad(200, seed=0, split="dev", unanswerable=0.2, name_questions=True)
    assert dev == demo_squad(200, seed=0, split="dev", unanswerable=0.2)
    assert not name_questions(dev)
