#!/usr/bin/env bash
# One device call made of named, time-boxed stages; each stage's log goes to $OUT/<stage>.log and its last line(s)
# to the summary printed at the end. Usage: bash tests/device/stages.sh STAGE [STAGE ...]
# Stages: apply import build build80 gpu gpu80 slow percall sweep bench bench80 benchpool benchpool_nc benchconv profile profilepool f64 variants staged ab ncu sanitize saveab wgmma
#   apply: applies PATCH (a prepared change under tests/dev/edits/) to this copy of the tree first; stages after it run on the patched code
#   import: kgen generate, then a cold and a warm import of a generated module (tests/device/import_timing.py)
#   build / build80: every GPU-test extension (FAMILY: one family's; BUILD_MATCH: only its cases whose id has one of these words), 16 jobs (Hopper path / KGEN_FORCE_SM80=1, each with its own cache)
#   gpu / gpu80: the GPU tier on that path (GPU_K: a pytest -k expression; note "pool" also matches the
#     conv2d_avgpool_act_reduce family: the pool family alone is GPU_K="pool and not conv2d"); slow: the full-size tests
#   percall: tests/device/per_call.py (PERCALL_FAMILY: one family; PERCALL_MATCH: only case ids holding one of these words); sweep: SWEEP_N (60) random problems of FAMILY (pool); bench / bench80: the bundled problems
#     (bench: TF32 off, then the conv one again with TF32 allowed)
#   benchpool (benchpool_nc: without torch.compile): tests/bench/bench_pool.py --quick (POOL_ONLY: names)
#   benchconv: tests/bench/bench_conv2d_epilogue.py --quick, TF32 off and allowed (BENCH_MODE: off|tf32|both; BENCH_ONLY: names; BENCH_ARGS, both bench stages: e.g. --per-call); both bench
#     stages build their problems first, BENCH_JOBS (8) at a time
#   profile: tests/dev/profile_conv.py per kernel, TF32 off and allowed (PROFILE_ONLY: names, default two; PROFILE_ARGS: e.g. --blocks)
#   f64: tests/dev/f64_check.py (F64_ONLY: problem files; default tests/dev/cases/*.py)
#   variants: tests/dev/pool_variants.py (VARIANT_ONLY: problem names, VARIANTS: variant labels, VARIANT_ARGS: e.g. "--compile --per-call")
#   profilepool: tests/dev/profile_pool.py per kernel (PROFILE_ONLY: bench_pool names, default three max pools)
#   staged: tests/dev/pool3d_staged.py, the staged separable 3-d max-pool forward against kgen's (docs/notes/pool_plan.md)
#   ab: tests/dev/time_generated.py on AB_PROBLEM with AB_MODULES ("LABEL=path/model_new.py ..."), in AB_MODES (default
#     "off tf32"), with AB_ARGS (e.g. --compile); logs ab${AB_TAG}_<mode>.log
#   saveab: tests/dev/save_policy_ab.py --tf32 (conv2d_epilogue's save policies at issue 9's sizes)
#   sanitize: tests/device/sanitize.sh (compute-sanitizer memcheck, racecheck, initcheck; tests/device/sanitize_run.py's selection)
#   ncu: tests/dev/ncu_step.py $NCU_ARGS (e.g. "conv conv3x3_hardswish_maxpool_mish --tf32")
#   wgmma: tests/dev/wgmma_tile.py $WGMMA_ARGS (the wgmma vs mma.sync TF32 GEMM harness, sm_90 only; e.g. "--mw 1 --wg 2")
# Build first in the same call (or on the same warm machine): the GPU tests then load from the cache. A machine
# starts bare and goes back 30 s after a call, so every call rebuilds. Measured on an H200 (16 jobs): FAMILY=pool
# builds in ~110 s, FAMILY=conv2d_epilogue in over 130 s (its 38 extensions); a GPU stage whose builds are not done
# spends its time box building. Fit one family's build + gpu (+ sweep) in one 10-minute call, or, on a 4-GPU machine
# (64 cores), run several of these lanes at once after one build: tests/device/lanes.sh.
# Environment: KGEN_CACHE_DIR per path (sm90 / sm80), KGEN_TEST_GEN_DIR shared.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KGEN_TEST_GEN_DIR=/tmp/kgen_test_gen
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u; } | tee -a "$SUMMARY"
path() {  # sm90 | sm80
  export KGEN_CACHE_DIR=/tmp/kgen_cache_$1 KGEN_FORCE_SM80=$([ "$1" = sm80 ] && echo 1 || echo 0)
}
run() {  # name seconds command...
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  { echo "[$name rc=$rc $(( $(date +%s) - t0 )) s] $(tail -1 "$OUT/$name.log")"
    grep -E "^(FAILED|ERROR|GPU FAIL|BUILD FAIL|RENDER FAIL)| FAILED|cases where" "$OUT/$name.log" | head -20; } | tee -a "$SUMMARY"
}
build() {  # log-name path
  path "$2"; run "$1" ${BUILD_SECS:-260} python3 tests/device/prebuild.py 16 ${FAMILY:-} ${BUILD_MATCH:-}
}
tier() {  # log-name path: the GPU tier except multi-GPU and full-size tests (GPU_K: a pytest -k expression; GPU_FILES: test files, default tests/)
  path "$2"; run "$1" "${GPU_SECS:-330}" python3 -m pytest -v --durations=25 -m "gpu and not multigpu and not slow" \
    ${GPU_K:+-k "$GPU_K"} -p no:cacheprovider ${GPU_FILES:-tests/}
}
BUNDLED="kgen/problems/avg_pool2d.py kgen/problems/conv2d_avgpool_sigmoid_sum.py"
for stage in "$@"; do
  case $stage in
    apply) run apply 30 bash -c "git apply '$PATCH' 2>/dev/null || patch -p1 --forward < '$PATCH'" ;;
    import) run generate 120 python3 -m kgen generate --out /tmp/gen_check
            run import 200 python3 tests/device/import_timing.py /tmp/gen_check/avg_pool2d/model_new.py /tmp/kgen_cold_cache ;;
    build) build build sm90 ;;
    build80) build build80 sm80 ;;
    gpu) tier gpu sm90 ;;
    gpu80) tier gpu80 sm80 ;;
    slow) path sm90; run slow 300 python3 -m pytest -q -m "gpu and slow and not multigpu" -p no:cacheprovider tests/ ;;
    percall) path sm90; run percall ${PERCALL_SECS:-200} python3 tests/device/per_call.py --csv "$OUT/per_call.csv" ${PERCALL_FAMILY:+--family $PERCALL_FAMILY} ${PERCALL_MATCH:+--match $PERCALL_MATCH} ;;
    sweep) path sm90; run sweep ${SWEEP_SECS:-330} python3 tests/dev/sweep.py --gpu --n ${SWEEP_N:-60} --family ${FAMILY:-pool} --seed ${SWEEP_SEED:-7} --jobs ${SWEEP_JOBS:-12} ;;
    bench) path sm90; for p in $BUNDLED; do run "bench_$(basename $p .py)" 150 python3 -m kgen bench "$p" --per-call --csv "$OUT/bench.csv"; done
           run bench_conv_tf32 150 python3 -m kgen bench kgen/problems/conv2d_avgpool_sigmoid_sum.py --per-call --tf32 --csv "$OUT/bench.csv" ;;
    bench80) path sm80; for p in $BUNDLED; do run "bench80_$(basename $p .py)" 90 python3 -m kgen bench "$p" --no-compile --per-call --csv "$OUT/bench.csv"; done ;;
    benchpool) path sm90; run benchpool ${BENCHPOOL_SECS:-420} python3 tests/bench/bench_pool.py --quick --prebuild ${BENCH_JOBS:-8} --csv "$OUT/bench.csv" ${BENCH_ARGS:-} ${POOL_ONLY:+--only $POOL_ONLY} ;;
    benchconv) path sm90; run benchconv ${BENCH_SECS:-420} python3 tests/bench/bench_conv2d_epilogue.py --quick --prebuild ${BENCH_JOBS:-8} --csv "$OUT/bench.csv" --mode ${BENCH_MODE:-both} ${BENCH_ARGS:-} ${BENCH_ONLY:+--only $BENCH_ONLY} ;;
    benchpool_nc) path sm90; run benchpool 240 python3 tests/bench/bench_pool.py --quick --no-compile --prebuild ${BENCH_JOBS:-8} --csv "$OUT/bench.csv" ${POOL_ONLY:+--only $POOL_ONLY} ;;
    f64) path sm90; run f64 ${F64_SECS:-200} python3 tests/dev/f64_check.py ${F64_ONLY:-tests/dev/cases/*.py} ;;
    profilepool) path sm90; run profilepool 200 python3 tests/dev/profile_pool.py ${PROFILE_ONLY:-maxpool2d_k3s2p1_fp16 maxpool2d_k3s2p1 maxpool3d_k3s2p1} ;;
    ab) path sm90; for t in ${AB_MODES:-off tf32}; do
          run "ab${AB_TAG:-}_$t" ${AB_SECS:-200} python3 tests/dev/time_generated.py $AB_PROBLEM $AB_MODULES ${AB_ARGS:-} \
            $([ "$t" = tf32 ] && echo --tf32); done ;;
    ncu) path sm90; run ncu ${NCU_SECS:-200} python3 tests/dev/ncu_step.py $NCU_ARGS ;;
    wgmma) path sm90; run wgmma ${WGMMA_SECS:-200} python3 tests/dev/wgmma_tile.py ${WGMMA_ARGS:-} ;;
    saveab) path sm90; run saveab ${SAVEAB_SECS:-240} python3 tests/dev/save_policy_ab.py --tf32 ;;
    sanitize) path sm90; run sanitize ${SANITIZE_SECS:-400} bash tests/device/sanitize.sh ;;
    staged) path sm90; run staged ${STAGED_SECS:-240} python3 tests/dev/pool3d_staged.py --tdo 2 --tho 2 4 ;;
    variants) path sm90; run variants ${VARIANT_SECS:-400} python3 tests/dev/pool_variants.py ${VARIANT_ONLY:+--only $VARIANT_ONLY} ${VARIANTS:+--variants $VARIANTS} ${VARIANT_ARGS:-} ;;
    profile) path sm90; for t in "" --tf32; do run "profile$t" 240 python3 tests/dev/profile_conv.py $t ${PROFILE_ARGS:-} ${PROFILE_ONLY:-conv3x3_relu_bias conv3x3_hardswish_maxpool_mish}; done ;;
    *) echo "unknown stage $stage" | tee -a "$SUMMARY" ;;
  esac
done
