"""The table of docs/accelerators.md: shipped configs compiled for TPU slices and GPU
machines with ``python -m jaxtrans.compile`` (libtpu's or the CUDA plugin's compile-only
devices; no TPU or GPU needed), each row in its own process, printed as Markdown.

    python benchmarks/compile_table.py                       # every row of ROWS
    python benchmarks/compile_table.py --rows base/v5e-8 big/v5e-32-fsdp --find_batch
    python benchmarks/compile_table.py --rows base/h100-8 base/h100-8x2

A row is CONFIG/TOPOLOGY[-VARIANT] (TOPOLOGY: v5e-8, h100-8, h100-8x2, ...); its extra
overrides are in ROWS. ``--find_batch`` adds the largest batch that fits with remat off
and on (many compiles a row). Figures marked "estimate" are not measurements: the
compiler's cost model (TPU), or a roofline of the model FLOPs and the compiled program's
bytes (GPU: the report's estimate_from says which).
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 2**30
SLICES = ("v5e-8", "v4-8", "v5p-8", "v6e-8")
ROWS = {f"{config}/{slice_}": [] for config in ("demo", "base", "big") for slice_ in SLICES}
# A pod slice of 32 chips on 8 hosts: parameters and optimizer state sharded over fsdp.
ROWS["big/v5e-32-fsdp"] = ["--config.mesh.data=8", "--config.mesh.fsdp=4"]
# notebooks/colab_tpu.ipynb on Colab's TPU runtime (one v5e chip): base as it is (96 rows
# from its tokens_per_batch, bfloat16).
ROWS["base/v5e-1-colab"] = ["--config.mesh.data=-1"]
# The big-slice case: base's 24,576 tokens a step rounded up to 128 rows for 64 chips.
ROWS["base/v5p-128"] = []
# One host of eight H100s, and two such hosts (jax's CUDA plugin, the gpu-compile extra).
GPU_MACHINES = ("h100-8", "h100-8x2")
ROWS.update(
    {f"{config}/{machine}": [] for config in ("demo", "base", "big") for machine in GPU_MACHINES}
)


def command(row: str, find_batch: bool) -> list[str]:
    config, slice_ = row.split("/")
    topology = "-".join(slice_.split("-")[:2])
    return [
        sys.executable,
        "-m",
        "jaxtrans.compile",
        "--config",
        f"configs/{config}.py",
        "--topology",
        topology,
        "--json",
        *ROWS[row],
        *(["--find_batch"] if find_batch else []),
    ]


def compile_row(row: str, find_batch: bool) -> dict:
    start = time.perf_counter()
    result = subprocess.run(command(row, find_batch), capture_output=True, text=True, cwd=REPO)
    if result.returncode:
        return {"error": (result.stderr.strip().splitlines() or ["?"])[-1]}
    report = json.loads(result.stdout)
    report["wall_seconds"] = time.perf_counter() - start
    return report


def markdown_row(row: str, report: dict) -> str:
    shown = " ".join(command(row, False)[3:]).replace(" --json", "")
    if "error" in report:
        return f"| `{row}` | error: {report['error']} | | | | | | | | `{shown}` |"
    total = report["bytes_per_device"]["total"]
    fits = "fits" if report["fits"] else "**does not fit**"
    seconds = report["estimated_step_seconds"]
    mfu = report["estimated_mfu"]
    serial, serial_mfu = (
        report.get("estimated_step_seconds_no_overlap"),
        report.get("estimated_mfu_no_overlap"),
    )
    hbm = report.get("hbm_traffic_per_device")
    found = report.get("find_batch")
    batch = (
        f"{found['remat_off']['rows']} / {found['remat_on']['rows']}" if found else "not searched"
    )
    return (
        f"| `{row}` | {report['rows_per_step']} rows: {fits} | {total / GIB:.2f} of "
        f"{report['hbm_bytes_per_device'] / GIB:.0f} GiB | {batch} | "
        + (f"{hbm / 1e9:.2f} GB" if hbm and hbm >= 1e8 else f"{hbm / 1e6:.1f} MB" if hbm else "-")
        + " | "
        + (f"{seconds * 1e3:.1f}" if seconds else "no estimate")
        + (f"-{serial * 1e3:.1f}" if serial and seconds else "")
        + (" ms" if seconds else "")
        + " | "
        + (f"{serial_mfu:.0%}-" if serial_mfu and mfu else "")
        + (f"{mfu:.0%}" if mfu else "-")
        + f" | {', '.join(report.get('custom_calls', [])) or '-'}"
        + f" | {report['wall_seconds']:.0f} s | `{shown}` |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--find_batch", action="store_true")
    args = parser.parse_args()
    print(
        "| config / slice | at the config's batch | peak HBM per device | largest batch "
        "(rows, remat off / on) | HBM traffic a step | step time (estimate: overlapped - "
        "not) | MFU (estimate: not overlapped - overlapped) | custom calls | compile time | "
        "command |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in args.rows:
        print(markdown_row(row, compile_row(row, args.find_batch)), flush=True)


if __name__ == "__main__":
    main()
