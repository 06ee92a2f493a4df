"""The fuzz cases of tests/reliability/test_reliability_fuzz.py: seeded bad input for train.py and
evaluate.py, made from the mutations of tests/helpers/fuzz_mutations.py.

``make_cases(seed, count)`` draws case i from kind ``KINDS[i % len(KINDS)]`` with its own
``random.Random(f"{seed}-{i}")``, so any count starts with the same cases (the default run
is a prefix of the full one) and the first ``len(KINDS)`` cases hold one of each kind (the
evaluate.py kinds are drawn in tests/helpers/fuzz_evaluate_cases.py). A case is data
only (files as bytes, flags with ``{inputs}`` for the directory the files go to, damage as
mutation names); the test builds the workdir, runs the program and judges.
"""

import dataclasses
import json

from fuzz_evaluate_cases import evaluate_flags, evaluate_input, evaluate_workdir
from fuzz_expectations import ACCEPTED, FRESH_EXPECTED, REFUSED  # noqa: F401  (the test's)
from fuzz_mutations import (
    BERT_VOCAB,
    HF_FILES,
    INDEX_SHARDS,
    LINE_MUTATIONS,
    VOCAB_MUTATIONS,
    Draw,
    damage_of,
    data_file,
    json_mutations,
    names_of,
    pair_line,
    sentence,
)


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """One run of a program on bad input.

    base: the flags before ``flags``: "tiny" (configs/demo.py shrunk, 1 step), "resume"
        (the reference run's own flags: its 8 steps are done, so nothing trains), "bert"
        (configs/bert_classify.py shrunk, from ``{inputs}/hf``) or "" (none).
    workdir: "fresh" (none yet), "tokenizer" (empty but for the reference run's tokenizer,
        so that the model has the reference's shapes and reuses its compiled step),
        "trained" (a copy of the reference run: checkpoints 2, 4, 6, 8) or "bert" (a BERT
        workdir with a WordPiece tokenizer and no checkpoint).
    damage: (path in the workdir, mutation of fuzz_mutations.damaged, or "data.test=NAME":
        config.json names the input file NAME as the test split).
    names: the error line must hold one of these (the file, the flag, the field).
    counted: the data file whose malformed lines a skip_malformed run must count.
    expect: REFUSED (exit 2: the input is invalid), ACCEPTED (exit 0: it is valid) or ""
        (either: e.g. damaged data that data.skip_malformed may skip, a damaged file that
        resuming may not read).
    """

    number: int
    kind: str
    mutation: str
    program: str
    base: str
    workdir: str
    flags: tuple[str, ...] = ()
    inputs: tuple[tuple[str, bytes], ...] = ()
    damage: tuple[tuple[str, str], ...] = ()
    names: tuple[str, ...] = ()
    counted: str = ""
    expect: str = ""

    @property
    def id(self) -> str:
        return f"{self.number:03d}-{self.kind}-{self.mutation}"


# ------------------------------------------------------------------------- train.py


def train_data(d: Draw, number: int) -> dict:
    """A damaged .tsv / .jsonl (maybe .gz) training file, skipping malformed lines or not.
    A fresh workdir trains its tokenizer on it, which gives the model other shapes: that
    run stops before the first step, so that nothing new compiles."""
    fmt = d.choice(["tsv", "jsonl"])
    mutation, content, suffix, counts = data_file(d, fmt, d.rng.randint(2, 10))
    name = f"train{number}.{fmt}{suffix}"
    if d.rng.random() < 0.08:
        name = f"train{number}{d.choice(['.txt', '.csv', '', '.TSV'])}"
        mutation += "+unknown_extension"
    inputs, paths = [(name, content)], f"{{inputs}}/{name}"
    if d.rng.random() < 0.2:  # a good file first, then the bad one
        inputs.append(("good.tsv", b"".join(pair_line(d, "tsv") for _ in range(4))))
        paths = f"{{inputs}}/good.tsv,{paths}"
    skip = d.rng.random() < 0.5
    flags = [f"--config.data.train={paths}", f"--config.data.skip_malformed={skip}"]
    flags.append(d.choice(["--config.data.reverse=True", "--config.data.truncate=True"]))
    workdir = d.choice(["tokenizer"] * 4 + ["fresh"])
    if workdir == "fresh":
        flags.append("--config.train.num_steps=0")
    return dict(mutation=mutation, workdir=workdir, flags=tuple(flags), inputs=tuple(inputs),
                names=(name, "--config.data"), counted=name if skip and counts else "")  # fmt: skip


def config_leaves() -> dict[str, type]:
    """Every field of configs/demo.py: KEY -> the type of its default."""
    from tiny_configs import tiny_translation_config

    def walk(tree: dict, prefix: str = ""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from walk(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", type(value)

    return dict(walk(tiny_translation_config(1).to_dict()))


NOT_OF_TYPE = {
    int: ["x", "1.5", "[1]", "None", "1e3", "true", "0x", "1_000_", "٣", ""],
    float: ["x", "[1.0]", "1,5", "None", "0.1.2", ""],
    bool: ["maybe", "2", "yes", "None", "-1", ""],
}


def typo(d: Draw, word: str) -> str:
    i = d.rng.randrange(len(word))
    typos = [word[:i] + word[i + 1 :], word[:i] + word[i] * 2 + word[i + 1 :], word.upper()]
    return d.choice(typos) or "x"


def train_flags(d: Draw, number: int) -> dict:
    """A mistyped, unknown or malformed flag (on the reference run's own command)."""
    leaves = config_leaves()
    key = d.choice(sorted(k for k, kind in leaves.items() if kind in NOT_OF_TYPE))
    section, _, leaf = key.rpartition(".")
    in_section = f"{section}." if section else ""
    mutations = {  # mutation: (alternative flags, what the error names)
        "wrong_type": ([f"--config.{key}={v}" for v in NOT_OF_TYPE[leaves[key]]], key),
        "unknown_field": ([f"--config.{in_section}{typo(d, leaf)}=1"], "--config."),
        "unknown_section": ([f"--config.{typo(d, key)}.x=1"], "--config."),
        "field_inside_a_leaf": ([f"--config.{key}.x=1"], f"{key}.x"),
        "section_overwritten": (["--config.train=3", "--config.data=1", "--config.model="],
                                "--config."),
        "empty_field_name": (["--config.=1", "--config..x=1", "--config.train.=2"], "--config."),
        "missing_value": ([f"--config.{key}"], "--config."),
        "double_equals": ([f"--config.{key}==1"], key),
        "unknown_flag": (["--nope=1", "--workdirr=x", "-x", "--config_file=a"], "flag"),
        "config_empty": (["--config="], "--config"),
        "config_missing": (["--config={inputs}/no.py", "--config={inputs}/x/../y.py"], "--config"),
        "config_override_arg": (["--config=configs/demo.py:nonsense"], "--config"),
        "workdir_empty": (["--workdir="], "--workdir"),
        "flagfile_missing": (["--flagfile={inputs}/none.flags"], "flagfile"),
        "flagfile_junk": (["--flagfile={inputs}/junk.flags"], "flag"),
    }  # fmt: skip
    mutation = d.choice(sorted(mutations))
    alternatives, name = mutations[mutation]
    junk = b"--config.train.num_steps=zz\n" + d.junk(40).replace(b"\0", b"")
    return dict(mutation=mutation, flags=(d.choice(alternatives),),
                inputs=(("junk.flags", junk),), names=(name,), expect=REFUSED)  # fmt: skip


# Well-typed but impossible values: (key, value, the mutation's name or "" for key=value). A
# resumed run must refuse them before it trains (or has nothing to train); a fresh run (one
# step on the reference's tokenizer) gets those that change no compiled shape.
RESUMED_VALUES = [
    ("model.num_heads", 0, "model_num_heads_0"), ("model.num_heads", -2, ""),
    ("model.num_heads", 3, ""), ("model.d_model", 0, ""), ("model.d_model", -32, ""),
    ("model.d_model", 31, ""), ("model.d_ff", 0, ""), ("model.d_ff", -1, ""),
    ("model.num_encoder_layers", 0, ""), ("model.num_encoder_layers", -1, ""),
    ("model.max_len", 0, ""), ("model.max_len", 1, ""), ("model.max_len", -1, ""),
    ("model.position", "x", ""), ("model.position", "", ""), ("model.activation", "swish", ""),
    ("model.norm", "middle", ""), ("model.dtype", "float8", ""),
    ("model.dtype", "x", "model_dtype_unnamed"), ("model.dtype", "int32", "model_dtype_int"),
    ("model.attention_impl", "flash", ""), ("model.dropout_rate", -0.5, ""),
    ("model.dropout_rate", 1.5, ""), ("model.dropout_rate", "nan", "model_dropout_nan"),
    ("data.vocab_size", 0, ""), ("data.vocab_size", -1, ""), ("data.vocab_size", 3, ""),
    ("task", "translate", ""), ("task", "bert_classification", ""), ("task", "", ""),
    ("train.on_nonfinite", "ignore", ""), ("train.num_steps", -1, ""),
]  # fmt: skip
FRESH_VALUES = [
    ("train.log_every", 0, "train_log_every_0"), ("train.log_every", -1, ""),
    ("train.checkpoint_every", 0, "train_checkpoint_every_0"),
    ("train.checkpoint_every", -1, ""), ("train.checkpoint_every", 10**9, ""),
    ("train.keep_checkpoints", 0, ""),
    ("train.keep_checkpoints", -1, "train_keep_checkpoints_negative"),
    ("train.grad_accum_steps", 0, ""), ("train.grad_accum_steps", 3, ""),
    ("train.num_steps", 0, ""), ("data.max_source_length", 0, ""),
    ("data.max_source_length", -1, "data_max_length_negative"),
    ("data.max_target_length", 1, ""), ("data.batch_size", 0, "data_batch_size_not_positive"),
    ("data.batch_size", -8, "data_batch_size_not_positive"), ("data.prefetch_batches", -1, ""),
    ("data.pack_pool_batches", 0, "data_pack_pool_not_positive"),
    ("data.pack_pool_batches", -1, "data_pack_pool_not_positive"), ("mesh.data", 0, ""),
    ("mesh.data", 3, ""), ("seed", -1, ""), ("seed", 2**40, ""),
]  # fmt: skip


def train_values(d: Draw, number: int) -> dict:
    """A well-typed but impossible value for one field."""
    fresh = d.rng.random() < 0.5
    table = FRESH_VALUES if fresh else RESUMED_VALUES
    key, value, name = d.choice(table)
    if fresh:
        expect = FRESH_EXPECTED.get((key, value), "")
    else:  # a resumed run keeps its tokenizer, so a vocabulary size is not used
        expect = "" if key == "data.vocab_size" else REFUSED
    return dict(mutation=name or f"{key}={value}", base="tiny" if fresh else "resume",
                workdir="tokenizer" if fresh else "trained", flags=(f"--config.{key}={value}",),
                names=(key.rpartition(".")[2], "--config"), expect=expect)  # fmt: skip


TRAINED_FILES = ["config.json"] * 4 + [
    "tokenizer/tokenizer.json", "tokenizer/shared.model", "tokenizer", "metrics.jsonl",
    ".lock", "checkpoints/8/_CHECKPOINT_METADATA",
]  # fmt: skip


def train_workdir(d: Draw, number: int) -> dict:
    """The reference run, one of whose files was damaged, resumed."""
    target = d.choice(TRAINED_FILES)
    mutation = damage_of(d, target)
    return dict(mutation=f"{target}:{mutation}", damage=((target, mutation),),
                names=names_of(target))  # fmt: skip


# ------------------------------------------------------------------------------- BERT


def hf_directory(d: Draw, target: str) -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """(mutation, files) of a Hugging Face directory ``hf/`` with ``target`` damaged."""
    files = dict(HF_FILES)
    if target in files and target.endswith(".json"):
        mutation = d.choice(sorted(json_mutations(d, b"{}")))
        files[target] = json_mutations(d, files[target])[mutation]() or b""
    elif target == "vocab.txt":
        mutation = d.choice(sorted(VOCAB_MUTATIONS))
        files[target] = VOCAB_MUTATIONS[mutation](d, files[target])
    else:  # a sharded index
        shard = d.choice(INDEX_SHARDS)
        mutation = f"shard {shard!r}"
        weight_map = {"bert.embeddings.word_embeddings.weight": shard}
        files[target] = json.dumps({"weight_map": weight_map}).encode()
    return mutation, tuple((f"hf/{name}", content) for name, content in files.items())


BERT_INIT_FILES = ["config.json"] * 2 + [
    "vocab.txt", "tokenizer_config.json", "model.safetensors.index.json",
    "pytorch_model.bin.index.json", "train.tsv",
]  # fmt: skip


def bert_init(d: Draw, number: int) -> dict:
    """Fine-tuning BERT from a damaged Hugging Face directory (--config.init_from); one that
    passes stops with "no model.safetensors" once the model is built."""
    target = d.choice(BERT_INIT_FILES)
    rows = [f"{d.choice(['pos', 'neg'])}\t{sentence(d, BERT_VOCAB[5:])}\n" for _ in range(8)]
    data = "".join(rows).encode()
    if target == "train.tsv":
        mutation = d.choice(["truncated", "tab_removed", "empty", "nul_inserted",
                             "classification_not_utf8"])  # fmt: skip
        lines = data.splitlines(keepends=True)
        at = d.rng.randrange(len(lines))
        line_mutation = "invalid_utf8" if mutation == "classification_not_utf8" else mutation
        lines[at] = LINE_MUTATIONS[line_mutation](d, lines[at], "tsv")
        data, files = b"".join(lines), tuple((f"hf/{n}", c) for n, c in HF_FILES.items())
    else:
        mutation, files = hf_directory(d, target)
    names = (target, "model.safetensors", "init_from", "inputs/hf")
    return dict(mutation=f"{target}:{mutation}", inputs=(*files, ("train.tsv", data)), names=names,
                expect=REFUSED)  # fmt: skip


BERT_FILES = ["config.json", "bert_tokenizer/vocab.txt", "bert_tokenizer/tokenizer_config.json",
              "bert_tokenizer"]  # fmt: skip


def bert_workdir(d: Draw, number: int) -> dict:
    """A BERT workdir whose WordPiece files or config.json were damaged, evaluated (it has
    no checkpoint: undamaged, it stops with "no checkpoints found")."""
    target = d.choice(BERT_FILES)
    if target.endswith("vocab.txt"):
        mutation = "vocab:" + d.choice(sorted(VOCAB_MUTATIONS))
    else:
        mutation = damage_of(d, target)
    return dict(mutation=f"{target}:{mutation}", damage=((target, mutation),),
                names=(*names_of(target), "checkpoint"), expect=REFUSED)  # fmt: skip


# kind: (program, base flags, workdir, draw(d, number) -> the case's other fields)
KINDS = {
    "train_data": ("train.py", "tiny", "tokenizer", train_data),
    "train_flags": ("train.py", "resume", "trained", train_flags),
    "train_values": ("train.py", "resume", "trained", train_values),
    "train_workdir": ("train.py", "resume", "trained", train_workdir),
    "evaluate_flags": ("evaluate.py", "", "trained", evaluate_flags),
    "evaluate_input": ("evaluate.py", "", "trained", evaluate_input),
    "evaluate_workdir": ("evaluate.py", "", "trained", evaluate_workdir),
    "bert_init": ("train.py", "bert", "fresh", bert_init),
    "bert_workdir": ("evaluate.py", "", "bert", bert_workdir),
}


def make_cases(seed: int, count: int) -> list[FuzzCase]:
    cases = []
    for number in range(count):
        kind = list(KINDS)[number % len(KINDS)]
        program, base, workdir, draw = KINDS[kind]
        fields = {"base": base, "workdir": workdir, **draw(Draw(f"{seed}-{number}"), number)}
        cases.append(FuzzCase(number=number, kind=kind, program=program, **fields))
    return cases
