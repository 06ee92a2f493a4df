#!/usr/bin/env bash
# The GPU benchmark, prepared for one H200 (runs on any single CUDA GPU): the base model
# (512/8/2048, 6+6 layers, 32k vocabulary) in bfloat16 at configs/base.py's batch of 96
# rows x 256 tokens. One table: step time, target tokens/s, MFU against the bfloat16
# matmul rate measured in the same run, XLA attention vs jax.nn.dot_product_attention,
# remat, scanned and unscanned layer stacks (first step = compilation), peak device
# memory; then beam-search sentences/s. About 6-9 minutes (10 at most).
#
#   bash benchmarks/gpu.sh                 # writes the table to $OUT/gpu_benchmark.md too
#
# Needs jax with CUDA (pip install -U "jax[cuda12]") in the active Python.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each row is its own process; without preallocation each takes only what it uses, and
# the peak-memory column is the step's own.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT="${OUT:-/tmp}"
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if ! python -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')"; then
  echo "error: JAX sees no GPU here ($(python -c 'import jax; print(jax.devices())' 2>&1 | tail -1));"
  echo "       install jax with CUDA (pip install -U \"jax[cuda12]\") and run again"
  exit 2
fi
python -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"

timeout 600 python benchmarks/accelerator.py \
  --shapes base_full --dtype bfloat16 --steps 10 --repeats 5 --beam-sentences 1024 \
  | tee "$OUT/gpu_benchmark.md"
