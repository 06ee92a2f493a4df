"""The pictures of ``python -m jaxtrans.plot positions|masks|schedule|smoothing``.

Each picture is two functions: ``*_arrays(config)`` computes what is drawn with the
library's own code (the sinusoidal table and RoPE angles of nn/positions.py, the masks
and attention weights of nn/masks.py and nn/attention.py, the optimizer's schedule of
training/optimizer.py, the smoothed targets of training/loss.py) and ``draw_*(arrays)``
draws exactly those arrays, so a picture cannot show what the model does not do.
``config``: a run config as train.py takes it (configs/base.py by default).
"""

import ml_collections
import numpy as np
from matplotlib.figure import Figure

from jaxtrans.inference.plots import batch_masks, draw_batch_masks
from jaxtrans.nn.positions import default_positions, rope_angles, sinusoidal_embedding
from jaxtrans.training.loss import smoothed_target_distribution
from jaxtrans.training.optimizer import make_optimizer, noam_schedule
from jaxtrans.training.run_sections import RunSections
from jaxtrans.vocab import PAD_ID

KINDS = ("positions", "masks", "schedule", "smoothing")
# Positions drawn at most (the table is evaluated at 0 .. length - 1).
MAX_POSITIONS = 100
# Dimensions of the table drawn as curves against position, as fractions of d_model
# after the first sin/cos pair: slower and slower waves.
CURVE_FRACTIONS = (1 / 8, 1 / 4)
# RoPE pairs drawn as curves: the fastest turning ones and a slow one.
ROPE_PAIRS = (0, 1, 2, 4, 8)
# The paper's Noam schedules compared with the config's: (d_model, warmup) at factor 1.
NOAM_VARIANTS = ((512, 4000), (512, 8000), (512, 2000), (256, 4000), (1024, 4000))
NOAM_STEPS = 20_000
# The smoothed target of one token in a small vocabulary.
SMOOTHING_VOCAB = 12
SMOOTHING_TARGET = 5
SMOOTHING_VALUES = (0.1, 0.2)


def positions_arrays(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """``table`` [positions, d_model]: sinusoidal_embedding at 0 .. length - 1;
    ``rope`` [positions, head_dim / 2]: rope_angles of one head (radians)."""
    model = config.model
    length = min(int(model.max_len), MAX_POSITIONS)
    positions = default_positions(1, length)
    head_dim = model.d_model // model.num_heads
    base = float(model.rope_base)
    return {
        "positions": np.arange(length),
        "table": np.asarray(sinusoidal_embedding(positions, model.d_model)[0]),
        "rope": np.asarray(rope_angles(positions, head_dim, base)[0]),
    }


def draw_positions(arrays: dict[str, np.ndarray]) -> Figure:
    """Sinusoidal table heatmap and curves; RoPE angles (wrapped) and curves."""
    positions, table, rope = arrays["positions"], arrays["table"], arrays["rope"]
    fig = Figure(figsize=(12, 8), layout="constrained")
    (heat, curves), (rope_heat, rope_curves) = fig.subplots(2, 2)
    image = heat.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                        interpolation="nearest")  # fmt: skip
    heat.set(title=f"sinusoidal table, d_model={table.shape[1]}", xlabel="dimension",
             ylabel="position")  # fmt: skip
    fig.colorbar(image, ax=heat, shrink=0.8)
    dims = (4, 5, *(int(table.shape[1] * f) for f in CURVE_FRACTIONS))
    for d in dims:
        curves.plot(positions, table[:, d], label=f"dim {d} ({'cos' if d % 2 else 'sin'})")
    curves.set(title="a few dimensions against position", xlabel="position", ylabel="PE")
    curves.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    wrapped = np.angle(np.exp(1j * rope))  # the same rotation, in (-pi, pi]
    image = rope_heat.imshow(wrapped, aspect="auto", cmap="twilight", vmin=-np.pi, vmax=np.pi,
                             interpolation="nearest")  # fmt: skip
    rope_heat.set(title=f"RoPE angles, head_dim={2 * rope.shape[1]} (wrapped to (-pi, pi])",
                  xlabel="pair i (dims i, i + head_dim/2)", ylabel="position")  # fmt: skip
    fig.colorbar(image, ax=rope_heat, shrink=0.8, label="radians")
    for i in ROPE_PAIRS:
        if i < rope.shape[1]:
            rope_curves.plot(positions, rope[:, i], label=f"pair {i}")
    rope_curves.plot(positions, rope[:, -1], label=f"pair {rope.shape[1] - 1}")
    rope_curves.set(title="RoPE angle = position * theta_i", xlabel="position",
                    ylabel="radians")  # fmt: skip
    rope_curves.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("positions: what is added to the embeddings, or how queries/keys turn (RoPE)")
    return fig


def masks_arrays(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """The arrays of inference.plots.batch_masks, one head of the config's width."""
    head_dim = config.model.d_model // config.model.num_heads
    return batch_masks(head_dim=head_dim)


def schedule_arrays(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """``steps`` (optax update counts), ``lr``: the schedule make_optimizer builds from
    the config over its train.num_steps (ten warm-ups when it is 0); ``variant_steps``
    and ``variants`` [variant, step]: the paper's Noam schedule for NOAM_VARIANTS."""
    sections = RunSections.of(config)
    warmup = sections.optimizer.warmup_steps
    # A run counted in epochs (num_steps 0) learns its length from the data: draw ten
    # warm-ups of it.
    num_steps = sections.train.num_steps or max(10 * warmup, 1000)
    _, schedule = make_optimizer(sections.optimizer, config.model.d_model, num_steps)
    steps = np.linspace(0, num_steps - 1, 2000).astype(np.int64)
    steps = np.unique([*steps, *(s for s in (warmup - 1, warmup) if 0 <= s < num_steps)])
    variant_steps = np.arange(0, NOAM_STEPS, 10)
    return {
        "steps": steps,
        "lr": np.asarray(schedule(steps)),
        "variant_steps": variant_steps,
        "variants": np.stack(
            [np.asarray(noam_schedule(1.0, d, w)(variant_steps)) for d, w in NOAM_VARIANTS]
        ),
    }


def draw_schedule(arrays: dict[str, np.ndarray], label: str = "") -> Figure:
    """The config's learning rate against update; the Noam variants beside it."""
    fig = Figure(figsize=(12, 4.5), layout="constrained")
    own, variants = fig.subplots(1, 2)
    own.plot(arrays["steps"], arrays["lr"])
    peak = int(np.argmax(arrays["lr"]))
    own.plot(arrays["steps"][peak], arrays["lr"][peak], "o")
    own.annotate(f"peak {arrays['lr'][peak]:.2e} at update {arrays['steps'][peak]}",
                 (arrays["steps"][peak], arrays["lr"][peak]), textcoords="offset points",
                 xytext=(10, -5), fontsize=8)  # fmt: skip
    own.set(title=f"the config's schedule {label}", xlabel="update (optax count)",
            ylabel="learning rate")  # fmt: skip
    for (d, w), values in zip(NOAM_VARIANTS, arrays["variants"], strict=True):
        variants.plot(arrays["variant_steps"], values, label=f"d_model={d}, warmup={w}")
    variants.set(title="Noam: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)",
                 xlabel="update (optax count)", ylabel="learning rate")  # fmt: skip
    variants.legend(fontsize=8)
    for ax in (own, variants):
        ax.grid(alpha=0.3)
    return fig


def smoothing_arrays(config: ml_collections.ConfigDict) -> dict[str, np.ndarray]:
    """``smoothing`` [k] values (SMOOTHING_VALUES and the config's train.label_smoothing)
    and ``distributions`` [k, vocab]: smoothed_target_distribution of SMOOTHING_TARGET."""
    target = np.asarray(SMOOTHING_TARGET)
    values = sorted({*SMOOTHING_VALUES, float(RunSections.of(config).train.label_smoothing)})
    return {
        "smoothing": np.asarray(values, np.float32),
        "distributions": np.stack(
            [np.asarray(smoothed_target_distribution(target, SMOOTHING_VOCAB, s)) for s in values]
        ),
    }


def draw_smoothing(arrays: dict[str, np.ndarray]) -> Figure:
    """Grouped bars: probability of each vocabulary id under each smoothing value."""
    smoothing, distributions = arrays["smoothing"], arrays["distributions"]
    vocab = distributions.shape[1]
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(smoothing)
    for k, (s, q) in enumerate(zip(smoothing, distributions, strict=True)):
        ax.bar(np.arange(vocab) + (k - (len(smoothing) - 1) / 2) * width, q, width,
               label=f"smoothing {s:g}: {1 - s + s / vocab:.3f} / {s / vocab:.4f}")  # fmt: skip
    ids = [f"{i}\n(pad)" if i == PAD_ID else str(i) for i in range(vocab)]
    ax.set_xticks(range(vocab), ids)
    ax.set_yscale("log")
    ax.set(title=f"label-smoothed target of token {SMOOTHING_TARGET}, vocabulary {vocab}: "
           "1 - s + s/vocab on it, s/vocab on every other id\nthe pad id gets s/vocab like "
           "any other; target positions that are padding have weight 0 in the loss",
           xlabel="token id", ylabel="target probability (log scale)")  # fmt: skip
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    return fig


def picture(kind: str, config: ml_collections.ConfigDict, label: str = "") -> Figure:
    """The figure of one of KINDS for ``config``."""
    if kind == "positions":
        return draw_positions(positions_arrays(config))
    if kind == "masks":
        return draw_batch_masks(masks_arrays(config))
    if kind == "schedule":
        opt = config.optimizer
        label = f"({label}: {opt.schedule}, d_model={config.model.d_model}, "
        label += f"warmup={opt.warmup_steps})"
        return draw_schedule(schedule_arrays(config), label)
    if kind == "smoothing":
        return draw_smoothing(smoothing_arrays(config))
    raise ValueError(f"{kind!r} is not one of {', '.join(KINDS)}")
