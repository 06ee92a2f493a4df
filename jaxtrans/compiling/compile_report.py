"""What ``python -m jaxtrans.compile`` finds, as one dict (its --json) and as a table.

compile_for_slice  config, a TPU slice's or GPU machine's name -> the report: the train
                   step's bytes per device against its memory, FLOPs, the time estimate;
                   decoding; batch search
describe           the report -> the table printed on the console
"""

import copy
import math
import sys
from typing import Any

import ml_collections

from jaxtrans.compiling.ahead_of_time import CompiledTrainStep, compile_train_step
from jaxtrans.compiling.compile_targets import Target, compile_only_devices, target_named
from jaxtrans.compiling.translation_decoding import compile_beam_decoding
from jaxtrans.errors import UserError
from jaxtrans.nn.attention_kernels import model_attention_kernels
from jaxtrans.tasks import compile_task
from jaxtrans.training.dropout_rng import partition_rng_on_tpu
from jaxtrans.training.run_sections import RunSections

GIB = 2**30
# The largest batch --find_batch tries: this many times the smallest step of rows.
_MAX_MULTIPLES = 2**14


def compile_for_slice(
    config: ml_collections.ConfigDict,
    topology: str,
    *,
    find_batch: bool = False,
    decode: bool = True,
) -> dict[str, Any]:
    """Compile the run of ``config`` for ``topology``, a TPU slice or a GPU machine
    (compile_targets); the report: its train step, its decoding (translation, ``decode``)
    and, with ``find_batch``, the largest batch that fits with remat on and off."""
    slice_ = target_named(topology)
    # As train.py does: rbg dropout bits split over the chips (before libtpu starts).
    partition_rng_on_tpu(RunSections.of(config).train.dropout_rng_impl)
    devices = compile_only_devices(slice_)
    step = _compile(config, slice_, devices)
    report = {
        "topology": slice_.name,
        "grid": slice_.layout,
        "platform": slice_.platform,
        "chips": slice_.chips,
        "hosts": slice_.hosts,
        "device_kind": devices[0].device_kind,
        "peak_flops_per_device": slice_.peak_bf16_flops,
        "memory_note": slice_.memory_note,
        **train_step_report(step, slice_),
    }
    if decode and step.task.name == "translation":
        cost, what = compile_beam_decoding(step.task, devices[0])
        hbm = slice_.hbm_bytes
        report["decode"] = {
            "program": what,
            "bytes_per_device": cost.peak_bytes,
            "fits": cost.peak_bytes <= hbm and cost.out_of_memory is None,
            "out_of_memory": cost.out_of_memory,
        }
    if find_batch:
        found = {remat: largest_batch(config, slice_, devices, remat) for remat in (False, True)}
        report["find_batch"] = {
            "remat_off": found[False],
            "remat_on": found[True],
            "remat_fits_more": found[True]["rows"] > found[False]["rows"],
        }
    return report


def _compile(config: ml_collections.ConfigDict, slice_: Target, devices: list) -> CompiledTrainStep:
    try:
        return compile_train_step(config, compile_task, devices, slice_.hosts)
    except UserError as error:
        if str(error).startswith("config.mesh"):
            raise UserError(
                f"--topology {slice_.name} has {len(devices)} devices: {error}"
            ) from None
        raise


def train_step_report(step: CompiledTrainStep, slice_: Target) -> dict[str, Any]:
    """The train step's part of the report (the --json keys)."""
    hbm = slice_.hbm_bytes
    chips = len(step.mesh.devices.flat)
    total = step.bytes["total"]
    model_flops = step.task.step_flops()
    seconds, source = estimated_seconds(step.cost, slice_, model_flops / chips)
    # The other end of a roofline (not of the compiler's own cost model, where it answers).
    roofline = seconds and not step.cost.seconds
    serial = no_overlap_seconds(step.cost, slice_, model_flops / chips) if roofline else None
    data = step.config.data
    length = int(data.get("max_target_length", 0) or data.get("max_seq_length", 0))
    rows = int(data.batch_size)
    kernels = model_attention_kernels(
        step.task.model_config, slice_.platform, packed=step.task.packs_rows
    )
    return {
        "mesh": dict(step.mesh.shape),
        "parameters": step.parameters,
        "rows_per_step": rows,
        "token_slots_per_step": rows * length,
        "grad_accum_steps": int(step.config.train.grad_accum_steps),
        "remat": bool(step.task.model_config.remat),
        "dtype": str(step.task.model_config.dtype),
        "attention_kernel": {name: kernel for name, (kernel, _) in kernels.items()},
        "attention_fallbacks": {name: why for name, (_, why) in kernels.items() if why},
        "custom_calls": list(step.cost.custom_calls),
        "out_of_memory": step.cost.out_of_memory,
        "hbm_bytes_per_device": hbm,
        "bytes_per_device": dict(step.bytes),
        "fits": total <= hbm and step.cost.out_of_memory is None,
        "spare_bytes_per_device": hbm - total,
        "compiler_flops_per_step": step.cost.flops * chips if step.cost.flops else None,
        "bytes_accessed_per_device": step.cost.bytes_accessed or None,
        "hbm_traffic_per_device": step.cost.hbm_bytes or None,
        "model_flops_per_step": model_flops,
        "estimated_step_seconds": seconds,
        "estimate_from": source,
        "estimated_token_slots_per_second": rows * length / seconds if seconds else None,
        "estimated_mfu": (
            model_flops / seconds / (slice_.peak_bf16_flops * chips)
            if seconds and model_flops
            else None
        ),
        # The same counts with compute and HBM traffic one after the other, not overlapped:
        # a roofline is a bound (with nothing to overlap, its MFU is 100%), this the other end.
        "estimated_step_seconds_no_overlap": serial,
        "estimated_mfu_no_overlap": (
            model_flops / serial / (slice_.peak_bf16_flops * chips)
            if serial and model_flops
            else None
        ),
    }


def estimated_seconds(
    cost, slice_: Target, model_flops_per_device: float = 0.0
) -> tuple[float | None, str | None]:
    """(seconds a step, where the figure comes from): the compiler's cost model, or where
    it gives none, a roofline: the longer of the FLOPs at the device's bf16 peak and the
    program's HBM bytes at its HBM bandwidth. The FLOPs are the larger of the compiler's
    count (which takes a loop's body once) and jaxtrans's model count; the HBM bytes are
    each operation's operands and results in HBM, loops unrolled (program_bytes), not the
    compiler's "bytes accessed", which on a TPU counts the on-chip memories' traffic too."""
    if cost.seconds:
        return cost.seconds, "the compiler's cost model"
    flops = max(cost.flops, model_flops_per_device)
    moved = cost.hbm_bytes or cost.bytes_accessed
    roofline = max(flops / slice_.peak_bf16_flops, moved / slice_.hbm_bytes_per_second)
    if roofline <= 0:
        return None, None
    return roofline, (
        "the roofline of the FLOPs (the larger of the compiler's and the model's count) at "
        "the datasheet's bf16 peak and "
        + (
            "the program's HBM bytes (its operations' operands and results, from its HLO)"
            if cost.hbm_bytes
            else "the compiler's byte count"
        )
        + " at the HBM bandwidth"
    )


def no_overlap_seconds(cost, slice_: Target, model_flops_per_device: float = 0.0) -> float:
    """The FLOPs at the peak plus the HBM bytes at the bandwidth (estimated_seconds'
    counts): the step if its compute and its memory traffic never overlapped."""
    flops = max(cost.flops, model_flops_per_device)
    moved = cost.hbm_bytes or cost.bytes_accessed
    return flops / slice_.peak_bf16_flops + moved / slice_.hbm_bytes_per_second


def largest_batch(
    config: ml_collections.ConfigDict, slice_: Target, devices: list, remat: bool
) -> dict[str, Any]:
    """The most rows a step of ``config`` (with ``remat``) holds within HBM, in steps of
    the rows' required multiple (largest_fitting); each try said on stderr."""
    first = _compile(_with_rows(config, None, remat), slice_, devices)
    multiple = _row_multiple(first, slice_)
    hbm = slice_.hbm_bytes

    def fits(multiples: int) -> bool:
        rows = multiples * multiple
        step = first if rows == int(first.config.data.batch_size) else None
        step = step or _compile(_with_rows(config, rows, remat), slice_, devices)
        verdict = step.bytes["total"] <= hbm and step.cost.out_of_memory is None
        print(
            f"  remat {'on' if remat else 'off'}: {rows} rows, {step.bytes['total'] / GIB:.2f} "
            f"GiB, {'fits' if verdict else 'does not fit'}",
            file=sys.stderr,
            flush=True,
        )
        return verdict

    start = math.ceil(int(first.config.data.batch_size) / multiple)
    return {"rows": largest_fitting(fits, start) * multiple, "row_multiple": multiple}


def largest_fitting(fits, start: int, limit: int = _MAX_MULTIPLES) -> int:
    """The largest n in [1, limit] with fits(n) (fits: true up to a bound, false after;
    0 if fits(1) is false), trying ``start`` first, then doubling up or halving down to
    bracket the bound, then bisecting: about 2 log2 of the distance in tries."""
    start = min(max(start, 1), limit)
    if fits(start):
        low, high = start, None
        while high is None and low * 2 <= limit:
            if fits(low * 2):
                low *= 2
            else:
                high = low * 2
        if high is None:
            if low == limit or fits(limit):
                return limit
            high = limit
    else:
        low, high = start // 2, start
        while low >= 1 and not fits(low):
            low, high = low // 2, low
        if low < 1:
            return 0
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _row_multiple(step: CompiledTrainStep, slice_: Target) -> int:
    data_parallel = step.mesh.shape["data"] * step.mesh.shape["fsdp"]
    return math.lcm(data_parallel, slice_.hosts * int(step.config.train.grad_accum_steps))


def _with_rows(config: ml_collections.ConfigDict, rows: int | None, remat: bool):
    """``config`` with ``rows`` rows a step (None: as configured) and model.remat."""
    changed = copy.deepcopy(config)
    with changed.unlocked():
        changed.model.remat = remat
        if rows is not None:
            changed.data.tokens_per_batch = 0
            changed.data.batch_size = rows
    return changed


def describe(report: dict[str, Any]) -> str:
    """The report as the console table."""
    b = report["bytes_per_device"]
    hbm = report["hbm_bytes_per_device"]
    gib = lambda n: f"{n / GIB:8.2f} GiB" if n >= GIB else f"{n / 2**20:8.1f} MiB"  # noqa: E731
    verdict = (
        f"fits, {report['spare_bytes_per_device'] / GIB:.2f} GiB to spare"
        if report["fits"]
        else f"DOES NOT FIT: {-report['spare_bytes_per_device'] / GIB:.2f} GiB over"
    )
    why = report.get("attention_fallbacks", {})
    kernels = ", ".join(
        f"{k} {v}" + (f" ({why[k]})" if why.get(k) else "")
        for k, v in report["attention_kernel"].items()
    )
    # A GPU's usable memory is JAX's allocator's share of it (the note says how much).
    gpu = report.get("platform") == "gpu"
    unit, memory = ("GPU", f"{hbm / GIB:.2f} GiB") if gpu else ("chip", f"{hbm / GIB:.2f} GiB HBM")
    lines = [
        f"{report['topology']} ({report['grid']}): {report['chips']} {unit}s on "
        f"{report['hosts']} host(s), {report['device_kind']}, {hbm / GIB:.1f} GiB "
        + (f"usable ({report['memory_note']})" if gpu else "HBM")
        + f" and {report['peak_flops_per_device'] / 1e12:.0f} TFLOP/s bf16 per {unit}",
        f"mesh {report['mesh']}; {report['parameters']:,} parameters; "
        f"{report['rows_per_step']} rows a step ({report['token_slots_per_step']:,} token "
        f"slots); grad_accum_steps {report['grad_accum_steps']}; remat "
        f"{'on' if report['remat'] else 'off'}; dtype {report['dtype']}",
        f"attention: {kernels}",
        f"custom calls in the compiled step: {', '.join(report['custom_calls']) or 'none'}",
        "",
        "train step, per device",
        f"  parameters       {gib(b['params'])}",
        f"  optimizer state  {gib(b['optimizer'])}",
        f"  batch            {gib(b['batch'])}",
        f"  temporaries      {gib(b['temp'])}   (activations, gradients, updates)",
        f"  total (peak)     {gib(b['total'])}   of {memory}: {verdict}",
        *([f"  the compiler: {report['out_of_memory']}"] if report["out_of_memory"] else []),
        "",
        "FLOPs a step: compiler "
        + (
            f"{report['compiler_flops_per_step']:.3e}"
            if report["compiler_flops_per_step"]
            else "none (it counts none without the device)"
        )
        + f", jaxtrans's model "
        f"count {report['model_flops_per_step'] or 0:.3e}"
        + (
            f" (compiler / model {ratio:.2f})"
            if (ratio := _flops_ratio(report)) is not None
            else ""
        ),
    ]
    if report["hbm_traffic_per_device"]:
        counted = report["bytes_accessed_per_device"]
        lines.append(
            f"bytes moved a step per device: {report['hbm_traffic_per_device'] / 1e9:.3f} GB in "
            "HBM (its operations' operands and results, loops unrolled)"
            + (
                f"; the compiler counts {counted / 1e9:.2f} GB accessed, on-chip memory included"
                if counted
                else ""
            )
        )
    if report["estimated_step_seconds"]:
        lines.append(
            f"estimate ({report['estimate_from']}, not a measurement): "
            f"{report['estimated_step_seconds'] * 1e3:.1f} ms a step, "
            f"{report['estimated_token_slots_per_second']:,.0f} token slots/s"
            + (f", MFU {report['estimated_mfu']:.0%}" if report["estimated_mfu"] else "")
            + (
                f"; with compute and memory traffic not overlapped "
                f"{report['estimated_step_seconds_no_overlap'] * 1e3:.1f} ms, MFU "
                f"{report['estimated_mfu_no_overlap']:.0%}"
                if report.get("estimated_mfu_no_overlap")
                else ""
            )
        )
    else:
        lines.append("estimate: the compiler gave no time estimate for this program")
    if "decode" in report:
        d = report["decode"]
        lines.append(
            f"decoding ({d['program']}), one device: {d['bytes_per_device'] / GIB:.2f} GiB, "
            f"{'fits' if d['fits'] else 'DOES NOT FIT'}"
        )
    if "find_batch" in report:
        found = report["find_batch"]
        off, on = found["remat_off"], found["remat_on"]
        lines.append(
            f"largest batch that fits: {off['rows']} rows without remat, {on['rows']} with "
            f"(steps of {off['row_multiple']} rows); "
            + (
                "remat lets a larger batch fit"
                if found["remat_fits_more"]
                else "remat does not help"
            )
        )
    lines.append(f"compiled in {report.get('compile_seconds', 0):.1f} s")
    return "\n".join(lines)


def _flops_ratio(report: dict[str, Any]) -> float | None:
    model, compiler = report["model_flops_per_step"], report["compiler_flops_per_step"]
    return compiler / model if model and compiler else None
