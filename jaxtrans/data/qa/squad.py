"""SQuAD v1.1 / v2.0 files -> question-answering examples.

The format (UTF-8 JSON, optionally .gz)::

    {"version": "v2.0",
     "data": [{"title": "...",
               "paragraphs": [{"context": "...",
                               "qas": [{"id": "...", "question": "...",
                                        "answers": [{"text": "...", "answer_start": 17}],
                                        "is_impossible": false}]}]}]}

``is_impossible`` (SQuAD 2.0) marks a question the context does not answer; its
``answers`` are then empty (SQuAD 2.0's ``plausible_answers`` are ignored). A question
that is not impossible needs at least one answer. Every answer keeps its text and
character offset; whether the text is really found at that offset is checked where
training uses it (``jaxtrans.data.qa.qa_features``), since the official evaluation compares
answer texts only. A malformed file stops with a one-line ``UserError`` naming the file and
the JSON path (and the question id where there is one).
"""

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

from jaxtrans.errors import UserError, describe, json_type


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    # Character offset of the answer in the context.
    start: int


@dataclasses.dataclass(frozen=True)
class QAExample:
    """One question about one context, with its gold answers (none when unanswerable)."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...] = ()
    is_impossible: bool = False
    title: str = ""


def _field(record: dict, key: str, kind: type, where: str, path: Path) -> Any:
    if key not in record:
        raise UserError(f"{path}: {where} has no {key!r}; is this a SQuAD JSON file?")
    value = record[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", int: "a number", list: "an array", dict: "an object"}
        raise UserError(
            f"{path}: {where}.{key} is {json_type(value)}, not {expected[kind]}; fix the file"
        )
    return value


def parse_squad(document: Any, path: str | Path = "<squad>") -> list[QAExample]:
    """A parsed SQuAD JSON document -> its examples in file order; ``path`` names the file
    in errors. Question ids must be unique."""
    path = Path(path)
    if not isinstance(document, dict):
        raise UserError(f"{path} holds {json_type(document)}; a SQuAD file holds an object")
    examples: list[QAExample] = []
    seen: set[str] = set()
    for a, article in enumerate(_field(document, "data", list, "the file", path)):
        where = f"data[{a}]"
        if not isinstance(article, dict):
            raise UserError(f"{path}: {where} is {json_type(article)}, not an object")
        title = article.get("title", "")
        title = title if isinstance(title, str) else str(title)
        for p, paragraph in enumerate(_field(article, "paragraphs", list, where, path)):
            where_p = f"{where}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise UserError(f"{path}: {where_p} is {json_type(paragraph)}, not an object")
            context = _field(paragraph, "context", str, where_p, path)
            for q, qa in enumerate(_field(paragraph, "qas", list, where_p, path)):
                where_q = f"{where_p}.qas[{q}]"
                if not isinstance(qa, dict):
                    raise UserError(f"{path}: {where_q} is {json_type(qa)}, not an object")
                qid = qa.get("id")
                if not isinstance(qid, str | int) or isinstance(qid, bool) or qid == "":
                    raise UserError(
                        f"{path}: {where_q} has no string 'id'; give every question one"
                    )
                qid = str(qid)
                where_q = f'{where_q} (id "{qid}")'
                if qid in seen:
                    raise UserError(f"{path}: {where_q}: the id is used twice; ids must be unique")
                seen.add(qid)
                examples.append(_example(qa, qid, context, title, where_q, path))
    return examples


def _example(qa: dict, qid: str, context: str, title: str, where: str, path: Path) -> QAExample:
    question = _field(qa, "question", str, where, path)
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise UserError(f"{path}: {where}.is_impossible is {json_type(impossible)}, not a boolean")
    if not isinstance(qa.get("answers", []), list):
        raise UserError(f"{path}: {where}.answers is {json_type(qa['answers'])}, not an array")
    answers = []
    for i, answer in enumerate(qa.get("answers", []) if not impossible else []):
        where_a = f"{where}.answers[{i}]"
        if not isinstance(answer, dict):
            raise UserError(f"{path}: {where_a} is {json_type(answer)}, not an object")
        text = _field(answer, "text", str, where_a, path)
        start = _field(answer, "answer_start", int, where_a, path)
        if not 0 <= start <= len(context):
            raise UserError(
                f"{path}: {where_a}.answer_start={start} is outside the context "
                f"({len(context)} characters); fix the offset"
            )
        answers.append(Answer(text, start))
    if not impossible and not answers:
        raise UserError(
            f"{path}: {where} has no answers and is not is_impossible; give an answer or mark "
            "it unanswerable"
        )
    return QAExample(qid, question, context, tuple(answers), impossible, title)


def read_squad(path: str | Path) -> list[QAExample]:
    """The examples of a SQuAD .json (or .json.gz) file; UserError names what is wrong."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"SQuAD file {path} not found; check --config.data.qa_* paths")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8") from None
    except (OSError, ValueError, RecursionError, EOFError) as error:
        raise UserError(f"{path} is not valid JSON ({describe(error)})") from None
    examples = parse_squad(document, path)
    if not examples:
        raise UserError(f"{path} holds no questions")
    return examples


def gold_answers(examples: list[QAExample]) -> dict[str, list[str]]:
    """Question id -> its gold answer texts ([] when unanswerable), for the metrics."""
    return {e.id: [a.text for a in e.answers] for e in examples}


def parse_question_line(line: str, number: int) -> QAExample:
    """``{"question": "...", "context": "..."}`` -> an example; UserError names the line."""
    where = f"--input line {number}"
    try:
        record = json.loads(line)
    except ValueError:
        raise UserError(
            f'{where} is not JSON; give one {{"question": "...", "context": "..."}} a line'
        ) from None
    if not isinstance(record, dict):
        raise UserError(f'{where} holds {json_type(record)}; give {{"question", "context"}}')
    for key in ("question", "context"):
        if key not in record:
            raise UserError(f'{where} has no "{key}"; give {{"question": ..., "context": ...}}')
        if not isinstance(record[key], str):
            raise UserError(f'{where}: "{key}" is {json_type(record[key])}, not a string')
    if not record["context"].strip():
        raise UserError(f"{where}: the context is empty")
    return QAExample(str(number), record["question"], record["context"])
