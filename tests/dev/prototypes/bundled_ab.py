"""A/B of the bundled step's stored design (tests/dev/prototypes/bundled_stored.cuh) against the shipped kernels, as one
standalone CUDA program (no torch at run time): renders the bundled conv problem, inserts the prototype kernels
before the kernel's host section, appends a host harness, compiles it with nvcc and (unless --compile-only) runs it.

The harness fills x, W, b and a per-image output gradient with random values, then per mode (3xTF32, then TF32):
- shipped: <name>_forward and <name>_backward (the recompute design);
- stored: fwd_train_kernel (forward sum, act'(pre) to global, unit grad_w / grad_b partials per block),
  bwd_stored_kernel (dpre = g * r * s, GEMM3, gather) and wb_unit_reduce_kernel;
prints the largest |a - b| / (1 + |b|) of the output, grad_x, grad_w and grad_b (stored against shipped) and the
milliseconds of each path's forward, backward and both (CUDA events, median of --reps). Expect 3xTF32 to agree to
float32 rounding (the sums run in another order); with TF32 the designs round different operands of the weight
gradient to TF32 (g * act'(pre) in the shipped backward, act'(pre) in the stored one, scaled by g after), so grad_w
and grad_b may differ by about 1e-3 relative there, and grad_x where dpre's rounding differs.

Usage (GPU): python tests/dev/prototypes/bundled_ab.py [--batch 128] [--reps 20] [--arch 90a] [--compile-only]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

HOST = r"""
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(e) do { cudaError_t err_ = (e); if (err_ != cudaSuccess) { std::printf("CUDA error %s at line %d\n", cudaGetErrorString(err_), __LINE__); std::exit(1); } } while (0)

__global__ void ab_fill(float* p, long long n, unsigned seed, float lo, float hi) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    p[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
  }
}

static float* ab_alloc(long long n) { float* p = nullptr; CK(cudaMalloc(&p, (size_t)(n > 0 ? n : 1) * sizeof(float))); return p; }
static std::vector<float> ab_host(const float* d, long long n) {
  std::vector<float> h((size_t)n); CK(cudaMemcpy(h.data(), d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost)); return h;
}
static double ab_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0.0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs((double)a[i] - (double)b[i]) / (1.0 + std::abs((double)b[i])));
  return e;
}
template <class F> static float ab_time(F f, int reps) {
  cudaEvent_t s, e; CK(cudaEventCreate(&s)); CK(cudaEventCreate(&e));
  f(); CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) { CK(cudaEventRecord(s)); f(); CK(cudaEventRecord(e)); CK(cudaEventSynchronize(e));
    float ms = 0.0f; CK(cudaEventElapsedTime(&ms, s, e)); t.push_back(ms); }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  using namespace NS;
  const long long n = argc > 1 ? std::atoll(argv[1]) : 128;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const long long nx = n * CI * (long long)H * W, nwt = (long long)CO * KTOT, nsg = n * CO * (long long)PHO * PWO;
  int dev = 0, sms = 0; CK(cudaGetDevice(&dev)); CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  float *x = ab_alloc(nx), *w = ab_alloc(nwt), *b = ab_alloc(CO), *gout = ab_alloc(n);
  ab_fill<<<1024, 256>>>(x, nx, 1u, 0.0f, 1.0f);
  ab_fill<<<64, 256>>>(w, nwt, 2u, -0.12f, 0.12f);
  ab_fill<<<1, 256>>>(b, CO, 3u, -0.12f, 0.12f);
  ab_fill<<<1, 256>>>(gout, n, 4u, 0.5f, 1.5f);
  float *out_r = ab_alloc(n), *gx_r = ab_alloc(nx), *gw_r = ab_alloc(nwt), *gb_r = ab_alloc(CO);
  float *gx_s = ab_alloc(nx), *gw_s = ab_alloc(nwt), *gb_s = ab_alloc(CO), *sg = ab_alloc(nsg);
  const int cl = FT_TILES < 4 ? FT_TILES : 4;
  const long long fblocks = n * cl;
  float *fpart = ab_alloc(fblocks), *part = ab_alloc(fblocks * PART);
  std::printf("bundled stored-design A/B: n %lld, %d SMs, forward tiles %d (%d x %d) a block set of %d, backward tiles %d\n",
              n, sms, FT_TILES, FT_TPH, FT_TPW, cl, B_TILES);
  for (int tf32 = 0; tf32 < 2; ++tf32) {
    size_t fb = 0, bb = 0;
    CK(NAMEC_workspace_bytes(n, 0, tf32, &fb)); CK(NAMEC_workspace_bytes(n, 1, tf32, &bb));
    void* ws = nullptr; CK(cudaMalloc(&ws, std::max(fb, bb) + 256));
    auto ship_f = [&] { CK(NAMEC_forward(x, w, b, out_r, ws, n, tf32, 0)); };
    auto ship_b = [&] { CK(NAMEC_backward(gout, x, w, b, gx_r, gw_r, gb_r, ws, n, tf32, 0)); };
    const auto ftrain = tf32 ? fwd_train_kernel<false> : fwd_train_kernel<true>;
    const auto bstored = tf32 ? bwd_stored_kernel<false> : bwd_stored_kernel<true>;
    CK(cudaFuncSetAttribute(ftrain, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FT_SMEM));
    CK(cudaFuncSetAttribute(bstored, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)B_SMEM));
    int per_sm = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bstored, NT, B_SMEM));
    int fper_sm = 0; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fper_sm, ftrain, NT, FT_SMEM));
    const long long tiles = n * B_TILES, G = std::min(tiles, (long long)sms * std::max(per_sm, 1));
    auto new_f = [&] { ftrain<<<(unsigned)fblocks, NT, FT_SMEM>>>(x, w, b, nullptr, fpart, sg, part, cl); CK(cudaGetLastError()); };
    auto new_b = [&] {
      bstored<<<(unsigned)G, NT, B_SMEM>>>(gout, sg, w, gx_s, tiles, (int)G); CK(cudaGetLastError());
      wb_unit_reduce_kernel<<<(PART + 255) / 256, 256>>>(part, gout, (int)fblocks, cl, gw_s, gb_s); CK(cudaGetLastError());
    };
    ship_f(); ship_b(); new_f(); new_b(); CK(cudaDeviceSynchronize());
    const std::vector<float> fp = ab_host(fpart, fblocks);
    std::vector<float> out_s((size_t)n);
    for (long long i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int r = 0; r < cl; ++r) s += fp[(size_t)(i * cl + r)];
      out_s[(size_t)i] = MEAN ? s / (float)COUNT : s;
    }
    std::printf("%s: CTAs an SM: training forward %d, stored backward %d\n", tf32 ? "TF32" : "3xTF32", fper_sm, per_sm);
    std::printf("  stored vs shipped, max |a-b|/(1+|b|): out %.3e  grad_x %.3e  grad_w %.3e  grad_b %.3e\n",
                ab_err(out_s, ab_host(out_r, n)), ab_err(ab_host(gx_s, nx), ab_host(gx_r, nx)),
                ab_err(ab_host(gw_s, nwt), ab_host(gw_r, nwt)), ab_err(ab_host(gb_s, CO), ab_host(gb_r, CO)));
    const float sf = ab_time(ship_f, reps), sb = ab_time(ship_b, reps), st = ab_time([&] { ship_f(); ship_b(); }, reps);
    const float nf = ab_time(new_f, reps), nb = ab_time(new_b, reps), nt = ab_time([&] { new_f(); new_b(); }, reps);
    std::printf("  ms (median of %d): shipped forward %.3f backward %.3f both %.3f | stored forward %.3f backward %.3f both %.3f\n",
                reps, sf, sb, st, nf, nb, nt);
    CK(cudaFree(ws));
  }
  return 0;
}
"""


def build_source() -> str:
    from kgen import emit
    from kgen.problem import load_problem

    path = REPO / "kgen" / "problems" / "conv2d_avgpool_sigmoid_sum.py"
    kernel = emit.generate_problem(load_problem(path), str(path)).files["kernel.cu"]
    ns = re.search(r"^namespace (\w+_ns) \{", kernel, re.M).group(1)
    anchor = "// ---------------- host: launch configuration ----------------"
    assert kernel.count(anchor) == 1, "the rendered kernel's host section marker moved"
    proto = (Path(__file__).parent / "bundled_stored.cuh").read_text()
    host = HOST.replace("NAMEC_", ns[:-len("_ns")] + "_").replace("namespace NS", f"namespace {ns}")
    return kernel.replace(anchor, proto + "\n" + anchor) + host


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--arch", default="90a", help="nvcc target: 90a (H100 / H200, the Hopper path), 80, ...")
    ap.add_argument("--compile-only", action="store_true", help="build (and print ptxas's -v) without running")
    a = ap.parse_args()
    sm90 = int(a.arch.rstrip("a")) >= 90
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bundled_ab.cu"
        src.write_text(build_source())
        exe = Path(tmp) / "bundled_ab"
        cmd = ["nvcc", f"-gencode=arch=compute_{a.arch},code=sm_{a.arch}", f"-DKGEN_SM90={int(sm90)}",
               f"-DKGEN_SM90A={int(a.arch == '90a')}", "-O3", "-std=c++17", "-Xptxas", "-v", str(src), "-o", str(exe)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        spills = [ln for ln in proc.stderr.splitlines() if "spill" in ln and " 0 bytes spill stores" not in ln]
        print(f"nvcc sm_{a.arch}: rc {proc.returncode}; lines with spills: {len(spills)}")
        if proc.returncode != 0:
            print(proc.stderr[-4000:])
            return 1
        if a.compile_only:
            return 0
        return subprocess.run([str(exe), str(a.batch), str(a.reps)]).returncode


if __name__ == "__main__":
    sys.exit(main())
