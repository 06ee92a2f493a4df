"""Translate a split, score it and write the evaluation report.

pairs -> translate -> hypotheses -> BLEU / chrF -> OUTDIR/{stem}.json
                                                   OUTDIR/{stem}.hyp.txt
                                                   OUTDIR/{stem}.md
                                                   OUTDIR/{stem}.nbest.jsonl (with nbest N)

The stem is the caller's (evaluate.py: ``{split}-step{N}[-avgK]-{greedy|beamK...}``, see
jaxtrans.tasks.translation.decoding_settings.decoding_name), ``{split}-step{N}`` by default.
"""

import json
import os
import time
from collections.abc import Callable, Sequence

import numpy as np
from jax.sharding import Sharding

from jaxtrans.errors import UserError
from jaxtrans.inference.bleu import CorpusScores, corpus_scores
from jaxtrans.inference.ensemble import ModelConfig
from jaxtrans.inference.nbest import Hypothesis, nbest_json, translate_nbest
from jaxtrans.inference.options import SearchOptions
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


def _translate_pairs(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    nbest: int,
    **decoding,
) -> tuple[list[str], list[list[Hypothesis]] | None, float]:
    """(translations, n-best lists or None, seconds) of the pairs' sources: translate()
    with the decoding settings, or for nbest N translate_nbest (beam search's settings
    only), whose first hypotheses are the translations."""
    if not pairs:
        raise UserError("there are no sentence pairs to evaluate")
    sources = [source for source, _ in pairs]
    rows = decoding.pop("rows", None)
    options = SearchOptions(**decoding)
    start = time.perf_counter()
    if not nbest:
        hypotheses = translate(config, params, tokenizer, sources, options, rows=rows)
        return hypotheses, None, time.perf_counter() - start
    if rows is not None:
        raise UserError("n-best lists are decoded on one device; give no rows sharding")
    lists = translate_nbest(config, params, tokenizer, sources, nbest, options)
    hypotheses = [listed[0].text if listed else "" for listed in lists]
    return hypotheses, lists, time.perf_counter() - start


def translate_and_score(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    max_extra_length: int = 50,
    penalty_form: str = "gnmt",
    target_lang: str | None = None,
    sampling: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    nbest: int = 0,
    rows: Sharding | None = None,
) -> tuple[list[str], CorpusScores, float]:
    """Translate the sources of (source, reference) pairs and score them. The decoding
    settings are translate()'s (``sampling`` draws the tokens: temperature, top_k, top_p,
    seed; ``rows``: over several devices, parameters as they are laid out, the same
    hypotheses on every process); nbest N decodes n-best lists and scores the first of each.

    Returns (hypotheses, scores, seconds of translation, compilation included).
    """
    hypotheses, _, seconds = _translate_pairs(
        config,
        params,
        tokenizer,
        pairs,
        nbest,
        batch_size=batch_size,
        beam_size=beam_size,
        alpha=alpha,
        max_extra_length=max_extra_length,
        penalty_form=penalty_form,
        sampling=sampling,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        rows=rows,
    )
    scores = corpus_scores(hypotheses, [reference for _, reference in pairs], target_lang)
    return hypotheses, scores, seconds


def evaluate_translations(
    config: ModelConfig,
    params,
    tokenizer: TranslationTokenizer,
    pairs: Sequence[tuple[str, str]],
    outdir: str,
    step: int,
    split: str,
    checkpoint: str,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    max_extra_length: int = 50,
    penalty_form: str = "gnmt",
    target_lang: str | None = None,
    num_examples: int = 3,
    stem: str | None = None,
    lines_skipped: int = 0,
    printer: Callable[[str], None] = print,
    sampling: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    nbest: int = 0,
    members: Sequence[dict] | None = None,
) -> dict:
    """Translate the sources of (source, reference) pairs, score, write the report files.

    The files are OUTDIR/{stem}.json, .hyp.txt and .md, stem "{split}-step{step}" unless
    given; with nbest N also .nbest.jsonl, one n-best list a pair as nbest_json writes it
    (the first hypotheses are the .hyp.txt, scored as without nbest). ``lines_skipped``:
    malformed lines of the split's file that were skipped (``skip_malformed``) and so are
    not among ``pairs``. Returns the report written to the .json; its keys include step,
    split, checkpoint, bleu, chrf, signature (BLEU's sacreBLEU signature), num_sentences
    (the pairs scored), lines_read (num_sentences + lines_skipped), lines_skipped,
    beam_size, alpha, penalty_form, decode_seconds (wall time of translation, compilation
    included) and sentences_per_sec; a sampled decoding's also
    ``sampling``: its temperature, top_k, top_p and seed; an n-best decoding's ``nbest``
    and ``nbest_file``; an ensemble's (config and params tuples, inference.ensemble)
    ``members``: one {"path", "checkpoint"} a member, written to the .json and the .md
    (its step: the newest a member used). The .md and the console say the lines read and
    skipped when any were skipped.
    """
    sample = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    hypotheses, lists, seconds = _translate_pairs(
        config,
        params,
        tokenizer,
        pairs,
        nbest,
        beam_size=beam_size,
        alpha=alpha,
        batch_size=batch_size,
        max_extra_length=max_extra_length,
        penalty_form=penalty_form,
        sampling=sampling,
        **sample,
    )
    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    scores = corpus_scores(hypotheses, references, target_lang)
    path = os.path.join(outdir, stem or f"{split}-step{step}")
    report = {
        "step": int(step),
        "split": split,
        "checkpoint": checkpoint,
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature,
        "bleu_details": scores.bleu_details,
        "num_sentences": len(pairs),
        "lines_read": len(pairs) + int(lines_skipped),
        "lines_skipped": int(lines_skipped),
        "beam_size": beam_size,
        "alpha": alpha,
        "penalty_form": penalty_form,
        "batch_size": batch_size,
        "max_extra_length": max_extra_length,
        "decode_seconds": seconds,
        "sentences_per_sec": len(pairs) / seconds,
        "hypotheses_file": os.path.basename(path) + ".hyp.txt",
    }
    if sampling:
        report["sampling"] = sample
    if lists is not None:
        report.update(nbest=nbest, nbest_file=os.path.basename(path) + ".nbest.jsonl")
    if members is not None:
        report["members"] = [dict(member) for member in members]
    os.makedirs(outdir, exist_ok=True)
    with open(path + ".hyp.txt", "w", encoding="utf-8") as f:
        f.writelines(" ".join(h.splitlines()) + "\n" for h in hypotheses)
    if lists is not None:
        with open(path + ".nbest.jsonl", "w", encoding="utf-8") as f:
            f.writelines(nbest_json(s, h) + "\n" for s, h in zip(sources, lists, strict=True))
    with open(path + ".json", "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(path + ".md", "w", encoding="utf-8") as f:
        f.write(_markdown(report, examples_table(sources, references, hypotheses, num_examples)))

    which = "" if checkpoint == f"step {step}" else f" ({checkpoint})"
    printer(
        f"{split} step {step}{which}: BLEU {scores.bleu:.2f}  chrF {scores.chrf:.2f}  "
        f"{_sentence_counts(report)} in {seconds:.1f} s ({report['sentences_per_sec']:.1f}/s)"
    )
    printer(scores.bleu_signature)
    printer(examples_table(sources, references, hypotheses, num_examples, width=60))
    listed = f", {path}.nbest.jsonl" if lists is not None else ""
    printer(f"report: {path}.json, {path}.md, {path}.hyp.txt{listed}")
    return report
