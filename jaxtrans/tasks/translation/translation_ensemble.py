"""Several translation models as one: evaluate.py --ensemble and Translator.load([...]).

    "runs/a,runs/a:avg:2,runs/b:best,opus-mt-zh-en"
        -> members: a workdir (its latest checkpoint), WORKDIR:CHECKPOINT (a step, avg:K,
           best, latest) or a Hugging Face Marian directory, each its own task
        -> one tokenizer: every member's tokenizer files are the same (tokenizer_digest)
        -> params: a tuple, one tree a member, decoded together
           (jaxtrans.inference.ensemble: the mean of the members' probabilities)

The members may differ in shape (different runs, a Marian model and its fine-tuned run).
The first member's run config gives the splits (its data section), the decoding
defaults (its eval section) and BLEU's language; its workdir the default report folder.
A split's report is ``{split}-ensemble{N}-{ID}-{DECODING}.json``, ID naming the members'
checkpoints (8 hex digits of their digest), and lists the members.
"""

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from jaxtrans import tasks
from jaxtrans.data.translation.sources import read_split
from jaxtrans.data.translation.tokenizer_digest import tokenizer_digest
from jaxtrans.errors import UserError
from jaxtrans.inference.report import ReportContext, evaluate_translations
from jaxtrans.tasks.base import Restored
from jaxtrans.tasks.translation.decoding_settings import (
    decoding_name,
    decoding_settings,
    target_language,
)
from jaxtrans.tasks.translation.translation_predict import answer_lines
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.workdirs.checkpoint_choice import parse_checkpoint_spec
from jaxtrans.workdirs.workdir import huggingface_model_type


def member_specs(text: str) -> list[str]:
    """``"a,b:best"`` -> ``["a", "b:best"]``; UserError for an empty list or member."""
    specs = [spec.strip() for spec in text.split(",")]
    if not text.strip() or not all(specs):
        raise UserError(
            f"--ensemble {text!r}: give the members separated by commas, e.g. "
            "--ensemble runs/a,runs/a:avg:2,runs/b:best"
        )
    return specs


def parse_member(spec: str) -> tuple[str, str]:
    """``DIR`` -> (DIR, "latest"); ``DIR:CHECKPOINT`` -> (DIR, CHECKPOINT), split at the
    first colon unless the whole of ``spec`` is a directory."""
    if os.path.isdir(spec) or ":" not in spec:
        return spec, "latest"
    path, _, checkpoint = spec.partition(":")
    parse_checkpoint_spec(checkpoint)  # a UserError for a misspelt one, before any loading
    return path, checkpoint


@dataclasses.dataclass(frozen=True)
class Member:
    """One model of an ensemble: where it is, which checkpoint, its task."""

    path: str
    checkpoint: str
    task: TranslationTask


def load_member(spec: str) -> Member:
    """The task of one member (a workdir or a Marian directory); nothing restored yet."""
    path, checkpoint = parse_member(spec)
    if huggingface_model_type(path) is not None:
        task = tasks.pretrained_task("translation", path)
    else:
        task = tasks.restore_task(path)
    if not isinstance(task, TranslationTask):
        raise UserError(f"ensemble member {path} is a {task.name} run; give translation runs")
    return Member(path, checkpoint, task)


def check_one_tokenizer(members: Sequence[Member]) -> None:
    """UserError naming the first two members whose tokenizers differ: an ensemble's
    members read and write the same ids."""
    first = members[0]
    expected = tokenizer_digest(first.path)
    for member in members[1:]:
        if tokenizer_digest(member.path) != expected:
            raise UserError(
                f"ensemble members {first.path} and {member.path} have different tokenizers; "
                "an ensemble's members must share one (train them with the same tokenizer)"
            )


class TranslationEnsemble:
    """Translation models that decode together, asked as a translation task is
    (``evaluate``, ``predict``, ``restore_params``)."""

    name = TranslationTask.name
    splits = TranslationTask.splits
    predicts = True
    plots_attention = False
    workdir = None

    def __init__(self, members: Sequence[Member]):
        """``members``: loaded by ``load_member`` and sharing a tokenizer (``load``)."""
        self.members = list(members)
        first = self.members[0].task
        self.run_config = first.run_config
        self.tokenizer = first.tokenizer
        # Decoding's ensemble config: one TransformerConfig a member.
        self.model_config = tuple(m.task.model_config for m in self.members)

    @classmethod
    def load(cls, specs: Sequence[str]) -> "TranslationEnsemble":
        """The ensemble of the members ``specs`` (see the module's docstring), their
        tokenizers checked before any parameters are read."""
        if not specs:
            raise UserError("an ensemble needs at least one member")
        members = [load_member(os.fspath(spec)) for spec in specs]
        check_one_tokenizer(members)
        return cls(members)

    def restore_members(self, checkpoint: str = "latest") -> list[Restored]:
        """Each member's own checkpoint. ``checkpoint`` must be latest: each member names
        its own (DIR:CHECKPOINT)."""
        if checkpoint != "latest":
            raise UserError(
                f"checkpoint {checkpoint!r} with an ensemble: give each member its own, as "
                "DIR:CHECKPOINT"
            )
        return [m.task.restore_params(m.checkpoint) for m in self.members]

    def restore_params(self, checkpoint: str = "latest") -> Restored:
        """The members' checkpoints as one: params a tuple, one tree a member; step the
        newest; the description lists the members."""
        return self.joined(self.restore_members(checkpoint))

    def joined(self, restored: Sequence[Restored]) -> Restored:
        """The members' restored checkpoints as the ensemble's."""
        pairs = zip(self.members, restored, strict=True)
        listed = "; ".join(f"{m.path} {r.description}" for m, r in pairs)
        description = f"ensemble of {len(restored)}: {listed}"
        params = tuple(r.params for r in restored)
        return Restored(params, max(r.step for r in restored), description, "latest")

    def member_records(self, restored: Sequence[Restored]) -> list[dict[str, str]]:
        """One {"path", "checkpoint"} a member for the report, the checkpoint as restored
        (``step 1200``, ``average of steps [...]``)."""
        return [
            {"path": m.path, "checkpoint": r.description}
            for m, r in zip(self.members, restored, strict=True)
        ]

    def report_id(self, records: Sequence[dict[str, str]]) -> str:
        """8 hex digits naming the members' checkpoints (absolute paths, as restored)."""
        named = "\n".join(f"{os.path.abspath(r['path'])}\0{r['checkpoint']}" for r in records)
        return hashlib.sha256(named.encode()).hexdigest()[:8]

    def outdir(self, outdir: str | None) -> str:
        """Where reports go: ``outdir``, else the first member's WORKDIR/eval."""
        first = self.members[0]
        if outdir:
            return outdir
        if first.task.workdir is None:
            raise UserError(
                f"--outdir is required: the first member, {first.path}, is not a workdir"
            )
        return os.path.join(first.task.workdir, "eval")

    def check_split(self, split: str) -> None:
        self.members[0].task.check_split(split)

    def evaluate(self, split, *, checkpoint="latest", outdir=None, options=None):
        """Translate the split (the first member's), score it and write
        OUTDIR/{split}-ensemble{N}-{ID}-{DECODING}.json, .md and .hyp.txt listing the
        members (translation_task.TranslationTask.evaluate); returns the report."""
        self.check_split(split)
        where = self.outdir(outdir)
        members = self.restore_members(checkpoint)
        restored = self.joined(members)
        split_pairs = read_split(self.run_config.data, split)
        search, nbest = decoding_settings(self.run_config, **(options or {}))
        name = decoding_name(search, decoding_settings(self.run_config).options)
        records = self.member_records(members)
        context = ReportContext(
            where,
            restored.step,
            split,
            restored.description,
            stem=f"{split}-ensemble{len(records)}-{self.report_id(records)}-{name}",
            target_lang=target_language(self.run_config.data),
            lines_skipped=split_pairs.lines_skipped,
            members=records,
        )
        model = (self.model_config, restored.params, self.tokenizer)
        return evaluate_translations(*model, split_pairs.pairs, context, search, nbest)

    def predict(
        self, lines: Sequence[str], *, checkpoint="latest", options: dict[str, Any] | None = None
    ) -> list[str]:
        """The ensemble's translation of each line (TranslationTask.predict's options)."""
        decoding = decoding_settings(self.run_config, **(options or {}))
        restored = self.restore_params(checkpoint)
        model = (self.model_config, restored.params, self.tokenizer)
        return answer_lines(*model, lines, decoding, options)
