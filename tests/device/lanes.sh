#!/usr/bin/env bash
# Run several stages.sh commands at once on a multi-GPU machine, one lane per GPU, after one build of every family
# with all cores (a 4-GPU machine has 64: the build that takes a 16-core machine minutes takes it about one round).
# Usage: bash tests/device/lanes.sh 'ENV=... stages...' ['ENV=... stages...' ...]
#   Each argument is a lane: environment assignments (all of them first) and then stages.sh stages, run with
#   CUDA_VISIBLE_DEVICES=<its index> and its own log folder. BUILD_JOBS (default: nproc) sets the build's parallelism,
#   BUILD_FAMILY limits it to one family's GPU-test extensions (tests/device/prebuild.py), MULTIGPU=1 runs the multigpu
#   tests (all GPUs visible) after the lanes. Logs come back as $OUT/logs.tgz; the summary lines print at the end.
# Example (4 GPUs): bash tests/device/lanes.sh 'GPU_K="pool and not conv2d" gpu' 'FAMILY=pool sweep' ...
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen KGEN_CACHE_DIR=/tmp/kgen_cache_sm90
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader; nproc
t0=$(date +%s)
timeout ${BUILD_SECS:-240} python3 tests/device/prebuild.py ${BUILD_JOBS:-$(nproc)} ${BUILD_FAMILY:-} > "$OUT/logs/build.log" 2>&1
echo "[build rc=$? $(( $(date +%s) - t0 )) s] $(tail -1 "$OUT/logs/build.log")"; grep -A3 "rc=[1-9]" "$OUT/logs/build.log" | head -20
i=0
for lane in "$@"; do
  dir="$OUT/logs/lane$i"; mkdir -p "$dir"
  ( export CUDA_VISIBLE_DEVICES=$i OUT="$dir"
    eval "set -- $lane"; envs=(); while [ $# -gt 0 ] && [[ $1 == *=* ]]; do envs+=("$1"); shift; done
    env "${envs[@]}" bash tests/device/stages.sh "$@" > "$dir/stages.out" 2>&1 ) &
  i=$((i + 1))
done
wait
if [ "${MULTIGPU:-0}" = 1 ]; then
  timeout ${MULTIGPU_SECS:-150} python3 -m pytest -v -m multigpu -p no:cacheprovider tests/ > "$OUT/logs/multigpu.log" 2>&1
  echo "[multigpu rc=$?] $(tail -1 "$OUT/logs/multigpu.log")"
fi
for d in "$OUT"/logs/lane*; do echo "== $(basename "$d")"; grep -v "^$" "$d/summary.txt" 2>/dev/null | tail -n +4; done
echo "total $(( $(date +%s) - t0 )) s"
tar -C "$OUT" -czf "$OUT/logs.tgz" logs && rm -rf "$OUT/logs"
