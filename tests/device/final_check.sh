#!/usr/bin/env bash
# The closing device call when device time is short: build every registered family's test extensions (Hopper
# path), run the GPU tier except the multi-GPU and full-size tests, the conv family's numerics on the sm_80 path,
# the per-call table and the bundled problems' benchmark. Logs under $OUT; a summary last.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch; print('torch', torch.__version__)"
export KGEN_CACHE_DIR=/tmp/kgen_cache_sm90 KGEN_FORCE_SM80=0
python3 tests/device/prebuild.py 16 > "$OUT/prebuild.log" 2>&1; echo "[sm90] $(tail -1 "$OUT/prebuild.log")"
timeout 240 python3 -m pytest -q -m "gpu and not multigpu and not slow" -p no:cacheprovider ${PYTEST_ARGS:-tests/} > "$OUT/pytest_sm90.log" 2>&1
echo "[sm90] $(tail -1 "$OUT/pytest_sm90.log")"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_sm90.log" | head -15
export KGEN_CACHE_DIR=/tmp/kgen_cache_sm80 KGEN_FORCE_SM80=1
python3 tests/device/prebuild.py 16 conv2d_avgpool_act_reduce > "$OUT/prebuild80.log" 2>&1; echo "[sm80] $(tail -1 "$OUT/prebuild80.log")"
timeout 90 python3 -m pytest -q -m "gpu and not multigpu and not slow" -p no:cacheprovider tests/test_numerics.py tests/test_conv2d_avgpool_act_reduce.py -k conv2d > "$OUT/pytest_sm80.log" 2>&1
echo "[sm80] $(tail -1 "$OUT/pytest_sm80.log")"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_sm80.log" | head -10
export KGEN_CACHE_DIR=/tmp/kgen_cache_sm90 KGEN_FORCE_SM80=0
timeout 120 python3 tests/device/per_call.py --family pool --csv "$OUT/per_call.csv" > "$OUT/per_call.log" 2>&1; tail -2 "$OUT/per_call.log"
for p in kgen/problems/*.py; do
  [ "$(basename $p)" = __init__.py ] && continue
  timeout 150 python3 -m kgen bench "$p" --per-call --csv "$OUT/bench.csv" 2>&1 | tail -7
done
