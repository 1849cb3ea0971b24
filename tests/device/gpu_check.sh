#!/usr/bin/env bash
# One device call: build, GPU tests on both kernel paths, import timings, per-call table, benchmarks.
# Usage: bash tests/device/gpu_check.sh [pytest -k expr] [bench problems...]
# Writes logs under $OUT (the device tool brings them back); prints a short summary last.
# KGEN_FORCE_SM80=1 (the sm_80 path on a Hopper GPU) gets its own cache and its own extensions.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
K=${1:-}; shift || true
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
python3 -m kgen generate --out /tmp/gen_check > "$OUT/generate.log" 2>&1 || { cat "$OUT/generate.log"; exit 1; }
python3 tests/device/import_timing.py /tmp/gen_check/avg_pool2d/model_new.py /tmp/kgen_cold_cache 2>&1 | tee "$OUT/import_timing.log"
for path in sm90 sm80; do
  export KGEN_CACHE_DIR=/tmp/kgen_cache_$path KGEN_FORCE_SM80=$([ $path = sm80 ] && echo 1 || echo 0)
  python3 tests/device/prebuild.py 14 > "$OUT/prebuild_$path.log" 2>&1; echo "[$path] $(tail -1 "$OUT/prebuild_$path.log")"
  python3 -m pytest -q -m "gpu and not multigpu" ${K:+-k "$K"} tests/ -p no:cacheprovider > "$OUT/pytest_gpu_$path.log" 2>&1
  echo "[$path] $(tail -1 "$OUT/pytest_gpu_$path.log")"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_$path.log" | head -20
done
export KGEN_CACHE_DIR=/tmp/kgen_cache_sm90 KGEN_FORCE_SM80=0
python3 tests/device/per_call.py --csv "$OUT/per_call.csv" > "$OUT/per_call.log" 2>&1; tail -3 "$OUT/per_call.log"
for p in "$@"; do
  python3 -m kgen bench "$p" --per-call --csv "$OUT/bench.csv" 2>&1 | tee -a "$OUT/bench.log" | tail -9
done
