"""``python -m jaxtrans.prepare``: tokenise a translation run's
training data once, into the id shards its training reads (WORKDIR/train_ids,
jaxtrans.data.translation.id_shards), training the SentencePiece model first if the
workdir has none. train.py does the same on its first start; preparing ahead lets a large
corpus (WMT: millions of pairs) be tokenised once, on a CPU machine, before the
accelerators are booked. Shards that are already up to date are left as they are.
"""

import sys
import time

from absl import flags

from jaxtrans.programs.cli import define_config_flag, fail, parse_flags, run

USAGE = """usage: python -m jaxtrans.prepare --config configs/NAME.py --workdir DIR
                          [--config.KEY=VALUE ...]

Tokenises the training pairs of a translation config into DIR/train_ids (and trains the
SentencePiece model into DIR/tokenizer first if DIR has none), then says how many pairs
the config's length limits keep. train.py --workdir DIR reads them."""


def _define(values: flags.FlagValues) -> None:
    define_config_flag(values)
    flags.DEFINE_string("workdir", None, "Run directory (created if needed).", flag_values=values)


def prepare(config, workdir: str) -> str:
    """Writes (or checks) the run's id shards; returns what to print."""
    from jaxtrans.data.translation.id_shards import (
        ID_SHARDS_DIR,
        ensure_id_shards,
        filtering_counts,
        read_manifest,
    )
    from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer
    from jaxtrans.errors import UserError

    task = config.get("task", "translation")
    if task != "translation" or config.get("init_from"):
        raise UserError(
            f"--config: python -m jaxtrans.prepare tokenises the training files of a "
            f"translation run trained from its data (this config: task {task!r}"
            f"{', init_from' if config.get('init_from') else ''}); train.py reads its own data"
        )
    start = time.perf_counter()
    tokenizer = load_or_train_tokenizer(config.data, workdir)
    shards = ensure_id_shards(config.data, tokenizer, workdir)
    manifest = read_manifest(f"{workdir}/{ID_SHARDS_DIR}") or {}
    counts = filtering_counts(shards.lengths, config.data)
    return (
        f"{workdir}/{ID_SHARDS_DIR}: {len(shards)} pairs, {manifest.get('source_ids', 0)} "
        f"source and {manifest.get('target_ids', 0)} target ids (tokenised in "
        f"{manifest.get('seconds', 0):.1f} s); at max_source_length="
        f"{config.data.max_source_length} / max_target_length={config.data.max_target_length}: "
        f"{counts['usable']} usable, {counts['too_long']} too long "
        f"({'truncated' if config.data.truncate else 'dropped'}), {counts['malformed']} "
        f"malformed; {time.perf_counter() - start:.1f} s in all"
    )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    values = parse_flags(argv, _define, USAGE)
    if values.config is None:
        fail("--config is required, e.g. --config configs/base.py")
    if not values.workdir:
        fail("--workdir is required, e.g. --workdir runs/base")
    run(lambda: print(prepare(values.config, values.workdir)))


if __name__ == "__main__":
    main()
