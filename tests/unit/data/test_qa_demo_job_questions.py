"""The demo corpus's training-only "Find the {job}." questions (demo_squad(job_questions=True),
data.qa_demo_job_questions): answered by the job word where the story introduces its
person, never asked in dev or test, and the corpus without them unchanged."""

import re

from jaxtrans.data.qa.demo import JOBS, demo_squad

JOB_QUESTION = re.compile(r"Find the ([a-z]+)\.")
WHO_QUESTION = re.compile(r"Who is the ([a-z]+)\?")


def job_questions(examples):
    return [e for e in examples if JOB_QUESTION.fullmatch(e.question)]


def test_job_questions_are_answered_by_the_job_word_before_the_person():
    train = demo_squad(1200, 0, "train", 0.2, name_questions=True, job_questions=True)
    assert train == demo_squad(1200, 0, "train", 0.2, name_questions=True, job_questions=True)
    asked = job_questions(train)
    assert 0.18 < len(asked) / len(train) < 0.32  # one of four kinds
    answered = [e for e in asked if e.answers]
    assert 0.1 < 1 - len(answered) / len(asked) < 0.3  # unanswerable: a job the story lacks
    for example in answered:
        job = JOB_QUESTION.fullmatch(example.question).group(1)
        (answer,) = example.answers
        assert answer.text == job
        assert example.context[answer.start : answer.start + len(job)] == job
        # The word after it starts the answer of "Who is the {job}?" about the same story.
        after = example.context[answer.start + len(job) + 1 :].split()[:2]
        assert after[0][0].isupper() and after[1].rstrip(".")[0].isupper()
    for example in asked:
        if not example.answers:
            job = JOB_QUESTION.fullmatch(example.question).group(1)
            assert job in JOBS and f" {job} " not in f" {example.context} "


def test_who_answers_start_right_after_the_job_word():
    train = demo_squad(600, 0, "train", 0.0, name_questions=True, job_questions=True)
    who = [e for e in train if WHO_QUESTION.fullmatch(e.question)]
    assert who
    for example in who:
        job = WHO_QUESTION.fullmatch(example.question).group(1)
        (answer,) = example.answers
        assert example.context[: answer.start].endswith(f"{job} ")


def test_the_option_adds_questions_and_changes_nothing_else():
    assert not job_questions(demo_squad(400, 0, "train", 0.2, name_questions=True))
    dev = demo_squad(200, 0, "dev", 0.2, job_questions=True)
    assert dev == demo_squad(200, 0, "dev", 0.2)
    assert not job_questions(dev)
