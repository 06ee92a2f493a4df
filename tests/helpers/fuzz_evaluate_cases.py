"""The evaluate.py fuzz cases of tests/helpers/fuzz_cases.py: a mistyped, impossible or
clashing flag, a damaged --input file, a damaged reference run. Each draw returns the
case's fields but its number, kind, program, base flags and workdir (fuzz_cases.KINDS).
"""

from fuzz_expectations import (
    ACCEPTED,
    CHECKPOINT_EXPECTED,
    EVALUATE_ACCEPTED,
    EVALUATE_EITHER,
    REFUSED,
)
from fuzz_mutations import (
    FILE_MUTATIONS,
    LINE_MUTATIONS,
    Draw,
    damage_of,
    data_file,
    names_of,
    sentence,
)

SMALL = "--input={inputs}/two.txt"  # accepted values decode two lines, not the test set
SIZES = ("beam_size", "batch_size", "max_extra_length")
CHECKPOINTS = ["best", "avg:0", "avg:-1", "avg:x", "-3", "8.0", "1e3", "avg:", "08", "avg:2",
               "99999999999999999999", "", " 8", "latest "]  # fmt: skip
EVALUATE_FLAGS = {  # mutation: (alternative flags, what the error names)
    "split": ([("--split=train",), ("--split=",), ("--split=TEST",), ("--split=../x",)],
              ("--split",)),
    "checkpoint": ([(f"--checkpoint={c}", SMALL) for c in CHECKPOINTS],
                   ("checkpoint",)),
    "size_not_a_number": ([(f"--{s}={v}",) for s in SIZES for v in ("x", "1.5", "", "None")],
                          SIZES),
    "size_impossible": ([(f"--{s}={v}", SMALL) for s in SIZES for v in (0, -1, -100)], SIZES),
    "size_small": ([(f"--{s}={v}", SMALL) for s in SIZES for v in (1, 2, 3)], SIZES),
    "alpha_not_a_number": ([(f"--alpha={v}",) for v in ("x", "", "None", "1,5")], ("alpha",)),
    "alpha_odd": ([(f"--alpha={v}", SMALL) for v in ("nan", "-1", "inf", "1e308", "0")],
                  ("alpha",)),
    "outdir_a_file": ([("--outdir={inputs}/two.txt",), ("--outdir={inputs}/two.txt/sub",)],
                      ("--outdir",)),
    "output_alone": ([("--output={inputs}/out.txt",)], ("--output",)),
    "output_a_directory": ([(SMALL, "--output={inputs}")], ("--output",)),
    "input_and_plot": ([(SMALL, "--plot_attention=a cat")], ("--input",)),
    "input_missing": ([("--input={inputs}/missing.txt",)], ("--input",)),
    "input_a_directory": ([("--input={inputs}",)], ("--input",)),
    "input_stdin_empty": ([("--input=-",)], ("--input",)),
    "plot_odd_sentence": ([(f"--plot_attention={s}", "--output={inputs}/attention.png")
                           for s in ("", " ", "日本 语")], ("--plot_attention",)),
    "workdir_missing": ([("--workdir={inputs}/no_run",)], ("--workdir",)),
    "workdir_a_file": ([("--workdir={inputs}/two.txt",)], ("--workdir",)),
    "workdir_empty": ([("--workdir=",)], ("--workdir",)),
    "unknown_flag": ([("--nope=1",), ("--config.x=1",), ("--beam=2",), ("-s",)], ("flag",)),
    "eval_huge_sizes": ([(f"--{s}={10**9}", SMALL) for s in (*SIZES, "nbest")]
                        + [("--beam_size=100000", SMALL)], (*SIZES, "nbest")),
}  # fmt: skip


def evaluate_flags(d: Draw, number: int) -> dict:
    """A mistyped, impossible or clashing flag (on the reference run)."""
    mutation = d.choice(sorted(EVALUATE_FLAGS))
    alternatives, names = EVALUATE_FLAGS[mutation]
    inputs = (("two.txt", b"a cat sees a dog\nthe dog runs\n"),)
    flags = d.choice(alternatives)
    if mutation == "checkpoint":
        expect = CHECKPOINT_EXPECTED.get(flags[0].removeprefix("--checkpoint="), "")
    elif mutation in EVALUATE_EITHER:
        expect = ""
    else:
        expect = ACCEPTED if mutation in EVALUATE_ACCEPTED else REFUSED
    return dict(mutation=mutation, flags=flags, inputs=inputs, names=names, expect=expect)


# Mutations of --input text whose result is never UTF-8.
NOT_UTF8 = ["garbled", "junk_inserted", "invalid_utf8", "binary_line", "binary_file", "utf16",
            "utf32", "latin1"]  # fmt: skip
INPUT_MUTATIONS = [*NOT_UTF8, "truncated", "nul_inserted", "controls_inserted", "empty", "blank",
                   "very_long", "crlf", "empty_file", "only_newlines", "utf8_bom",
                   "no_final_newline"]  # fmt: skip


def evaluate_input(d: Draw, number: int) -> dict:
    """--input FILE: a file of sentences damaged like the data files, its bytes as they
    are. A result that is not UTF-8 (a cut or an insertion can split a character too) is
    named input_not_utf8:MUTATION; evaluate.py refuses it naming the file and line."""
    mutation = d.choice(INPUT_MUTATIONS)
    lines = [(sentence(d) + "\n").encode() for _ in range(d.rng.randint(1, 4))]
    if mutation in FILE_MUTATIONS:
        content, _ = FILE_MUTATIONS[mutation](d, lines, "tsv")
    else:
        at = d.rng.randrange(len(lines))
        lines[at] = LINE_MUTATIONS[mutation](d, lines[at], "tsv").replace(b"\t", b" ")
        content = b"".join(lines)
    expect = ""
    if content.decode("utf-8", "replace").encode() != content:
        mutation, expect = f"input_not_utf8:{mutation}", REFUSED
    return dict(mutation=mutation, flags=("--input={inputs}/input.txt",),
                inputs=(("input.txt", content),), names=("input.txt", "--input"),
                expect=expect)  # fmt: skip


EVALUATED_FILES = ["config.json"] * 4 + [
    "tokenizer/tokenizer.json", "tokenizer/shared.model", "tokenizer", "eval",
    "checkpoints/8/_CHECKPOINT_METADATA", "data.test",
]  # fmt: skip


def evaluate_workdir(d: Draw, number: int) -> dict:
    """The reference run, one of whose files was damaged, or whose config names a damaged
    test file, evaluated."""
    target = d.choice(EVALUATED_FILES)
    if target == "data.test":
        fmt = d.choice(["tsv", "jsonl"])
        mutation, content, suffix, _ = data_file(d, fmt, d.rng.randint(2, 6))
        name = f"test{number}.{fmt}{suffix}"
        return dict(mutation=f"data.test:{mutation}", inputs=((name, content),),
                    damage=(("config.json", f"data.test={name}"),),
                    names=(name, "--config.data"))  # fmt: skip
    mutation = "a_file" if target == "eval" else damage_of(d, target)
    names = names_of(target) + (("--outdir",) if target == "eval" else ())
    return dict(mutation=f"{target}:{mutation}", damage=((target, mutation),), names=names)
