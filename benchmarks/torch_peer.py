"""PyTorch's peer of accelerator.py's unpacked row: ``torch.nn.Transformer`` at the same
shapes (steps.py: shared embedding, sinusoidal positions, tied output, label-smoothed
cross entropy, clipping, Adam with the Noam schedule), bfloat16 autocast with float32
parameters on a GPU, on the same batches (the training pipeline over the synthetic
corpus, one pair a row: nn.Transformer takes no packed segments). benchmarks/gpu.sh runs
it after the jaxtrans table only where torch imports; jaxtrans's own rows never import it.

    python benchmarks/torch_peer.py                 # configs/base.py, CUDA
    python benchmarks/torch_peer.py --dry           # a tiny model on the CPU
"""

import argparse
import statistics
import sys
import time

import accelerator
import loop_step
import steps
import torch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=accelerator.CONFIG)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--dry", action="store_true", help="a tiny model on the CPU")
    args, _ = parser.parse_known_args(argv)  # accelerator.py's other options pass through
    return args


def shapes_of(config) -> steps.Shapes:
    model, data = config.model, config.data
    if model.num_encoder_layers != model.num_decoder_layers:
        raise SystemExit("error: the PyTorch peer has as many encoder as decoder layers")
    return steps.Shapes(
        model.d_model,
        model.num_heads,
        model.d_ff,
        model.num_encoder_layers,
        data.vocab_size,
        data.batch_size,
        data.max_source_length,
        data.max_target_length,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    common = [loop_step.parse_override(text) for text in args.set]
    if args.dry:
        common = list(accelerator.DRY.items()) + common
        args.steps, args.repeats, args.batches = 2, 1, 2
    config = loop_step.run_config(args.config, [*common, ("data.pack", False)])
    device = "cuda" if torch.cuda.is_available() and not args.dry else "cpu"
    shapes = shapes_of(config)
    batches = loop_step.packed_batches(config, args.batches)
    opt = config.optimizer
    torch.manual_seed(0)
    model = (
        steps.TorchTransformer(
            shapes, dropout=config.model.dropout_rate, max_len=config.model.max_len
        )
        .train()
        .to(device)
    )
    step = steps.torch_trainer(
        model,
        steps.noam_factor(shapes.d_model, opt.warmup_steps),
        label_smoothing=config.train.label_smoothing,
        clip_norm=opt.clip_norm,
        betas=(opt.b1, opt.b2),
        eps=opt.eps,
        device=device,
        autocast=torch.bfloat16 if device == "cuda" else None,
    )
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    step(batches[0])
    sync()
    first = time.perf_counter() - start
    groups = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for i in range(args.steps):
            step(batches[i % len(batches)])
        sync()
        groups.append((time.perf_counter() - start) / args.steps)
    seconds = statistics.median(groups)
    tokens = statistics.mean(loop_step.real_target_tokens(b) for b in batches)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    dtype = "bfloat16 autocast" if device == "cuda" else "float32"
    print(
        f"| torch {torch.__version__} nn.Transformer eager, {dtype}, one pair a row "
        f"({device}) | {1000 * seconds:.1f} | {tokens / seconds:,.0f} | {shapes.batch_size} | "
        f"| | | {accelerator.gigabytes(peak)} | {first:.1f} | torch |",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
