"""The evaluate.py program: restore a trained workdir's task (or put a task on a Hugging
Face directory), then ask it.

    python evaluate.py --workdir DIR [--split test|dev] [--checkpoint latest|best|STEP|avg:K]
    python evaluate.py --workdir DIR --input FILE|- [--output FILE] [--nbest N]
                       [--prefix TEXT | --prefix_from_input]
    python evaluate.py --workdir DIR --plot_attention "a sentence" [--output attn.png]
    python evaluate.py --ensemble DIR[:CHECKPOINT],DIR[:CHECKPOINT],... [--split S]
                       [--input FILE|- [--output FILE]]
    python evaluate.py --init_from HF_DIR --task NAME [--config FILE] --input FILE|-
    python evaluate.py --init_from HF_DIR --task NAME --config FILE --outdir OUT [--split S]
    python evaluate.py --init_from MARIAN_DIR [--config FILE] --input FILE|- | --outdir OUT

DIR/config.json says which task the run trained (jaxtrans.tasks); the task rebuilds its
model and tokenizer from DIR, reads the checkpoint and writes its reports to DIR/eval
unless --outdir. With --init_from, ``tasks.pretrained_task`` makes task NAME of the
directory's weights, vocabulary and labels, with no training. Nothing here knows a task
by name.
"""

import os
import sys

import ml_collections
from absl import flags

from jaxtrans import tasks
from jaxtrans.compilation_cache import use_run_compilation_cache
from jaxtrans.errors import UserError
from jaxtrans.programs.cli import define_config_flag, fail, parse_flags, run

USAGE = """usage: python evaluate.py --workdir DIR [--split test|dev]
                   [--checkpoint latest|best|STEP|avg:K] [--beam_size N] [--alpha A]
                   [--batch_size N] [--max_extra_length N] [--penalty_form gnmt|hf]
                   [--repetition_penalty R] [--no_repeat_ngram_size N]
                   [--sampling [--temperature T] [--top_k K] [--top_p P] [--seed S]]
                   [--nbest N] [--input FILE|- [--output FILE]
                   [--prefix TEXT | --prefix_from_input]] [--plot_attention SENTENCE
                   [--output PNG]] [--compilation_cache_dir DIR]
       python evaluate.py --init_from HF_DIR --task NAME [--config FILE [--config.KEY=VALUE]]
                   [--input FILE|- [--output FILE]] [--outdir OUT [--split test|dev]]
       python evaluate.py --ensemble DIR[:CHECKPOINT],DIR[:CHECKPOINT],... [--split S]
                   [--outdir OUT] [--input FILE|- [--output FILE]] [decoding flags]

Without --input or --plot_attention: scores the split with the run's task and writes
DIR/eval/{split}-step{N}[-avgK]-{DECODING}.json (translation: BLEU/chrF, the lines read,
skipped and scored, and examples, also .md and .hyp.txt; DECODING is greedy or beamK,
plus -alphaA, -hf and -maxextraN where they differ from the run config, -repR and
-norepN where a logits processor is on) or
DIR/eval/{split}-step{N}[-avgK].json (BERT: the task's metrics). The split defaults to
the task's own (translation and classification: test; pretraining: dev). Decoding
settings default to the run config's eval section. --sampling draws each token instead
of searching (for back-translation; with --input): logits / T, then the K most probable
(0: all), then the smallest set holding probability P (1.0: all); T 0 is greedy; the same
--seed and input give the same output. --repetition_penalty R divides the logits of the
tokens already in a translation by R (multiplies where negative; 1.0: none) and
--no_repeat_ngram_size N keeps any N tokens from appearing twice in one (0: none), as
transformers' generate and CTranslate2 do, in every search. --nbest N (N <= the beam
size) also gives the beam's N best hypotheses with their scores: beside a split's report
in {stem}.nbest.jsonl (the report scores the first), or with --input as one JSON object
a line:
  {"source": "...", "hypotheses": [{"text": "...", "score": -0.42, "logprob": -1.9}, ...]}
(logprob: the summed log-probability of its tokens and EOS; score: logprob over the
length penalty, what beam search ranks by). --compilation_cache_dir DIR keeps the
compiled programs for the next run, which then reads them instead of compiling (default:
the run config's train.compilation_cache_dir, ~/.cache/jaxtrans/xla; "": none).

--input FILE ('-': stdin): one answer a line, written to --output (default stdout).
Translation: the translation. --prefix TEXT forces every translation to start with TEXT
(greedy, beam and sampling; the prefix's log-probabilities count in beam scores);
--prefix_from_input takes each line's own, the line being SOURCE<TAB>PREFIX. BERT tasks
answer one JSON object a line; a TAB in a line separates sentences A and B.
bert_pretraining fills each literal [MASK]:
  {"text": "Paris is the [MASK] of France .", "masks": [{"position": 4, "predictions":
   [{"token": "capital", "id": 11, "probability": 0.41}, ... 5 in all]}]}
(position: the mask's index in [CLS] A [SEP] B [SEP]; a line without [MASK] is an error).
bert_classification labels each line:
  {"text": "a fine film", "label": "pos", "probability": 0.93,
   "probabilities": {"neg": 0.07, "pos": 0.93}}

--init_from HF_DIR --task NAME (instead of --workdir): a Hugging Face BERT directory
(config.json, weights, vocab.txt) as task NAME, untrained: its weights must hold the
task's head (bert_pretraining: a BertForPreTraining or BertForMaskedLM directory;
bert_classification: BertForSequenceClassification, labels from its id2label). --config
FILE gives the data and eval sections (e.g. configs/bert_classify.py with
--config.data.classification_test=FILE); scoring a split then needs --outdir, where
{split}-step0.json goes. --checkpoint cannot be given: the directory has one set of
weights.

--init_from MARIAN_DIR (a Hugging Face Marian / opus-mt directory: config.json, weights,
source.spm, target.spm, vocab.json) translates with no training: --input translates
lines; with --config (e.g. configs/marian_finetune.py --config.data.test=FILE) and
--outdir it scores a split with BLEU/chrF like a trained run (docs/pretrained.md).

--ensemble M1,M2,... (instead of --workdir): translation models that decode together,
each token chosen by the mean of their probabilities (greedy, beam, n-best, prefixes and
sampling alike). A member is a workdir (its latest checkpoint), DIR:CHECKPOINT (a step,
avg:K or best) or a Marian directory; members may differ in shape but must share one
tokenizer. The first member's config gives the split, the decoding defaults and the
default --outdir (its DIR/eval); the report is {split}-ensemble{N}-{ID}-{DECODING}.json
(ID: 8 hex digits naming the members' checkpoints) and lists the members."""

# Task settings passed on to the task (None where not given).
OPTIONS = (
    "beam_size",
    "alpha",
    "batch_size",
    "max_extra_length",
    "penalty_form",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "sampling",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "nbest",
    "prefix",
    "prefix_from_input",
)


def read_lines(input_path: str) -> list[str]:
    """The lines of ``input_path`` ("-": stdin)."""
    try:
        if input_path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(input_path, "rb") as f:
                data = f.read()
    except OSError as error:
        raise UserError(f"--input {input_path}: {error.strerror}; check the path") from error
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UserError(
            f"--input {input_path}:{line}: not UTF-8 text (byte {error.start}); "
            "give one UTF-8 sentence a line"
        ) from None


def write_lines(lines: list[str], output_path: str | None) -> None:
    """One line each to ``output_path`` (None: stdout)."""
    text = "".join(line + "\n" for line in lines)
    if output_path is None:
        sys.stdout.write(text)
        return
    try:
        with open(output_path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as error:
        raise UserError(f"--output {output_path}: {error.strerror}") from error


def refuse(task: tasks.Task, flag: str, attribute: str) -> None:
    """UserError unless ``task`` can do what ``flag`` asks; names the tasks that can."""
    if getattr(task, attribute):
        return
    able = " or ".join(n for n in tasks.TASKS if getattr(tasks.task_class(n), attribute))
    if task.workdir:
        raise UserError(f"{task.workdir} is a {task.name} workdir; {flag} needs a {able} workdir")
    raise UserError(f"--task {task.name} cannot answer {flag}; it needs a {able} task")


def check_writable(path: str, flag: str, *, is_file: bool = False) -> None:
    """UserError unless ``path`` (a directory, or a file when ``is_file``) can be written:
    its nearest existing ancestor must be a writable directory. Checked before decoding,
    so that a bad output path fails in a second, not after the whole test set."""
    if is_file and os.path.isdir(path):
        raise UserError(f"{flag} {path} is a directory; give a file name")
    existing = os.path.abspath(os.path.dirname(os.path.abspath(path)) if is_file else path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
        raise UserError(
            f"{flag} {path}: cannot write there ({existing} is not a writable directory); "
            "choose another path"
        )


def _define(values: flags.FlagValues) -> None:
    def string(name, default, help_):
        flags.DEFINE_string(name, default, help_, flag_values=values)

    define_config_flag(values)
    string("workdir", None, "Run directory written by train.py.")
    string("init_from", None, "A Hugging Face BERT or Marian directory to ask, untrained.")
    string(
        "ensemble",
        None,
        "Translation models decoding together, comma-separated: DIR, DIR:CHECKPOINT or a "
        "Marian directory each.",
    )
    string(
        "task",
        None,
        "The task to put on the --init_from directory, e.g. bert_pretraining "
        "(a Marian directory: translation, the default).",
    )
    string("split", "test", "Split to evaluate: test or dev (default: the task's first).")
    string(
        "checkpoint",
        "latest",
        "latest, best (train.keep_best), a step number, or avg:K (mean of the last K).",
    )
    string("input", None, "Answer each line of this file ('-': stdin); see the usage above.")
    string("output", None, "Where --input answers (default stdout) or the PNG go.")
    string("plot_attention", None, "Draw the attention of this input as PNGs (docs/pictures.md).")
    string(
        "outdir", None, "Directory of the reports (default DIR/eval; with --init_from: required)."
    )
    string(
        "compilation_cache_dir",
        None,
        'Keep compiled programs here for the next run ("": none). Default: the run '
        "config's train.compilation_cache_dir (~/.cache/jaxtrans/xla).",
    )
    flags.DEFINE_boolean(
        "sampling", None, "Sample each token instead of beam or greedy search.", flag_values=values
    )
    string("prefix", None, "--input: every translation starts with this text (forced).")
    flags.DEFINE_boolean(
        "prefix_from_input",
        None,
        "--input: each line is SOURCE<TAB>PREFIX; its translation starts with PREFIX.",
        flag_values=values,
    )
    for name, help_ in (
        ("temperature", "Sampling: divide the logits by this (0 = greedy). Default 1.0."),
        ("top_p", "Sampling: keep the most probable tokens holding this probability. Default 1."),
    ):
        flags.DEFINE_float(name, None, help_, flag_values=values)
    for name, help_ in (
        ("top_k", "Sampling: keep the K most probable tokens (0 = all). Default 0."),
        ("seed", "Sampling: the random seed. Default 0."),
        ("nbest", "Also the beam's N best hypotheses with scores (N <= beam size). Default 0."),
    ):
        flags.DEFINE_integer(name, None, help_, flag_values=values)
    for name, help_ in (
        ("beam_size", "Beam size (1 = greedy)."),
        ("batch_size", "Sentences per decoding batch."),
        ("max_extra_length", "Longest output = source length + this."),
    ):
        flags.DEFINE_integer(name, None, help_ + " Default: the run config.", flag_values=values)
    flags.DEFINE_float(
        "alpha", None, "Length penalty exponent. Default: the run config.", flag_values=values
    )
    flags.DEFINE_float(
        "repetition_penalty",
        None,
        "Divide the logits of tokens already in the output by this (multiply where "
        "negative; 1.0 = none). Default: the run config.",
        flag_values=values,
    )
    flags.DEFINE_integer(
        "no_repeat_ngram_size",
        None,
        "No N tokens appear twice in one output (0 = no limit). Default: the run config.",
        flag_values=values,
    )
    flags.DEFINE_enum(
        "penalty_form",
        None,
        ["gnmt", "hf"],
        "Beam search's length penalty: gnmt ((5 + len) / 6) ** alpha or hf len ** alpha "
        "(transformers' length_penalty). Default: the run config.",
        flag_values=values,
    )


def check_ensemble_flags(values: flags.FlagValues) -> None:
    """--ensemble names every model and each member its own checkpoint: not with
    --workdir, --init_from, --task, --config, --checkpoint or --plot_attention (a one-line
    error, exit 2, otherwise)."""
    for flag in ("workdir", "init_from", "task", "config"):
        if values[flag].present:
            fail(
                f"--{flag} does not go with --ensemble: list every model among its members, "
                "each with its own config.json"
            )
    if values["checkpoint"].present:
        fail(
            "--checkpoint does not go with --ensemble: give each member its own, as "
            "--ensemble DIR:CHECKPOINT,DIR:CHECKPOINT"
        )
    if values.plot_attention is not None:
        fail("--plot_attention draws one model's attention: give --workdir, not --ensemble")


def check_source_flags(values: flags.FlagValues) -> None:
    """Exactly one of --workdir DIR, --init_from HF_DIR --task NAME and --ensemble M1,...,
    and only the flags that go with it; a one-line error (exit 2) otherwise."""
    if values.ensemble is not None:
        check_ensemble_flags(values)
        return
    if values.workdir and values.init_from:
        fail("give either --workdir (a trained run) or --init_from (a Hugging Face directory)")
    if not values.workdir and not values.init_from:
        fail(
            "--workdir is required, e.g. --workdir runs/demo (or --init_from HF_DIR --task "
            "NAME for a Hugging Face directory)"
        )
    if values.workdir:
        for flag in ("task", "config"):
            if values[flag].present:
                fail(
                    f"--{flag} goes with --init_from; a workdir's task and settings are its "
                    "config.json"
                )
        return
    if values.checkpoint != "latest":
        fail(
            f"--checkpoint {values.checkpoint}: a Hugging Face directory has one set of "
            "weights; leave --checkpoint out"
        )
    if values.plot_attention is None and values.input is None and not values.outdir:
        fail(
            "--outdir is required to score a split of an --init_from directory: the reports "
            "go there"
        )
    config = values.config
    if config is not None:
        for section in ("data", "eval"):
            if not isinstance(config.get(section), ml_collections.ConfigDict):
                fail(
                    f"--config: the config has no {section} section; give a run config "
                    "such as configs/bert_classify.py"
                )
        if values.task and config.get("task") not in (None, values.task):
            fail(
                f"--config is a {config.task} config but --task is {values.task}; give a "
                "config of that task"
            )


def check_prefix_flags(values: flags.FlagValues) -> None:
    """--prefix TEXT or --prefix_from_input, not both, and only with --input (a one-line
    error, exit 2, otherwise)."""
    prefix, from_input = values.prefix is not None, bool(values.prefix_from_input)
    if prefix and from_input:
        fail("give either --prefix TEXT or --prefix_from_input, not both")
    if (prefix or from_input) and values.input is None:
        flag = "--prefix" if prefix else "--prefix_from_input"
        fail(f"{flag} goes with --input: it forces how each input line's translation starts")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    check_source_flags(values)
    if values.input is not None and values.plot_attention is not None:
        fail("give either --input or --plot_attention, not both")
    if values.output is not None and values.input is None and values.plot_attention is None:
        fail("--output goes with --input or --plot_attention")
    if values.split not in ("test", "dev"):
        fail(f"--split {values.split!r}: use test or dev")
    check_prefix_flags(values)
    common = dict(
        checkpoint=values.checkpoint, options={name: values[name].value for name in OPTIONS}
    )
    outdir = values.outdir or os.path.join(values.workdir or ".", "eval")

    def evaluate() -> None:
        if values.init_from:
            task = tasks.pretrained_task(values.task, values.init_from, values.config)
        elif values.ensemble is not None:
            task = tasks.ensemble_task(values.ensemble)
        else:
            task = tasks.restore_task(values.workdir)
        use_run_compilation_cache(
            task.run_config, values.compilation_cache_dir, "--compilation_cache_dir"
        )
        if values.input is not None:
            refuse(task, "--input", "predicts")
            if values.output is not None:
                check_writable(values.output, "--output", is_file=True)
            write_lines(task.predict(read_lines(values.input), **common), values.output)
        elif values.plot_attention is not None:
            refuse(task, "--plot_attention", "plots_attention")
            output = values.output or os.path.join(outdir, "attention.png")
            check_writable(output, "--output", is_file=True)
            os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
            task.plot_attention(values.plot_attention, output, **common)
        else:
            check_writable(task.outdir(values.outdir), "--outdir")
            split = values.split if values["split"].present else task.splits[0]
            task.evaluate(split, outdir=values.outdir, **common)

    run(evaluate)
