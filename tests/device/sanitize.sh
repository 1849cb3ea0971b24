#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and initcheck over every generated kernel (kgen_* only), forward and backward.
set -u
export PYTHONPATH=$PWD KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen_cache} PYTORCH_NO_CUDA_MEMORY_CACHING=1
python3 tests/device/sanitize_run.py > /dev/null 2>&1  # build outside the sanitizer
for tool in memcheck racecheck initcheck; do
  compute-sanitizer --tool $tool --kernel-name kns=kgen_ --print-limit 20 python3 tests/device/sanitize_run.py 2>&1 \
    | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize |Error|error" | sed "s/^/[$tool] /"
done
