#!/usr/bin/env bash
# One device call: build, GPU tests, import timings, benchmarks. Usage: bash tests/device/gpu_check.sh [pytest -k expr] [bench problems...]
# Writes logs under $OUT (the device tool brings them back); prints a short summary last.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen_cache} KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
K=${1:-}; shift || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
python3 -m kgen generate --out /tmp/gen_check > "$OUT/generate.log" 2>&1 || { cat "$OUT/generate.log"; exit 1; }
python3 tests/device/import_timing.py /tmp/gen_check/avg_pool2d/model_new.py /tmp/kgen_cold_cache 2>&1 | tee "$OUT/import_timing.log"
python3 tests/device/prebuild.py 12 > "$OUT/prebuild.log" 2>&1; tail -1 "$OUT/prebuild.log"
python3 -m pytest -q -m gpu ${K:+-k "$K"} tests/ -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1; tail -25 "$OUT/pytest_gpu.log"
for p in "$@"; do
  python3 -m kgen bench "$p" --csv "$OUT/bench.csv" 2>&1 | tee -a "$OUT/bench.log" | tail -9
done
