"""How decoding is shaped on CPU: which XLA:CPU kernels a decoder is compiled with, when
greedy search and sampling drop their finished rows, and how finely lengths are bucketed.
Each is decided by the platform a decoder is traced for (attention_kernels.current_platform,
so ``python -m jaxtrans.compile``'s TPU decoders keep the defaults); other platforms are
never affected.

**Kernels.** A decoder step multiplies [rows, d_model] by every weight matrix of the decoder
and by the output projection, so with few rows its time is reading the weights: about
150 MB a step for a Marian (opus-mt) model in float32, none of which stays in the
processor's caches from one step to the next. XLA:CPU's default kernels for matrix products
(YNNPACK) read them slowly at few rows; its older Eigen kernels read them about 1.7x faster
there but are slower at many rows, and they are fast only when the projection's weights lie
[d_model, vocab] in memory, while a tied output projection is the embedding table
[vocab, d_model]. One decoder step at the Marian shape on one core, the weights streamed
(ms; 2026-12-03):

    rows                       16     32     48     64    128
    YNNPACK, [vocab, d_model]  52.9   82.6  100.0   76.9-91.7  152.2
    Eigen, [d_model, vocab]    30.7   60.2   72.2   90.6-95.3  177.4

So a decoder of at most FEW_ROWS rows is compiled without YNNPACK (``compiler_options``),
and reads a tied projection from a copy of the embedding table transposed once per call
(``transposed_output``).

**Finished rows.** Where the weights stay in the caches (a small model, many rows), a
step's time grows with its rows: the demo model's step took 2.77 / 1.49 / 0.68 ms at 100 /
50 / 25 rows (one core, 2026-12-03). A batch's sentences end at different steps, so greedy
search and sampling narrow to half the rows whenever at most half still run
(``narrowing_stages``; search.py), down to FEWEST_NARROWED_ROWS: 5 batches of 100 demo
sentences took 353 -> 323 ms, the same tokens. On an accelerator a step takes about as
long for fewer rows, and every stage is another copy of the step to compile.

**Lengths.** A padded source position costs the encoder as much as a real one, and a CPU
compiles a decoder in seconds, so source lengths go up a finer ladder there
(``length_multiple``: 4, 8, ..., 32, 40, 48, ...; length_buckets.py) than on an
accelerator (16, 32, ...), whose compiles take longer and whose padded positions cost
little: the demo's 500 test sentences, 5 batches of 100, 320 -> 261 ms, the same tokens.
"""

from jaxtrans.nn.attention_kernels import current_platform

# Rows at and below which XLA:CPU's Eigen kernels decode faster (the table above).
FEW_ROWS = 48
# XLA's option that turns YNNPACK's fusions off, so matrix products use Eigen.
_NO_YNNPACK = {"xla_cpu_experimental_ynn_fusion_type": ""}


def few_rows(rows: int) -> bool:
    """Whether a decoder of ``rows`` rows takes the Eigen kernels: on CPU, the platform it
    is traced for (attention_kernels.target_platform when compiling for another)."""
    return current_platform() == "cpu" and rows <= FEW_ROWS


def compiler_options(rows: int) -> dict[str, str] | None:
    """The XLA options a decoder of ``rows`` rows is compiled with (None: the defaults)."""
    return dict(_NO_YNNPACK) if few_rows(rows) else None


def transposed_output(rows: int) -> bool:
    """Whether a tied output projection is read from the embedding table transposed."""
    return few_rows(rows)


# The fewest rows greedy search and sampling narrow to on CPU: below them a step's time
# hardly falls with its rows.
FEWEST_NARROWED_ROWS = 16
# At most so many narrowings: each is another copy of the step in the compiled program.
MOST_NARROWINGS = 3
# Source lengths go up the ladder of this multiple (length_buckets.bucket_length).
CPU_LENGTH_MULTIPLE = 4
ACCELERATOR_LENGTH_MULTIPLE = 16


def narrowing_stages(rows: int) -> tuple[int, ...]:
    """The row counts a greedy or sampling decoder of ``rows`` rows narrows to as its rows
    finish (search.py's stages): on CPU, halves down to FEWEST_NARROWED_ROWS, at most
    MOST_NARROWINGS of them; elsewhere none."""
    stages: list[int] = []
    if current_platform() != "cpu":
        return ()
    while len(stages) < MOST_NARROWINGS and -(-rows // 2) >= FEWEST_NARROWED_ROWS:
        rows = -(-rows // 2)
        stages.append(rows)
    return tuple(stages)


def length_multiple() -> int:
    """The ladder's multiple for source lengths (length_buckets.bucket_length) where the
    caller gives none: finer on CPU."""
    return CPU_LENGTH_MULTIPLE if current_platform() == "cpu" else ACCELERATOR_LENGTH_MULTIPLE
