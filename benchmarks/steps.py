"""The two training steps the benchmarks compare, built at the same named shapes.

jaxtrans: the translation task's ``make_train_step`` jit-compiled with shardings and a
donated state, exactly as ``jaxtrans.training.loop`` does. PyTorch:
``torch.nn.Transformer`` with a shared token embedding scaled by sqrt(d_model),
sinusoidal positions, dropout, the output projection tied to the embedding,
label-smoothed cross entropy over non-pad targets, gradient clipping and Adam with the
Noam schedule, in eager mode or, with ``compiled=True``, the same step through
``torch.compile`` (inductor): the forward and loss as one compiled function (its backward
compiled with it), the clipping and the Adam update as another. Both take the same batch:
rows of random token ids of random lengths, padded at the end.

Sibling scripts import this module (``python benchmarks/<script>.py`` puts this folder
on the path).
"""

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable

import jax
import numpy as np
import torch
import torch.nn.functional as F

from jaxtrans.data.reserved_pieces import NUM_RESERVED_IDS, PAD_ID
from jaxtrans.models import TransformerConfig
from jaxtrans.tasks.translation.translation_task import TranslationTask
from jaxtrans.training import sharding
from jaxtrans.training.optimizer import make_optimizer
from jaxtrans.training.state import init_train_state
from jaxtrans.training.step import make_train_step

# configs/ is a folder of the repository, not of the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs.base import get_config  # noqa: E402

Batch = dict[str, np.ndarray]
BATCH_KEYS = ("source", "target_in", "target_out")


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Model dimensions and the batch of one benchmark setting."""

    d_model: int
    num_heads: int
    d_ff: int
    num_layers: int  # encoder layers = decoder layers
    vocab_size: int
    batch_size: int
    source_length: int
    target_length: int


SHAPES = {
    # For smoke runs (--quick): compiles in seconds.
    "tiny": Shapes(64, 2, 128, 1, 500, batch_size=4, source_length=16, target_length=16),
    "small": Shapes(256, 4, 1024, 3, 8000, batch_size=32, source_length=64, target_length=64),
    # The small model at twice small's tokens a step: longer rows, or more rows.
    "small_32x128": Shapes(
        256, 4, 1024, 3, 8000, batch_size=32, source_length=128, target_length=128
    ),
    "small_64x64": Shapes(256, 4, 1024, 3, 8000, batch_size=64, source_length=64, target_length=64),
    # The base model of the paper; 8 rows of 128 tokens fit comfortably in host memory
    # and keep a step of both frameworks within seconds on two cores.
    "base": Shapes(512, 8, 2048, 6, 32000, batch_size=8, source_length=128, target_length=128),
    # The base model at configs/base.py's batch (96 rows of 256, ~25k target tokens).
    "base_full": Shapes(
        512, 8, 2048, 6, 32000, batch_size=96, source_length=256, target_length=256
    ),
}


def cpu_threads() -> int:
    """Cores this process may run on: XLA's CPU thread pool uses all of them."""
    return len(os.sched_getaffinity(0))


def random_batch(shapes: Shapes, seed: int = 0) -> Batch:
    """Rows of random non-reserved ids, each between half and all of the row, padded.

    Returns source [batch, source_length], target_in and target_out [batch,
    target_length] int32 (target_out is target_in shifted left, as in teacher forcing).
    """
    rng = np.random.default_rng(seed)
    b, s, t = shapes.batch_size, shapes.source_length, shapes.target_length

    def rows(length: int) -> np.ndarray:
        ids = rng.integers(NUM_RESERVED_IDS, shapes.vocab_size, (b, length + 1), dtype=np.int32)
        real = rng.integers(length // 2, length + 1, (b, 1))
        return np.where(np.arange(length + 1) < real, ids, PAD_ID).astype(np.int32)

    target = rows(t)
    return {"source": rows(s)[:, :s], "target_in": target[:, :-1], "target_out": target[:, 1:]}


def real_target_tokens(batch: Batch) -> int:
    return int(np.count_nonzero(batch["target_out"] != PAD_ID))


# ---------------------------------------------------------------- jaxtrans


def jaxtrans_config(shapes: Shapes, **overrides) -> TransformerConfig:
    """configs/base.py's model section at these dimensions (Post-LN, tied), with the recipe
    torch's nn.Transformer peer runs on a CPU: float32, dropout 0.1 on residuals, attention
    weights and activations (base itself computes in bfloat16 without the last two)."""
    model = get_config().model.to_dict()
    model.update(
        dtype="float32",
        attention_dropout_rate=0.1,
        activation_dropout_rate=0.1,
        d_model=shapes.d_model,
        num_heads=shapes.num_heads,
        d_ff=shapes.d_ff,
        num_encoder_layers=shapes.num_layers,
        num_decoder_layers=shapes.num_layers,
        vocab_size=shapes.vocab_size,
    )
    model.update(overrides)
    return TransformerConfig.from_dict(model)


def translation_task(
    config: TransformerConfig, shapes: Shapes, loss_chunk_tokens: int | None = None
) -> TranslationTask:
    """The library's translation task (loss, counts, FLOPs) for this model and batch;
    ``loss_chunk_tokens``: train.loss_chunk_tokens (None: the default, the chunked loss;
    0: the whole logits)."""
    run = get_config()
    if loss_chunk_tokens is not None:
        run.train.loss_chunk_tokens = loss_chunk_tokens
    run.data.update(
        batch_size=shapes.batch_size,
        max_source_length=shapes.source_length,
        max_target_length=shapes.target_length,
    )
    return TranslationTask(run, config)


def jaxtrans_step(
    config: TransformerConfig,
    shapes: Shapes,
    seed: int = 0,
    donate: bool = True,
    devices: int = 1,
    loss_chunk_tokens: int | None = None,
) -> tuple[Callable[[Batch], dict], Callable[[], None]]:
    """(step, sync): ``step(batch)`` runs one jitted update of a state it holds (donated to
    the update, as in the training loop, unless ``donate=False``) and returns its metrics;
    ``sync()`` waits until the last update is done; ``step.compile_ahead(batch)`` compiles
    the update before the first step and times the tracing and the compiling. With
    ``devices`` > 1 the batch rows are split over that many devices (the mesh's data
    axis), as the loop does on several. ``loss_chunk_tokens``: see translation_task."""
    task = translation_task(config, shapes, loss_chunk_tokens)
    run = task.config
    optimizer, schedule = make_optimizer(run.optimizer, config.d_model, run.train.num_steps)
    mesh = sharding.make_mesh(run.mesh, jax.devices()[:devices])
    state, state_shardings, _ = init_train_state(
        task.init_params, optimizer, mesh, jax.random.key(seed)
    )
    train_step = make_train_step(task, optimizer, schedule)
    jitted = jax.jit(
        lambda state, batch: train_step(state, batch, state.dropout_key()),
        in_shardings=(state_shardings, sharding.batch_sharding(mesh)),
        out_shardings=(state_shardings, sharding.replicated(mesh)),
        donate_argnums=(0,) if donate else (),
    )
    holder = {"state": state, "metrics": None, "update": jitted}

    def step(batch: Batch) -> dict:
        holder["state"], holder["metrics"] = holder["update"](holder["state"], batch)
        return holder["metrics"]

    def sync() -> None:
        jax.block_until_ready(holder["state"])

    def compile_ahead(batch: Batch) -> tuple[float, float]:
        """Trace and lower, then compile, the update for this batch now; returns the two
        times (s). Later steps run the compiled executable, so the first one compiles
        nothing (the persistent compilation cache, if set, serves the compile)."""
        start = time.perf_counter()
        lowered = jitted.lower(holder["state"], batch)
        lowered_at = time.perf_counter()
        holder["update"] = lowered.compile()
        return lowered_at - start, time.perf_counter() - lowered_at

    step.compile_ahead = compile_ahead
    return step, sync


def train_step_flops(config: TransformerConfig, shapes: Shapes) -> float:
    """Counted model FLOPs of one step (jaxtrans.training.mfu), padding included."""
    return translation_task(config, shapes).step_flops()


# ---------------------------------------------------------------- PyTorch


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """[length, d_model]: sin on even, cos on odd features (the paper's table)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


def causal_mask(length: int) -> torch.Tensor:
    """[length, length] bool, True where a position may not look (the later positions).
    Boolean like the padding masks: mixing a float mask with them makes torch warn, and the
    warning breaks the graph that torch.compile captures."""
    return torch.ones(length, length, dtype=torch.bool).triu(1)


class TorchTransformer(torch.nn.Module):
    """torch.nn.Transformer with the embeddings and output projection of the paper;
    ``norm_first=True`` makes its layers Pre-LN (jaxtrans's ``model.norm="pre"``)."""

    def __init__(
        self, shapes: Shapes, dropout: float = 0.1, max_len: int = 512, norm_first: bool = False
    ):
        super().__init__()
        self.d_model = shapes.d_model
        self.embedding = torch.nn.Embedding(shapes.vocab_size, shapes.d_model)
        torch.nn.init.xavier_uniform_(self.embedding.weight)
        self.register_buffer("positions", sinusoidal_table(max_len, shapes.d_model))
        self.dropout = torch.nn.Dropout(dropout)
        self.transformer = torch.nn.Transformer(
            d_model=shapes.d_model,
            nhead=shapes.num_heads,
            num_encoder_layers=shapes.num_layers,
            num_decoder_layers=shapes.num_layers,
            dim_feedforward=shapes.d_ff,
            dropout=dropout,
            batch_first=True,
            norm_first=norm_first,
        )

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids) * math.sqrt(self.d_model)
        return self.dropout(x + self.positions[: ids.shape[1]])

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        """source [batch, src_len], target_in [batch, tgt_len] -> logits [batch, tgt_len, V]."""
        y = self.transformer(
            self.embed(source),
            self.embed(target_in),
            tgt_mask=causal_mask(target_in.shape[1]),
            src_key_padding_mask=source == PAD_ID,
            tgt_key_padding_mask=target_in == PAD_ID,
            memory_key_padding_mask=source == PAD_ID,
            tgt_is_causal=True,
        )
        return F.linear(y, self.embedding.weight)  # tied output projection


def noam_factor(d_model: int, warmup_steps: int) -> Callable[[int], float]:
    """The Noam learning rate at update ``i`` (0-based): d_model^-0.5 * min(step^-0.5,
    step * warmup^-1.5), step = i + 1."""
    return lambda i: d_model**-0.5 * min((i + 1) ** -0.5, (i + 1) * warmup_steps**-1.5)


def torch_trainer(
    model: torch.nn.Module,
    learning_rate: Callable[[int], float],
    label_smoothing: float = 0.1,
    clip_norm: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    compiled: bool = False,
    device: str = "cpu",
    autocast: torch.dtype | None = None,
) -> Callable[[Batch], torch.Tensor]:
    """``step(batch) -> loss`` (a 0-d tensor): forward, label-smoothed cross entropy over
    the non-pad targets, backward, clipping to ``clip_norm``, Adam at
    ``learning_rate(i)`` for the i-th update (0-based). ``compiled``: the forward and loss,
    and the clipping and update, each through ``torch.compile`` (the first step compiles).
    ``device``: where ``model`` lives and the batch goes; ``autocast``: the forward and
    loss in this dtype (torch.autocast, e.g. torch.bfloat16), parameters float32."""
    # A tensor learning rate lets the compiled update read a new rate without recompiling.
    adam = torch.optim.Adam(
        model.parameters(), lr=torch.tensor(1.0) if compiled else 1.0, betas=betas, eps=eps
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(adam, learning_rate)

    def loss_of(source, target_in, target_out):
        with torch.autocast(device.split(":")[0], autocast, enabled=autocast is not None):
            logits = model(source, target_in)
        logits = logits.float()  # the loss in float32, as jaxtrans's
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            target_out.reshape(-1),
            ignore_index=PAD_ID,
            label_smoothing=label_smoothing,
        )

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        adam.step()

    if compiled:
        loss_of, update = torch.compile(loss_of), torch.compile(update)

    def step(batch: Batch) -> torch.Tensor:
        loss = loss_of(*(torch.from_numpy(batch[k]).long().to(device) for k in BATCH_KEYS))
        adam.zero_grad(set_to_none=True)
        loss.backward()
        update()
        schedule.step()
        return loss

    return step


def torch_step(shapes: Shapes, seed: int = 0, compiled: bool = False) -> Callable[[Batch], float]:
    """``step(batch) -> loss``: forward, backward, clip to norm 1, Adam(0.9, 0.98, 1e-9)
    with the Noam schedule (warmup 4000) and label smoothing 0.1, as configs/base.py;
    eager, or through torch.compile."""
    run = get_config()
    opt = run.optimizer
    torch.manual_seed(seed)
    model = TorchTransformer(shapes).train()
    step = torch_trainer(
        model,
        noam_factor(shapes.d_model, opt.warmup_steps),
        label_smoothing=run.train.label_smoothing,
        clip_norm=opt.clip_norm,
        betas=(opt.b1, opt.b2),
        eps=opt.eps,
        compiled=compiled,
    )
    return lambda batch: float(step(batch).detach())
