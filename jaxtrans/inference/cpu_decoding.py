"""How decoding is shaped on CPU: which XLA:CPU kernels a decoder is compiled with, when
greedy search and sampling drop their finished rows, how many tokens a decoder's cache first
holds, and how finely lengths are bucketed.
Each is decided by the platform a decoder is traced for (attention_kernels.current_platform,
so ``python -m jaxtrans.compile``'s TPU decoders keep the defaults); other platforms are
never affected.

**Kernels.** A decoder step multiplies [rows, d_model] by every weight matrix of the
decoder and by the output projection, about 150 MB of weights a step for a Marian (opus-mt)
model in float32, none of which stays in the processor's caches from one step to the next.
XLA:CPU's default kernels for matrix products (YNNPACK) and its older Eigen kernels both
read them; on one core Eigen's are the faster of the two at every row count measured, but
only where the projection's weights lie [d_model, vocab] in memory, while a tied output
projection is the embedding table [vocab, d_model]. One product [64, 512] x [512, 32001] on
one core: YNNPACK 24.5 ms, Eigen 19.1 ms from [d_model, vocab], 112 ms from [vocab,
d_model]. Whole warm decoding calls, every row 64 tokens at the Marian shape, and the
demo's 500 test sentences in batches of 100, on one core (s; 2026-12-04):

    decoding (rows)           YNNPACK, [vocab, d_model]   Eigen, [d_model, vocab]
    Marian greedy (16)        2.02                        1.90
    Marian greedy (64)        5.44                        4.82
    Marian beam 4 (64)        5.56-5.65                   4.90
    Marian greedy (128)       10.28                       9.50
    Marian greedy (256)       19.55                       18.81
    demo greedy (100)         0.244-0.245                 0.238-0.241
    demo beam 4 (400)         3.42-3.46                   3.39

That is on one core. On two, YNNPACK spreads a product over both cores better, and
neither is ahead by much (s; the same day, unpinned, as above):

    decoding (rows)           YNNPACK, [vocab, d_model]   Eigen, [d_model, vocab]
    Marian greedy (16)        1.21                        1.28
    Marian beam 4 (64)        3.20-3.24                   3.32-3.34
    demo greedy (100)         0.184-0.203                 0.178-0.194
    demo beam 4 (400)         2.93-3.00                   2.83-2.97

So a decoder of at most EIGEN_ROWS rows (past the largest measured) in a process of one
core (``cores``: a serving process a core, or a pinned benchmark) is compiled without
YNNPACK (``compiler_options``), and reads a tied projection from a copy of the embedding
table transposed once per call (``transposed_output``); with more cores, XLA's defaults.
The same tokens either way.

**Finished rows.** Where the weights stay in the caches (a small model, many rows), a
step's time grows with its rows: the demo model's step took 2.77 / 1.49 / 0.68 ms at 100 /
50 / 25 rows (one core, 2026-12-03). A batch's sentences end at different steps, so greedy
search and sampling narrow to a quarter of the rows once at most a quarter still run
(``narrowing_stages``; search.py), if that leaves FEWEST_NARROWED_ROWS. Each narrowing is
another copy of the step to compile, and one does about what several do: the demo's 500
test sentences in 5 batches of 100, warm, fastest of 7 (ms) and a fresh process's first
call with no cache (s), ladder multiple 4, one core each, 2026-12-04:

    narrowing to          none    1/2    1/4    1/8   1/2, 1/4   1/2, 1/4, 1/8
    warm (ms)             195     181    168    181      174         183
    first call (s)        4.3     7.1    7.2    7.2     10.0        13.4

On an accelerator a step takes about as long for fewer rows: no narrowing there.

**Lengths.** A padded source position costs the encoder as much as a real one, so source
lengths go up a finer ladder on CPU (``length_multiple`` 8: 8, 16, 24, ..., 64, 80, ...;
length_buckets.py) than on an accelerator (16, 32, ...), whose padded positions cost
little. Finer still makes more programs, each compiled or read from the cache by every
fresh process: the same 500 sentences, narrowing to a quarter,

    multiple              16     8      4
    programs              2      3      4
    warm (ms)             203    185    176
    first call (s)        3.8    5.4    7.2

and a fresh evaluate.py on 1,000 sentences gains less from the last step than it pays.

**Cache slots.** A decoder step attends to every slot of its self-attention cache, written
or not, and the cache holds max_len tokens (the source's length + 50 for the demo: 58 to
74 slots) while the demo's translations end after 12 tokens on average, 20 at most. So a
greedy or sampling decoder's cache first holds the source's length and 8 more slots
(``first_cache_slots``), and search.py widens it to max_len at that step if a sentence is
still running (before or after narrowing, whichever comes first). The demo's 500 test
sentences as above, the three ways alternating in one process, fastest / median of 6
warm calls and the first call with no cache (one core, 2026-12-04):

    first cache           max_len    source + 8    16 slots
    warm (ms)             208 / 209  198 / 200     194 / 194
    first call (s)        7.6        9.8           9.9

16 slots is shorter than some of the demo's translations (up to 20 tokens), so those
batches widen, and it is the fastest here; but a language pair whose translations run
longer than their sources would widen nearly always, so source + 8 is the rule. Widening
adds two copies of the step to compile (one a way through the search's cond: the cost
above, paid once per model and machine with the compilation cache).

Beam search starts from the same short cache and widens it once (beam_search.py; its
search has no narrowing, and its beams often run to max_len, as a loose length penalty
keeps them going). Warm calls, one core (s; 2026-12-04): the demo's 500 sentences in
batches of 100, beam 4: 3.45 -> 3.27, the first call with no cache 9.1 -> 10.4; the
Marian shape, 16 sentences of 32 source ids, 64 tokens each (a cache of 40 slots
widened to 64): 4.90 -> 4.76. The same tokens.
"""

import os

from jaxtrans.nn.attention_kernels import current_platform

# Rows at and below which decoders on one core take XLA:CPU's Eigen kernels: faster at
# every row count of the table above; larger decoders keep the defaults, unmeasured.
EIGEN_ROWS = 512
# XLA's option that turns YNNPACK's fusions off, so matrix products use Eigen.
_NO_YNNPACK = {"xla_cpu_experimental_ynn_fusion_type": ""}


def cores() -> int:
    """The cores this process may run on, by which XLA:CPU sizes its thread pool."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def eigen_rows(rows: int) -> bool:
    """Whether a decoder of ``rows`` rows takes the Eigen kernels: on CPU, the platform it
    is traced for (attention_kernels.target_platform when compiling for another), in a
    process of one core."""
    return current_platform() == "cpu" and rows <= EIGEN_ROWS and cores() == 1


def compiler_options(rows: int) -> dict[str, str] | None:
    """The XLA options a decoder of ``rows`` rows is compiled with (None: the defaults)."""
    return dict(_NO_YNNPACK) if eigen_rows(rows) else None


def transposed_output(rows: int) -> bool:
    """Whether a tied output projection is read from the embedding table transposed."""
    return eigen_rows(rows)


# Greedy search and sampling narrow to this share of their rows (1 / NARROWED_SHARE) ...
NARROWED_SHARE = 4
# ... if that leaves at least so many rows: below them a step's time hardly falls with its rows.
FEWEST_NARROWED_ROWS = 16
# A decoder's first cache holds the source's tokens and so many more.
FIRST_SLOTS_MARGIN = 8
# Source lengths go up the ladder of this multiple (length_buckets.bucket_length).
CPU_LENGTH_MULTIPLE = 8
ACCELERATOR_LENGTH_MULTIPLE = 16


def narrowing_stages(rows: int) -> tuple[int, ...]:
    """The row counts a greedy or sampling decoder of ``rows`` rows narrows to as its rows
    finish (search.py's stages): on CPU a quarter of them, if that is at least
    FEWEST_NARROWED_ROWS; elsewhere none."""
    narrowed = -(-rows // NARROWED_SHARE)
    if current_platform() != "cpu" or narrowed < FEWEST_NARROWED_ROWS:
        return ()
    return (narrowed,)


def first_cache_slots(source_len: int, max_len: int) -> int:
    """The tokens the self-attention cache of a decoder first holds (greedy, sampling and
    beam search widen it to max_len if a sentence gets that far): on CPU the source's
    length and FIRST_SLOTS_MARGIN more, a multiple of 8; elsewhere max_len."""
    slots = -(-(source_len + FIRST_SLOTS_MARGIN) // 8) * 8
    if current_platform() != "cpu" or slots >= max_len:
        return max_len
    return slots


def length_multiple() -> int:
    """The ladder's multiple for source lengths (length_buckets.bucket_length) where the
    caller gives none: finer on CPU."""
    return CPU_LENGTH_MULTIPLE if current_platform() == "cpu" else ACCELERATOR_LENGTH_MULTIPLE
