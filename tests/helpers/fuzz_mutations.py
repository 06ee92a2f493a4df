"""Seeded ways to damage the inputs of train.py and evaluate.py, as bytes: lines and
files of training data and --input text, JSON files (config.json, tokenizer.json,
tokenizer_config.json), SentencePiece models, WordPiece vocabularies. tests/helpers/fuzz_cases.py
makes the fuzz cases of tests/reliability/test_reliability_fuzz.py from them.
"""

import gzip
import json
import random
from collections.abc import Callable


class Draw:
    """The random choices of one case."""

    def __init__(self, seed: str):
        self.rng = random.Random(seed)

    def choice(self, options):
        return self.rng.choice(options)

    def mutation(self, table: dict[str, Callable]) -> str:
        """A name of ``table``."""
        return self.rng.choice(list(table))

    def junk(self, size: int) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(size))


# ------------------------------------------------------------------------ text and files

WORDS = ["the", "cat", "sees", "a", "dog", "runs", "café", "naïve", "über", "ça", "日本", "语"]
LATIN1_WORDS = [w for w in WORDS if w.encode("latin-1", "ignore").decode("latin-1") == w]


def sentence(d: Draw, words=WORDS) -> str:
    return " ".join(d.choice(words) for _ in range(d.rng.randint(1, 6)))


def pair_line(d: Draw, fmt: str, words=WORDS) -> bytes:
    source, target = sentence(d, words), sentence(d, words)
    if fmt == "tsv":
        return f"{source}\t{target}\n".encode()
    record = {"source": source, "target": target}
    return (json.dumps(record, ensure_ascii=d.rng.random() < 0.5) + "\n").encode()


def cut(d: Draw, line: bytes) -> bytes:
    """The line cut at a random byte (maybe inside a UTF-8 character), newline kept."""
    body = line.rstrip(b"\n")
    return body[: d.rng.randrange(len(body) + 1)] + b"\n"


def insert(d: Draw, line: bytes, what: bytes) -> bytes:
    at = d.rng.randrange(len(line))  # before the newline
    return line[:at] + what + line[at:]


# Line mutations: (draw, line, format) -> the bytes that replace the line.
LINE_MUTATIONS: dict[str, Callable[[Draw, bytes, str], bytes]] = {
    "truncated": lambda d, line, fmt: cut(d, line),
    "garbled": lambda d, line, fmt: bytes(
        d.rng.randrange(256) if d.rng.random() < 0.2 and b != 10 else b for b in line
    ),
    "junk_inserted": lambda d, line, fmt: insert(d, line, d.junk(d.rng.randint(1, 12))),
    "nul_inserted": lambda d, line, fmt: insert(d, line, b"\x00"),
    "controls_inserted": lambda d, line, fmt: insert(
        d, line, d.choice([b"\r", b"\x1b[2J", b"\x0b\x0c", "\u2028".encode(), b"\x7f"])
    ),
    "invalid_utf8": lambda d, line, fmt: insert(
        d, line, d.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"])
    ),
    "tab_removed": lambda d, line, fmt: line.replace(b"\t", b" "),
    "tab_added": lambda d, line, fmt: insert(d, line, b"\t"),
    "empty": lambda d, line, fmt: b"\n",
    "blank": lambda d, line, fmt: b"  \t \n",
    "side_blank": lambda d, line, fmt: (
        b" \tx\n" if fmt == "tsv" else b'{"source": " ", "target": "x"}\n'
    ),
    "very_long": lambda d, line, fmt: (
        (" ".join(["cat"] * 3000) + "\tdog\n").encode()
        if fmt == "tsv"
        else json.dumps({"source": "cat " * 3000, "target": "dog"}).encode() + b"\n"
    ),
    "crlf": lambda d, line, fmt: line.rstrip(b"\n") + b"\r\n",
    "binary_line": lambda d, line, fmt: d.junk(d.rng.randint(1, 40)).replace(b"\n", b"") + b"\n",
    "jsonl_wrong_types": lambda d, line, fmt: (
        json.dumps(
            {"source": d.choice([1, None, True, ["a"], {"a": 1}, 1e999]), "target": "x"}
        ).encode()
        + b"\n"
    ),
    "jsonl_not_an_object": lambda d, line, fmt: d.choice(
        [b"[1, 2]\n", b'"cat"\n', b"3\n", b"null\n"]
    ),
    "jsonl_field_missing": lambda d, line, fmt: b'{"source": "a cat"}\n',
    "jsonl_unknown_keys": lambda d, line, fmt: (
        b'{"source": "a cat", "target": "ein kat", "id": 7, "extra": {"x": [1]}}\n'
    ),
    "jsonl_nan": lambda d, line, fmt: b'{"source": NaN, "target": Infinity}\n',
    "jsonl_duplicate_keys": lambda d, line, fmt: b'{"source": 1, "source": "a", "target": "b"}\n',
    "jsonl_lone_surrogate": lambda d, line, fmt: b'{"source": "\\ud800 cat", "target": "dog"}\n',
    "jsonl_deep_nesting": lambda d, line, fmt: b"[" * 100_000 + b"\n",
}


def encoded(d: Draw, lines: list[bytes], fmt: str, encoding: str) -> bytes:
    """The lines re-encoded from UTF-8 (latin-1 and cp1252 text uses only their words)."""
    text = b"".join(lines).decode("utf-8", "replace")
    if encoding in ("latin-1", "cp1252"):
        text = "".join(pair_line(d, fmt, LATIN1_WORDS).decode() for _ in lines)
    return text.encode(encoding, "replace")


# File mutations: (draw, valid lines, format) -> (file content, file name suffix).
FILE_MUTATIONS: dict[str, Callable[[Draw, list[bytes], str], tuple[bytes, str]]] = {
    "empty_file": lambda d, lines, fmt: (b"", ""),
    "only_newlines": lambda d, lines, fmt: (b"\n" * d.rng.randint(1, 5), ""),
    "binary_file": lambda d, lines, fmt: (d.junk(d.rng.randint(1, 600)), ""),
    "utf16": lambda d, lines, fmt: (encoded(d, lines, fmt, d.choice(["utf-16", "utf-16-le"])), ""),
    "utf32": lambda d, lines, fmt: (encoded(d, lines, fmt, "utf-32"), ""),
    "latin1": lambda d, lines, fmt: (encoded(d, lines, fmt, d.choice(["latin-1", "cp1252"])), ""),
    "utf8_bom": lambda d, lines, fmt: (b"\xef\xbb\xbf" + b"".join(lines), ""),
    "no_final_newline": lambda d, lines, fmt: (b"".join(lines).rstrip(b"\n"), ""),
    "gzipped": lambda d, lines, fmt: (gzip.compress(b"".join(lines), mtime=0), ".gz"),
    "gzip_cut_short": lambda d, lines, fmt: (gzip.compress(b"".join(lines), mtime=0)[:-9], ".gz"),
    "gz_name_not_gzip": lambda d, lines, fmt: (b"".join(lines), ".gz"),
    "gzipped_junk": lambda d, lines, fmt: (gzip.compress(d.junk(300), mtime=0), ".gz"),
}


def data_file(d: Draw, fmt: str, lines_count: int) -> tuple[str, bytes, str, bool]:
    """(mutation, content, suffix, counts): a data file with 1-3 line mutations or one file
    mutation; ``counts``: whether skip_malformed must count malformed lines in it."""
    lines = [pair_line(d, fmt) for _ in range(lines_count)]
    if d.rng.random() < 0.35:
        name = d.mutation(FILE_MUTATIONS)
        content, suffix = FILE_MUTATIONS[name](d, lines, fmt)
        return name, content, suffix, False
    table = {n: f for n, f in LINE_MUTATIONS.items() if fmt == "jsonl" or not n.startswith("jsonl")}
    names = [d.mutation(table) for _ in range(d.rng.randint(1, 3))]
    for name in names:
        at = d.rng.randrange(len(lines))
        lines[at] = table[name](d, lines[at], fmt)
    return "+".join(dict.fromkeys(names)), b"".join(lines), "", True


# --------------------------------------------------------------- damaged workdir files
#
# A damage is (path in the workdir, mutation name); ``damaged(text, mutation, seed)`` makes
# the new content from the file as the run wrote it, when the test sets the workdir up.


def json_mutations(d: Draw, text: bytes) -> dict[str, Callable[[], bytes | None]]:
    """Ways to damage a JSON object file (config.json, tokenizer.json, ...). The section and
    leaf mutations pick a field of a section, or a top-level field of a flat file."""

    def with_leaf(change):
        value = json.loads(text)
        leaves = [(s, k) for s, sub in value.items() if isinstance(sub, dict) for k in sub]
        if not leaves:  # a flat file: the file itself is the one section
            value, leaves = {"": value}, [("", k) for k in value]
        if not leaves:
            return b"{}"
        section, key = d.choice(sorted(leaves))
        change(value, section, key)
        return json.dumps(value.get("", value) if "" in value else value).encode()

    def set_leaf(new):
        return lambda: with_leaf(lambda value, section, key: value[section].update({key: new}))

    return {
        "truncated": lambda: text[: d.rng.randrange(len(text))],
        "garbled": lambda: bytes(
            d.rng.randrange(256) if d.rng.random() < 0.05 else b for b in text
        ),
        "emptied": lambda: b"",
        "binary": lambda: d.junk(200),
        "an_array": lambda: b"[" + text + b"]",
        "null": lambda: b"null",
        "a_string": lambda: b'"config"',
        "utf16": lambda: text.decode().encode("utf-16"),
        "latin1_value": lambda: text.replace(b'"', b'"\xe9', 1),
        "deeply_nested": lambda: b"[" * 100_000 + b"]" * 100_000,
        "dotted_key": lambda: text.replace(b"{", b'{"a.b": 1, ', 1),
        "unknown_keys": lambda: text.replace(b"{", b'{"unknown_key": [1, {"x": null}], ', 1),
        "section_an_array": lambda: with_leaf(
            lambda value, section, key: value.update({section: [1]})
        ),
        "section_removed": lambda: with_leaf(lambda value, section, key: value.pop(section)),
        "leaf_null": set_leaf(None),
        "leaf_a_string": set_leaf("24"),
        "leaf_an_array": set_leaf([1, 2]),
        "leaf_negative": set_leaf(-7),
        "leaf_removed": lambda: with_leaf(lambda value, section, key: value[section].pop(key)),
    }


OTHER_DAMAGE = {
    "model": {"emptied": b"", "junk": None, "text": b"not a sentencepiece model"},
    "directory": {"removed": None, "a_file": b"not a directory"},
    "metrics": {
        "junk_lines": b'{"step": 1}\n\x00\x01junk\n{',
        "not_utf8": b'{"step": 2, "loss": 1.0}\n\xff\xfe\n',
        "emptied": b"",
    },
    "other": {"emptied": b"", "junk": None, "null": b"null"},
}


def damaged(text: bytes, mutation: str, seed: str) -> bytes | None:
    """The damaged content of a file now holding ``text`` (None: remove it)."""
    d = Draw(seed)
    if mutation.startswith("vocab:"):
        return VOCAB_MUTATIONS[mutation.removeprefix("vocab:")](d, text)
    if mutation in json_mutations(d, b"{}"):
        return json_mutations(d, text)[mutation]()
    for table in OTHER_DAMAGE.values():
        if mutation in table:
            return d.junk(300) if mutation == "junk" else table[mutation]
    raise KeyError(mutation)


DIRECTORIES = ("tokenizer", "bert_tokenizer", "eval", "checkpoints")


def names_of(target: str) -> tuple[str, ...]:
    """What an error about the damaged ``target`` of a workdir may name."""
    if target.startswith("checkpoints"):
        return ("checkpoint",)
    return (target.split("/")[0], target.rpartition("/")[2])


def damage_of(d: Draw, target: str) -> str:
    """A mutation name for the file or directory ``target`` of a workdir (of a JSON file:
    of the whole file or of one field; a workdir's config.json with a field of the wrong
    type or missing is refused when the workdir is loaded,
    jaxtrans.tasks.saved_run_config.check_saved_run_config)."""
    if target.endswith(".json"):
        return d.choice(list(json_mutations(d, b"{}")))
    kind = {"shared.model": "model", "spm.model": "model", "metrics.jsonl": "metrics"}
    if target in DIRECTORIES:
        return d.choice(sorted(OTHER_DAMAGE["directory"]))
    return d.choice(sorted(OTHER_DAMAGE[kind.get(target.rpartition("/")[2], "other")]))


# -------------------------------------------------------------------------------- BERT

BERT_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "good", "bad", "##s",
              "the", "sees", "runs", "[unused0]", "[unused1]"]  # fmt: skip
# A Hugging Face BERT directory (no weights: a run that accepts these files stops with
# "no model.safetensors" once the model is built).
HF_CONFIG = {"model_type": "bert", "vocab_size": len(BERT_VOCAB), "hidden_size": 8,
             "num_attention_heads": 2, "intermediate_size": 16, "num_hidden_layers": 1,
             "max_position_embeddings": 16, "hidden_act": "gelu"}  # fmt: skip
HF_FILES = {
    "config.json": json.dumps(HF_CONFIG).encode(),
    "vocab.txt": ("\n".join(BERT_VOCAB) + "\n").encode(),
    "tokenizer_config.json": b'{"do_lower_case": true, "tokenize_chinese_chars": true}',
}
VOCAB_MUTATIONS = {
    "latin1": lambda d, text: text.replace(b"cat", "caf\xe9".encode("latin-1")),
    "utf16": lambda d, text: text.decode().encode("utf-16"),
    "binary": lambda d, text: d.junk(300),
    "emptied": lambda d, text: b"",
    "special_missing": lambda d, text: text.replace(
        d.choice([b"[CLS]", b"[MASK]", b"[PAD]"]), b"x"
    ),
    "duplicates": lambda d, text: text + text,
    "nul_lines": lambda d, text: text.replace(b"\n", b"\x00\n", 3),
    "crlf": lambda d, text: text.replace(b"\n", b"\r\n"),
}
# Shard names for a sharded index: outside the directory, or not a file in it.
INDEX_SHARDS = ["../outside.safetensors", "/etc/passwd", "a/../../x", "", "missing.safetensors",
                ".", "sub/"]  # fmt: skip
