#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and initcheck over every generated kernel, forward and backward.
# memcheck/racecheck instrument kgen_* kernels only; initcheck must track every kernel (torch's writes initialize
# our inputs), so it runs unfiltered and we count the reports whose device frames are in kgen code.
set -u
export PYTHONPATH=$PWD KGEN_CACHE_DIR=${KGEN_CACHE_DIR:-/tmp/kgen_cache} PYTORCH_NO_CUDA_MEMORY_CACHING=1
OUT=${OUT:-/tmp}
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
[ -n "$SAN" ] || { echo "compute-sanitizer not found (PATH, /usr/local/cuda*/bin): install the CUDA toolkit's sanitizer"; exit 2; }
echo "sanitizer: $SAN"
python3 tests/device/sanitize_run.py > /dev/null 2>&1  # build outside the sanitizer
for tool in memcheck racecheck; do
  "$SAN" --tool $tool --kernel-name kns=kgen_ --print-limit 20 python3 tests/device/sanitize_run.py 2>&1 \
    | tee "$OUT/sanitize_$tool.txt" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|sanitize " | sed "s/^/[$tool] /"
done
"$SAN" --tool initcheck --print-limit 100000 python3 tests/device/sanitize_run.py > "$OUT/sanitize_initcheck.txt" 2>&1
python3 - "$OUT/sanitize_initcheck.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
reports = re.split(r"(?m)^========= (?=\S)", text)
errors = [r for r in reports if r.startswith(("Uninitialized", "Invalid"))]
ours = [r for r in errors if "kgen_" in r]
print(f"[initcheck] {len(errors)} reports in all kernels, {len(ours)} in kgen kernels")
for r in ours[:3]:
    print("[initcheck]", r[:600])
print("[initcheck]", "; ".join(l for l in text.splitlines() if "sanitize " in l or "ERROR SUMMARY" in l))
PY
