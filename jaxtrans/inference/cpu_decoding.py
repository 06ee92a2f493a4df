"""Which XLA:CPU matrix kernels a decoder is compiled with, by how many rows it decodes.

A decoder step multiplies [rows, d_model] by every weight matrix of the decoder and by the
output projection, so with few rows its time is reading the weights: about 150 MB a step
for a Marian (opus-mt) model in float32, none of which stays in the processor's caches
from one step to the next. XLA:CPU's default kernels for matrix products (YNNPACK) read
them slowly at few rows; its older Eigen kernels read them about 1.7x faster there but
are slower at many rows, and they are fast only when the projection's weights lie
[d_model, vocab] in memory, while a tied output projection is the embedding table
[vocab, d_model]. One decoder step at the Marian shape on one core, the weights streamed
(ms; 2026-12-03):

    rows                       16     32     48     64    128
    YNNPACK, [vocab, d_model]  52.9   82.6  100.0   76.9-91.7  152.2
    Eigen, [d_model, vocab]    30.7   60.2   72.2   90.6-95.3  177.4

So a decoder of at most FEW_ROWS rows on CPU is compiled without YNNPACK
(``compiler_options``), and reads a tied projection from a copy of the embedding table
transposed once per call (``transposed_output``). Elsewhere nothing changes; other
platforms are never affected.
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
