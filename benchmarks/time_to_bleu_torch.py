"""time_to_bleu.py's PyTorch ways, each run in a process of its own (``--child WAY``):
(a) ``seeds``, the seeds' way, and (c) ``torch_recipe``, the jaxtrans config's recipe in
eager PyTorch (time_to_bleu.py's docstring says what each does). ``Way`` carries what
time_to_bleu.py knows of the run: when the process was launched (the budget counts from
there), the data settings both frameworks use, the model shape, the target language and
the config file.
"""

import dataclasses
import math
import os
import time


@dataclasses.dataclass(frozen=True)
class Way:
    launched: float  # time.monotonic() at the process's launch
    data_settings: dict  # jaxtrans config keys ("data.train", ...) and their values
    shape: dict  # d_model, num_heads, d_ff, num_layers
    target_lang: str  # as sacreBLEU tokenizes it
    config: str  # the jaxtrans config file whose recipe torch_recipe follows


def torch_data(args, way: Way, workdir: str):
    """(data config, tokenizer, training pairs): the shared data settings, the tokenizer
    trained in ``workdir`` (jaxtrans's trainer, within the budget)."""
    from jaxtrans.data.translation.data_config import get_data_config
    from jaxtrans.data.translation.sources import training_pairs
    from jaxtrans.data.translation.tokenizer import load_or_train_tokenizer

    data_config = get_data_config()
    data_config.update_from_flattened_dict(
        {key.split(".", 1)[1]: value for key, value in way.data_settings.items()}
    )
    tokenizer = load_or_train_tokenizer(data_config, workdir)
    return data_config, tokenizer, list(training_pairs(data_config))


def torch_shapes(args, way: Way, tokenizer, batch_size: int = 0):
    import steps

    return steps.Shapes(
        **way.shape, vocab_size=tokenizer.source_vocab_size, batch_size=batch_size,
        source_length=args.max_length, target_length=args.max_length,
    )  # fmt: skip


def train_until_spent(step, batches, launched: float, budget: float) -> dict:
    """Take ``step(batch) -> loss`` on ``next(batches)`` until ``budget`` seconds from
    the launch are spent (at least one step); the steps, target tokens, minutes and last
    loss."""
    from jaxtrans.data.reserved_pieces import PAD_ID

    steps_done = tokens = 0
    loss = math.nan
    while not steps_done or time.monotonic() - launched < budget:
        batch = next(batches)
        loss = float(step(batch).detach())
        steps_done += 1
        tokens += int((batch["target_out"] != PAD_ID).sum())
    return {"steps": steps_done, "target_tokens": tokens,
            "train_minutes": (time.monotonic() - launched) / 60, "final_loss": loss}  # fmt: skip


def decode_and_score(args, way: Way, data_config, tokenizer, model, how: str) -> dict:
    """Greedy BLEU and chrF of each of --splits ("naive" or "cached" decoding, see
    torch_greedy.py), and the seconds the decoding took."""
    import torch_greedy

    from jaxtrans.data.reserved_pieces import EOS_ID
    from jaxtrans.data.translation.sources import read_split
    from jaxtrans.inference.bleu import corpus_scores

    start = time.monotonic()
    result = {}
    for split in args.splits.split(","):
        pairs = read_split(data_config, split).pairs
        sources = [tokenizer.encode_source(p.source)[: args.max_length - 1] + [EOS_ID]
                   for p in pairs]  # fmt: skip
        outputs = torch_greedy.greedy(model, sources, 8 if args.quick else 50, how)
        hypotheses = [tokenizer.decode_target(ids) for ids in outputs]
        scores = corpus_scores(hypotheses, [p.target for p in pairs], way.target_lang)
        result[f"{split}_greedy_bleu"] = scores.bleu
        result[f"{split}_greedy_chrf"] = scores.chrf
    result["decode_seconds"] = time.monotonic() - start
    return result


def seeds_child(args, way: Way) -> dict:
    """(a) Train eagerly until the budget is spent, then decode naively."""
    import steps
    import torch
    from input_pipeline import padded_random_batches

    torch.set_num_threads(len(os.sched_getaffinity(0)))  # as many threads as CPUs given
    data_config, tokenizer, pairs = torch_data(args, way, os.path.join(args.outdir, "seeds"))
    shape = torch_shapes(args, way, tokenizer, args.seeds_batch)
    torch.manual_seed(0)
    model = steps.TorchTransformer(shape).train()
    step = steps.torch_trainer(model, steps.noam_factor(shape.d_model, args.seeds_warmup))
    batches = padded_random_batches(
        pairs, tokenizer, args.seeds_batch, args.max_length, args.max_length
    )
    spent = train_until_spent(step, batches, way.launched, args.minutes * 60)
    result = {"way": "seeds (eager PyTorch)", **spent}
    return {**result, **decode_and_score(args, way, data_config, tokenizer, model, "naive")}


def recipe_config(path: str):
    """The jaxtrans config file at ``path``, loaded (its get_config())."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def time_linear_rate(peak: float, warmup: int, deadline: float):
    """lr(i): linear warm-up to ``peak`` over ``warmup`` updates, then linear decay in
    wall-clock time to 0 at ``deadline`` (time.monotonic()), from where the warm-up ended:
    a schedule that ends with the budget without knowing the step time in advance."""
    decay_from = {}

    def rate(i: int) -> float:
        now = time.monotonic()
        if i < warmup:
            decay_from["t"] = now
            return peak * (i + 1) / warmup
        return peak * max(deadline - now, 0.0) / max(deadline - decay_from["t"], 1e-9)

    return rate


def torch_recipe_child(args, way: Way) -> dict:
    """(c) --config's recipe in eager PyTorch: its norm, dropout, Adam, peak rate and
    warm-up, its label smoothing and clipping, tokens_per_batch as fairseq-like
    length-bucketed batches, a linear decay that ends with the budget; cached greedy
    decoding."""
    import steps
    import torch
    from token_buckets import max_tokens_batches

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    recipe = recipe_config(way.config)
    opt, model_config = recipe.optimizer, recipe.model
    if opt.name != "adam" or opt.schedule != "linear":
        raise SystemExit(f"--config {args.config}: the PyTorch recipe knows Adam with the "
                         f"linear schedule, not {opt.name} with {opt.schedule}")  # fmt: skip
    data_config, tokenizer, pairs = torch_data(args, way, os.path.join(args.outdir, "torch_recipe"))
    shape = torch_shapes(args, way, tokenizer)
    torch.manual_seed(0)
    model = steps.TorchTransformer(
        shape, dropout=model_config.dropout_rate, norm_first=model_config.norm == "pre"
    ).train()
    budget = args.minutes * 60
    step = steps.torch_trainer(
        model,
        time_linear_rate(opt.learning_rate, opt.warmup_steps, way.launched + budget),
        label_smoothing=recipe.train.label_smoothing, clip_norm=opt.clip_norm,
        betas=(opt.b1, opt.b2), eps=opt.eps,
    )  # fmt: skip
    batches = max_tokens_batches(
        pairs, tokenizer, recipe.data.tokens_per_batch, args.max_length, args.max_length
    )
    name = f"the same recipe in eager PyTorch ({os.path.basename(args.config)})"
    result = {"way": name, **train_until_spent(step, batches, way.launched, budget)}
    return {**result, **decode_and_score(args, way, data_config, tokenizer, model, "cached")}


CHILDREN = {"seeds": seeds_child, "torch_recipe": torch_recipe_child}
