#!/usr/bin/env bash
# The GPU benchmark, for a machine installed per the README's GPU row
# (pip install -c constraints.txt -e ".[cuda12]"; no torch needed): the training loop's
# own step (mesh, logical-axis rules, non-finite guard, donated state) of configs/base.py
# on packed batches from the training pipeline, as shipped and with one change a row
# (bfloat16 / float32, xla / auto kernels, dropout, remat, scanned layers, one pair a row):
# step time, target tokens/s, MFU against the bfloat16 matmul rate measured in the same
# run and the vendor peak, peak memory, first step (compilation), the kernel of each
# attention; then beam-search sentences/s (benchmarks/accelerator.py). Each row is its
# own process under its own timeout (--row-timeout, 900 s) and is printed as it finishes;
# a row that runs out of time says so and the next starts. Then, only where torch
# imports, the PyTorch peer's row (benchmarks/torch_peer.py).
#
#   bash benchmarks/gpu.sh                       # also writes $OUT/gpu_benchmark.md
#   bash benchmarks/gpu.sh --rows 1,3 --set data.batch_size=192
#   bash benchmarks/gpu.sh --dry                 # the same, a tiny model on the CPU (CI)
#
# Options go to accelerator.py (python benchmarks/accelerator.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each row is its own process; without preallocation each takes only what it uses, and
# the peak-memory column is the step's own.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python}"
OUT="${OUT:-/tmp}"
mkdir -p "$OUT"
TABLE="$OUT/gpu_benchmark.md"

dry=false
for arg in "$@"; do
  if [[ "$arg" == "--dry" ]]; then dry=true; fi
done

if $dry; then
  export JAX_PLATFORMS=cpu
  echo "dry run: a tiny model on the CPU (the GPU run's rows and steps, not its timings)"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  if ! "$PYTHON" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
    echo "error: JAX sees no GPU here ($("$PYTHON" -c 'import jax; print(jax.devices())' 2>&1 | tail -1));"
    echo "       install jaxtrans with JAX's CUDA build: pip install -c constraints.txt -e \".[cuda12]\""
    exit 2
  fi
fi

"$PYTHON" benchmarks/accelerator.py "$@" | tee "$TABLE"

# The PyTorch peer: a separate step, only where torch imports (the README's GPU install
# has no torch; jaxtrans's rows above never import it).
if "$PYTHON" -c "import torch" >/dev/null 2>&1; then
  echo
  echo "PyTorch peer (same shapes and batches, one pair a row; compare with the data.pack=False row):"
  if ! timeout "${PEER_TIMEOUT:-900}" "$PYTHON" benchmarks/torch_peer.py "$@" | tee -a "$TABLE"; then
    echo "PyTorch peer: failed (the jaxtrans table above stands)" | tee -a "$TABLE"
  fi
else
  echo
  echo "PyTorch peer: skipped (torch does not import here)" | tee -a "$TABLE"
fi
