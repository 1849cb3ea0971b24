#!/usr/bin/env bash
# The closing device call when device time is short: build every registered family's test extensions (Hopper
# path), run the GPU tier except the multi-GPU and full-size tests, the bundled problems' benchmark (no
# torch.compile) and the pool family's per-call table, each stage under a time limit. Logs under $OUT.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen KGEN_CACHE_DIR=/tmp/kgen_cache_sm90
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader; python3 -c "import torch; print('torch', torch.__version__)"
timeout 150 python3 tests/device/prebuild.py 16 > "$OUT/prebuild.log" 2>&1; echo "[build] $(tail -1 "$OUT/prebuild.log")"
timeout 200 python3 -m pytest -q -m "gpu and not multigpu and not slow" -p no:cacheprovider ${PYTEST_ARGS:-tests/} > "$OUT/pytest.log" 2>&1
echo "[pytest] $(tail -1 "$OUT/pytest.log")"; grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -15
for p in kgen/problems/avg_pool2d.py kgen/problems/conv2d_avgpool_sigmoid_sum.py; do
  timeout 60 python3 -m kgen bench "$p" --no-compile --per-call --reps 10 --csv "$OUT/bench.csv" 2>&1 | tail -6
done
timeout 80 python3 tests/device/per_call.py --family pool > "$OUT/per_call.log" 2>&1; tail -4 "$OUT/per_call.log"
