"""Translate a split, score it and write the evaluation report.

pairs -> decode_pairs -> Decoded -> corpus_scores -> report_record -> write_report
                                                     OUTDIR/{stem}.json
                                                     OUTDIR/{stem}.hyp.txt
                                                     OUTDIR/{stem}.md
                                                     OUTDIR/{stem}.nbest.jsonl (nbest N)
                                                  -> print_report (the console)

evaluate_translations does all of it; translate_and_score the first two steps. The
decoding settings are one SearchOptions (jaxtrans.inference.options); where the report
goes and what it says besides the scores, one ReportContext.

The stem is the caller's (evaluate.py: ``{split}-step{N}[-avgK]-{greedy|beamK...}``, see
jaxtrans.tasks.translation.decoding_settings.decoding_name), ``{split}-step{N}`` by default.
"""

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from jax.sharding import Sharding

from jaxtrans.errors import UserError
from jaxtrans.inference.bleu import CorpusScores, corpus_scores
from jaxtrans.inference.ensemble import ModelConfig
from jaxtrans.inference.nbest import Hypothesis, nbest_json, translate_nbest
from jaxtrans.inference.options import DEFAULT_OPTIONS, SearchOptions
from jaxtrans.inference.translate import TranslationTokenizer, translate


def _cell(text: str, width: int | None) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def examples_table(
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    count: int = 3,
    width: int | None = None,
) -> str:
    """Markdown table of `count` examples spread over the set (cells cut to `width`)."""
    picks = np.unique(np.linspace(0, len(sources) - 1, min(count, len(sources))).astype(int))
    lines = ["| # | source | reference | hypothesis |", "|---|---|---|---|"]
    for i in picks:
        cells = (_cell(t[i], width) for t in (sources, references, hypotheses))
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _sentence_counts(report: dict) -> str:
    """``N sentences``, and the lines read and skipped when malformed lines were skipped."""
    text = f"{report['num_sentences']} sentences"
    if report["lines_skipped"]:
        text += f" ({report['lines_read']} lines read, {report['lines_skipped']} malformed skipped)"
    return text


def _members_rows(report: dict) -> list[str]:
    """An ensemble's report: one table row a member (its model and checkpoint)."""
    return [
        f"| member {i} | {_cell(member['path'], None)}: {member['checkpoint']} |"
        for i, member in enumerate(report.get("members", []), 1)
    ]


def _processor_rows(report: dict) -> list[str]:
    """The logits processors' table row, where one is on."""
    on = [
        f"{name} {report[name]}"
        for name in ("repetition_penalty", "no_repeat_ngram_size")
        if report[name] != getattr(DEFAULT_OPTIONS, name)
    ]
    return [f"| logits processors | {', '.join(on)} |"] if on else []


def _markdown(report: dict, examples: str) -> str:
    members = report.get("members")
    split = report["split"]
    head = (
        f"{split}, an ensemble of {len(members)}"
        if members
        else f"{split} at step {report['step']}"
    )
    return "\n".join(
        [
            f"# {head}: BLEU {report['bleu']:.2f}, chrF {report['chrf']:.2f}",
            "",
            "| | |",
            "|---|---|",
            f"| checkpoint | {report['checkpoint']} |",
            *_members_rows(report),
            f"| sentences | {_sentence_counts(report)} |",
            f"| beam size, alpha | {report['beam_size']}, {report['alpha']} "
            f"({report['penalty_form']} length penalty) |",
            *_processor_rows(report),
            f"| decoding | {report['decode_seconds']:.1f} s, "
            f"{report['sentences_per_sec']:.1f} sentences/s |",
            f"| BLEU | `{report['bleu_details']}` |",
            f"| BLEU signature | `{_cell(report['signature'], None)}` |",
            f"| chrF signature | `{_cell(report['chrf_signature'], None)}` |",
            "",
            "## Examples",
            "",
            examples,
            "",
        ]
    )


@dataclasses.dataclass(frozen=True)
class ReportContext:
    """Where a report is written and what it says besides the scores and settings."""

    # The directory of the report's files.
    outdir: str
    # The checkpoint's training step.
    step: int
    # The split's name (test, dev).
    split: str
    # Which parameters: "step N", "average of steps [...]", a pretrained directory, ...
    checkpoint: str
    # The files' name without suffix (None: "{split}-step{step}").
    stem: str | None = None
    # The targets' language (BLEU's tokenizer: zh for Chinese; None: from the references).
    target_lang: str | None = None
    # Malformed lines of the split's file that were skipped, and so are not among the pairs.
    lines_skipped: int = 0
    # An ensemble's members, one {"path", "checkpoint"} each (None: one model).
    members: Sequence[dict] | None = None
    # Example rows in the .md and on the console.
    num_examples: int = 3
    # Where the console lines go.
    printer: Callable[[str], None] = print

    @property
    def path(self) -> str:
        """The report's files' path without suffix."""
        return os.path.join(self.outdir, self.stem or f"{self.split}-step{self.step}")


class Decoded(NamedTuple):
    """The pairs' translations, their n-best lists (None without nbest) and the seconds
    the decoding took, compilation included."""

    hypotheses: list[str]
    lists: list[list[Hypothesis]] | None
    seconds: float


def decode_pairs(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    options: SearchOptions = DEFAULT_OPTIONS,
    nbest: int = 0,
    rows: Sharding | None = None,
) -> Decoded:
    """The translations of the pairs' sources: translate() with ``options`` (``rows``:
    over several devices, parameters as they are laid out, the same hypotheses on every
    process), or for nbest N translate_nbest, whose first hypotheses are the
    translations (one device)."""
    if not pairs:
        raise UserError("there are no sentence pairs to evaluate")
    sources = [source for source, _ in pairs]
    start = time.perf_counter()
    if not nbest:
        hypotheses = translate(config, params, tokenizer, sources, options, rows=rows)
        return Decoded(hypotheses, None, time.perf_counter() - start)
    if rows is not None:
        raise UserError("n-best lists are decoded on one device; give no rows sharding")
    lists = translate_nbest(config, params, tokenizer, sources, nbest, options)
    hypotheses = [listed[0].text if listed else "" for listed in lists]
    return Decoded(hypotheses, lists, time.perf_counter() - start)


def translate_and_score(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    target_lang: str | None = None,
    nbest: int = 0,
    rows: Sharding | None = None,
) -> tuple[list[str], CorpusScores, float]:
    """Translate the sources of (source, reference) pairs (decode_pairs) and score them;
    nbest N decodes n-best lists and scores the first of each.

    Returns (hypotheses, scores, seconds of translation, compilation included).
    """
    decoded = decode_pairs(config, params, tokenizer, pairs, options, nbest, rows)
    scores = corpus_scores(decoded.hypotheses, [reference for _, reference in pairs], target_lang)
    return decoded.hypotheses, scores, decoded.seconds


def report_record(
    context: ReportContext,
    options: SearchOptions,
    nbest: int,
    decoded: Decoded,
    scores: CorpusScores,
) -> dict:
    """The report of pairs decoded with ``options`` (and ``nbest``): step, split, checkpoint,
    bleu, chrf, signature (BLEU's sacreBLEU signature), num_sentences (the pairs scored),
    lines_read (num_sentences + lines_skipped), lines_skipped, beam_size, alpha,
    penalty_form, batch_size, max_extra_length, repetition_penalty, no_repeat_ngram_size,
    decode_seconds (wall time of translation, compilation included) and
    sentences_per_sec; a sampled decoding's also ``sampling``: its temperature, top_k,
    top_p and seed; an n-best decoding's ``nbest`` and ``nbest_file``; an ensemble's
    ``members``."""
    name, count = os.path.basename(context.path), len(decoded.hypotheses)
    report = {
        "step": int(context.step),
        "split": context.split,
        "checkpoint": context.checkpoint,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature,
        "bleu_details": scores.bleu_details,
        "num_sentences": count,
        "lines_read": count + int(context.lines_skipped),
        "lines_skipped": int(context.lines_skipped),
        "beam_size": options.beam_size,
        "alpha": options.alpha,
        "penalty_form": options.penalty_form,
        "batch_size": options.batch_size,
        "max_extra_length": options.max_extra_length,
        "repetition_penalty": options.repetition_penalty,
        "no_repeat_ngram_size": options.no_repeat_ngram_size,
        "decode_seconds": decoded.seconds,
        "sentences_per_sec": count / decoded.seconds,
        "hypotheses_file": name + ".hyp.txt",
    }
    if options.sampling:
        report["sampling"] = {
            "temperature": options.temperature,
            "top_k": options.top_k,
            "top_p": options.top_p,
            "seed": options.seed,
        }
    if decoded.lists is not None:
        report.update(nbest=nbest, nbest_file=name + ".nbest.jsonl")
    if context.members is not None:
        report["members"] = [dict(member) for member in context.members]
    return report


def write_report(
    context: ReportContext, report: dict, pairs: Sequence[tuple[str, str]], decoded: Decoded
) -> None:
    """OUTDIR/{stem}.hyp.txt (one translation a line), .nbest.jsonl (with n-best lists:
    one nbest_json line a pair), .json (``report``) and .md (the report and examples)."""
    path, sources = context.path, [source for source, _ in pairs]
    os.makedirs(context.outdir, exist_ok=True)
    with open(path + ".hyp.txt", "w", encoding="utf-8") as f:
        f.writelines(" ".join(h.splitlines()) + "\n" for h in decoded.hypotheses)
    if decoded.lists is not None:
        with open(path + ".nbest.jsonl", "w", encoding="utf-8") as f:
            lines = zip(sources, decoded.lists, strict=True)
            f.writelines(nbest_json(s, h) + "\n" for s, h in lines)
    with open(path + ".json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
        f.write("\n")
    references = [reference for _, reference in pairs]
    examples = examples_table(sources, references, decoded.hypotheses, context.num_examples)
    with open(path + ".md", "w", encoding="utf-8") as f:
        f.write(_markdown(report, examples))


def print_report(
    context: ReportContext, report: dict, pairs: Sequence[tuple[str, str]], decoded: Decoded
) -> None:
    """The console's lines: the scores, BLEU's signature, examples, the files written."""
    step, printer = context.step, context.printer
    which = "" if context.checkpoint == f"step {step}" else f" ({context.checkpoint})"
    printer(
        f"{context.split} step {step}{which}: BLEU {report['bleu']:.2f}  "
        f"chrF {report['chrf']:.2f}  {_sentence_counts(report)} in "
        f"{decoded.seconds:.1f} s ({report['sentences_per_sec']:.1f}/s)"
    )
    printer(report["signature"])
    sources, references = zip(*pairs, strict=True)
    printer(examples_table(sources, references, decoded.hypotheses, context.num_examples, 60))
    path = context.path
    listed = f", {path}.nbest.jsonl" if decoded.lists is not None else ""
    printer(f"report: {path}.json, {path}.md, {path}.hyp.txt{listed}")


def evaluate_translations(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    context: ReportContext,
    options: SearchOptions = DEFAULT_OPTIONS,
    nbest: int = 0,
) -> dict:
    """Translate the sources of (source, reference) pairs with ``options`` (nbest N: the
    n-best lists too, their first hypotheses scored), score them, write the report's
    files (write_report) and print it (print_report); returns the report (report_record),
    as written to the .json. The .md and the console say the lines read and skipped when
    any were skipped; an ensemble's report lists its members (its step: the newest a
    member used)."""
    decoded = decode_pairs(config, params, tokenizer, pairs, options, nbest)
    references = [reference for _, reference in pairs]
    scores = corpus_scores(decoded.hypotheses, references, context.target_lang)
    report = report_record(context, options, nbest, decoded, scores)
    write_report(context, report, pairs, decoded)
    print_report(context, report, pairs, decoded)
    return report
