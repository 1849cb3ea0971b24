"""A development kernel, not shipped (docs/notes/pool_plan.md, experiment 1): the 3-d max-pool forward from a staged
input tile with a separable max (W, then H, then D), against kgen's shipped forward and eager PyTorch (device only).

A block owns TDO x THO output rows (all WO columns) of one (n, c) plane. It stages the input slab those windows read
((TDO-1)*SD+KD slices x (THO-1)*SH+KH rows x the padded width) with coalesced 16-byte loads, padding -inf, then
reduces KW columns, KH rows and KD slices in turn in shared memory. Each pass keeps (value, in-window offset) and
folds with PyTorch's rule (a later element wins when greater, or when NaN), which composes across the passes; the
starting offset is the window's first in-bounds tap, as PyTorch's. Scope: dilation 1, ceil_mode off, float32 or
float16 input, W % (16 / itemsize) == 0.

Usage (GPU): python tests/dev/pool3d_staged.py [--tdo 2] [--tho 2 4] [--dtype float32] [--reps 20]
       (CPU):  python tests/dev/pool3d_staged.py --cpu-check   (the separable fold against PyTorch, in Python)
It first checks values and saved offsets against PyTorch on small shapes with ties, -inf and NaN (exact), then times
MaxPool3d(3, 2, 1) on 8x48x96x96x160: eager, kgen (generated as a user would get it), and the staged kernel.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>

namespace {
using T = @T@;
constexpr int D = @D@, H = @H@, W = @W@, DO = @DO@, HO = @HO@, WO = @WO@;
constexpr int KD = @KD@, KH = @KH@, KW = @KW@, SD = @SD@, SH = @SH@, SW = @SW@, PD = @PD@, PH = @PH@, PW = @PW@;
constexpr int TDO = @TDO@, THO = @THO@, THREADS = 256;
constexpr int ND = (TDO - 1) * SD + KD, NH = (THO - 1) * SH + KH;  // staged slices, rows
constexpr int VEC = 16 / sizeof(T), NWP = W + 2 * PW;              // elements per load; padded width
constexpr int TILES_D = (DO + TDO - 1) / TDO, TILES_H = (HO + THO - 1) / THO;
static_assert(W % VEC == 0, "whole vectors per row");

__device__ __forceinline__ float tf(float v) { return v; }
__device__ __forceinline__ float tf(__half v) { return __half2float(v); }
template <class U> __device__ __forceinline__ U from(float v);
template <> __device__ __forceinline__ float from<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from<__half>(float v) { return __float2half_rn(v); }
__device__ __forceinline__ int first_tap(int start) { return start < 0 ? -start : 0; }
// PyTorch's fold: the candidate wins when greater or NaN.
__device__ __forceinline__ void fold(float& v, int& a, float c, int ca) {
  if (c > v || c != c) { v = c; a = ca; }
}

template <bool WS>
__global__ void __launch_bounds__(THREADS) staged_fwd(const T* __restrict__ x, T* __restrict__ y,
                                                      uint8_t* __restrict__ off, long long tiles) {
  extern __shared__ __align__(16) float sm[];
  float* slab = sm;                    // [ND][NH][NWP]
  float* m1v = slab + ND * NH * NWP;   // [ND][NH][WO]: max over kw
  float* m2v = m1v + ND * NH * WO;     // [ND][THO][WO]: max over kh, kw
  uint8_t* m1a = reinterpret_cast<uint8_t*>(m2v + ND * THO * WO);  // kw
  uint8_t* m2a = m1a + ND * NH * WO;                                 // kh * KW + kw
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long plane = tile / (TILES_D * TILES_H);
    const int t = static_cast<int>(tile - plane * (TILES_D * TILES_H));
    const int od0 = (t / TILES_H) * TDO, oh0 = (t % TILES_H) * THO;
    const int id0 = od0 * SD - PD, ih0 = oh0 * SH - PH;
    const T* xp = x + plane * (long long)D * H * W;
    // stage: vectors of real rows, -inf elsewhere (padding columns, rows and slices outside the input)
    for (int e = threadIdx.x; e < ND * NH * (W / VEC); e += THREADS) {
      const int v = e % (W / VEC), r = (e / (W / VEC)) % NH, s = e / ((W / VEC) * NH);
      const int id = id0 + s, ih = ih0 + r;
      float* dst = slab + (s * NH + r) * NWP + PW + v * VEC;
      if (id >= 0 && id < D && ih >= 0 && ih < H) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(xp + ((long long)id * H + ih) * W + v * VEC));
        const T* el = reinterpret_cast<const T*>(&q);
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst[i] = tf(el[i]);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dst[i] = -INFINITY;
      }
    }
    for (int e = threadIdx.x; e < ND * NH * 2 * PW; e += THREADS) {
      const int c = e % (2 * PW), sr = e / (2 * PW);
      slab[sr * NWP + (c < PW ? c : W + c)] = -INFINITY;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ND * NH * WO; e += THREADS) {  // over kw
      const int ow = e % WO, sr = e / WO;
      const float* row = slab + sr * NWP + ow * SW;  // padded column ow*SW is input column ow*SW - PW
      int a = first_tap(ow * SW - PW);
      float v = -INFINITY;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) fold(v, a, row[kw], kw);
      m1v[e] = v;
      m1a[e] = static_cast<uint8_t>(a);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ND * THO * WO; e += THREADS) {  // over kh
      const int ow = e % WO, ohl = (e / WO) % THO, s = e / (WO * THO);
      int a = first_tap(ih0 + ohl * SH) * KW + first_tap(ow * SW - PW);
      float v = -INFINITY;
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) {
        const int i = (s * NH + ohl * SH + kh) * WO + ow;
        fold(v, a, m1v[i], kh * KW + m1a[i]);
      }
      m2v[e] = v;
      m2a[e] = static_cast<uint8_t>(a);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < TDO * THO * WO; e += THREADS) {  // over kd; write
      const int ow = e % WO, ohl = (e / WO) % THO, odl = e / (WO * THO);
      const int od = od0 + odl, oh = oh0 + ohl;
      if (od >= DO || oh >= HO) continue;
      int a = (first_tap(id0 + odl * SD) * KH + first_tap(ih0 + ohl * SH)) * KW + first_tap(ow * SW - PW);
      float v = -INFINITY;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        const int i = ((odl * SD + kd) * THO + ohl) * WO + ow;
        fold(v, a, m2v[i], kd * KH * KW + m2a[i]);
      }
      const long long o = ((plane * DO + od) * HO + oh) * WO + ow;
      y[o] = from<T>(v);
      if (WS) off[o] = static_cast<uint8_t>(a);
    }
    __syncthreads();
  }
}
}  // namespace

constexpr size_t SMEM = (size_t)(ND * NH * NWP + ND * NH * WO + ND * THO * WO) * 4 + ND * NH * WO + ND * THO * WO;

void run(torch::Tensor x, torch::Tensor y, torch::Tensor off, bool write_off) {
  const long long planes = x.numel() / ((long long)D * H * W);
  const long long tiles = planes * TILES_D * TILES_H;
  auto kernel = write_off ? staged_fwd<true> : staged_fwd<false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM);
  const unsigned grid = (unsigned)(tiles < (1LL << 30) ? tiles : (1LL << 30));
  kernel<<<grid, THREADS, SMEM, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(x.data_ptr()), reinterpret_cast<T*>(y.data_ptr()),
      write_off ? off.data_ptr<uint8_t>() : nullptr, tiles);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "staged_fwd launch failed");
}
"""


def build(shape, k, s, p, dtype, tdo, tho):
    from torch.utils.cpp_extension import load_inline

    D, H, W = shape[-3:]
    out = [(n + 2 * pp - kk) // ss + 1 for n, kk, ss, pp in zip((D, H, W), k, s, p)]
    vals = {"T": "float" if dtype == torch.float32 else "__half", "D": D, "H": H, "W": W, "DO": out[0], "HO": out[1],
            "WO": out[2], "KD": k[0], "KH": k[1], "KW": k[2], "SD": s[0], "SH": s[1], "SW": s[2], "PD": p[0],
            "PH": p[1], "PW": p[2], "TDO": tdo, "THO": tho}
    src = SOURCE
    for key, v in vals.items():
        src = src.replace(f"@{key}@", str(v))
    name = "pool3d_staged_" + "_".join(str(v) for v in vals.values()).replace("__half", "h")
    mod = load_inline(name, cpp_sources="void run(torch::Tensor x, torch::Tensor y, torch::Tensor off, bool write_off);",
                      cuda_sources=src, functions=["run"], extra_cuda_cflags=["-O3"], verbose=False)
    return mod, out


CHECKS = (((2, 3, 9, 10, 16), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
          ((1, 2, 7, 13, 24), (2, 3, 3), (1, 2, 2), (1, 1, 0)),
          ((2, 2, 6, 6, 8), (3, 3, 3), (3, 3, 3), (0, 0, 0)))


def build_all(configs, also) -> tuple[dict, object]:
    """Every (shape, k, s, p, dtype, tdo, tho) extension at once, in threads (each a separate nvcc with torch
    headers, about a minute alone), with also() (kgen's module) beside them: ({config: (module, output size)},
    also's result)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(configs) + 1) as ex:
        other = ex.submit(also)
        return dict(zip(configs, ex.map(lambda c: build(*c), configs))), other.result()


def check(dtype, tdo, tho, built):
    """Exact values and offsets against PyTorch: ties (integers), -inf and NaN, odd tiles."""
    for shape, k, s, p in CHECKS:
        mod, out = built[(shape, k, s, p, dtype, tdo, tho)]
        x = torch.randint(-3, 4, shape, device="cuda").to(dtype)
        x.view(-1)[torch.randperm(x.numel(), device="cuda")[:5]] = float("nan")
        x.view(-1)[torch.randperm(x.numel(), device="cuda")[:5]] = float("-inf")
        want, idx = F.max_pool3d(x, k, s, p, return_indices=True)
        y = torch.full_like(want, 7.0)
        off = torch.full(want.shape, 255, dtype=torch.uint8, device="cuda")
        mod.run(x, y, off, True)
        torch.testing.assert_close(y, want, equal_nan=True, atol=0, rtol=0)
        D, H, W = shape[-3:]
        o = torch.meshgrid(*[torch.arange(n, device="cuda") for n in out], indexing="ij")
        pos = [idx // (H * W), (idx // W) % H, idx % W]
        kk = [pos[a] - (o[a] * s[a] - p[a]) for a in range(3)]
        want_off = ((kk[0] * k[1] + kk[1]) * k[2] + kk[2]).to(torch.uint8)
        assert torch.equal(off, want_off), (shape, k, s, p, (off != want_off).sum().item())
    print(f"check {dtype} tdo {tdo} tho {tho}: values and offsets equal PyTorch's", flush=True)


def cpu_check(count: int = 150) -> None:
    """The separable fold (W, then H, then D, each from the window's first in-bounds tap) in Python against PyTorch's
    max_pool3d on the CPU: values and argmax, over random geometries with ties, NaN and -inf (no GPU needed)."""
    import math
    import random

    def first_tap(start: int) -> int:
        return -start if start < 0 else 0

    def fold(v: float, a: int, c: float, ca: int) -> tuple[float, int]:
        return (c, ca) if c > v or c != c else (v, a)

    def separable(x: torch.Tensor, k, s, p):
        size = x.shape

        def at(d: int, h: int, w: int) -> float:
            inside = 0 <= d < size[0] and 0 <= h < size[1] and 0 <= w < size[2]
            return x[d, h, w].item() if inside else -math.inf

        out = [(n + 2 * pp - kk) // ss + 1 for n, kk, ss, pp in zip(size, k, s, p)]
        y, off = torch.empty(out, dtype=torch.float64), torch.empty(out, dtype=torch.long)
        for od in range(out[0]):
            for oh in range(out[1]):
                for ow in range(out[2]):
                    ds, hs, ws = od * s[0] - p[0], oh * s[1] - p[1], ow * s[2] - p[2]
                    v3, a3 = -math.inf, (first_tap(ds) * k[1] + first_tap(hs)) * k[2] + first_tap(ws)
                    for kd in range(k[0]):
                        v2, a2 = -math.inf, first_tap(hs) * k[2] + first_tap(ws)
                        for kh in range(k[1]):
                            v1, a1 = -math.inf, first_tap(ws)
                            for kw in range(k[2]):
                                v1, a1 = fold(v1, a1, at(ds + kd, hs + kh, ws + kw), kw)
                            v2, a2 = fold(v2, a2, v1, kh * k[2] + a1)
                        v3, a3 = fold(v3, a3, v2, (kd * k[1]) * k[2] + a2)
                    y[od, oh, ow], off[od, oh, ow] = v3, a3
        return y, off

    rng, n = random.Random(0), 0
    while n < count:
        k = [rng.randint(1, 3) for _ in range(3)]
        s = [rng.randint(1, 3) for _ in range(3)]
        p = [rng.randint(0, kk // 2) for kk in k]
        size = [rng.randint(1, 6) for _ in range(3)]
        if any(kk > m + 2 * pp for kk, m, pp in zip(k, size, p)):
            continue
        x = torch.randint(-2, 3, size).double()
        flat = x.view(-1)
        for i in rng.sample(range(flat.numel()), min(2, flat.numel())):
            flat[i] = float("nan") if rng.random() < 0.5 else -math.inf
        want, idx = F.max_pool3d(x[None, None], k, s, p, return_indices=True)
        want, idx = want[0, 0], idx[0, 0]
        y, off = separable(x, k, s, p)
        D, H, W = size
        o = torch.meshgrid(*[torch.arange(m) for m in want.shape], indexing="ij")
        pos = [idx // (H * W), (idx // W) % H, idx % W]
        kk = [pos[a] - (o[a] * s[a] - p[a]) for a in range(3)]
        assert torch.equal(torch.nan_to_num(y, nan=99.0), torch.nan_to_num(want, nan=99.0)), (size, k, s, p)
        assert torch.equal(off, (kk[0] * k[1] + kk[1]) * k[2] + kk[2]), (size, k, s, p)
        n += 1
    print(f"separable fold == PyTorch (values and argmax) on {n} random geometries with ties, NaN and -inf")


def main() -> int:
    from kgen import emit
    from kgen.bench import copy_bandwidth_gbs, cuda_time_ms
    from kgen.problem import load_problem
    from tests.bench.bench_pool import problem_source

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tdo", type=int, nargs="*", default=[2])
    ap.add_argument("--tho", type=int, nargs="*", default=[2, 4])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu-check", action="store_true", help="only the CPU check of the separable fold")
    a = ap.parse_args()
    if a.cpu_check:
        cpu_check()
        return 0
    dtype = getattr(torch, a.dtype)
    shape, k, s, p = (8, 48, 96, 96, 160), (3, 3, 3), (2, 2, 2), (1, 1, 1)
    bw = copy_bandwidth_gbs()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} copy {bw:.0f} GB/s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="kgen_staged_"))
    path = folder / "maxpool3d.py"
    path.write_text(problem_source("nn.MaxPool3d(3, 2, 1)", shape, a.dtype))
    gen = emit.generate_problem(load_problem(path), str(path))
    ns: dict = {"__name__": "kgen_maxpool3d"}
    exec(compile(gen.files[emit.MODEL_FILE], "<kgen>", "exec"), ns)
    variants = [(tdo, tho) for tdo in a.tdo for tho in a.tho]
    built, kgen_model = build_all([(*c, dtype, tdo, tho) for tdo, tho in variants for c in CHECKS + ((shape, k, s, p),)],
                                  lambda: ns["ModelNew"]().cuda())
    x = torch.rand(shape, device="cuda").to(dtype)
    want = F.max_pool3d(x, k, s, p)
    floor_ms = (x.numel() + want.numel()) * x.element_size() / bw / 1e6
    rows = {"eager": lambda: F.max_pool3d(x, k, s, p), "kgen": lambda: kgen_model(x)}
    with torch.no_grad():
        torch.testing.assert_close(kgen_model(x), want, atol=0, rtol=0)
    for tdo, tho in variants:
        check(dtype, tdo, tho, built)
        mod, _ = built[(shape, k, s, p, dtype, tdo, tho)]
        y = torch.empty_like(want)
        off = torch.empty(want.shape, dtype=torch.uint8, device="cuda")
        mod.run(x, y, off, False)
        torch.testing.assert_close(y, want, atol=0, rtol=0)
        rows[f"staged tdo {tdo} tho {tho}"] = (lambda m=mod, yy=y, oo=off: m.run(x, yy, oo, False))
        rows[f"staged tdo {tdo} tho {tho} +offsets"] = (lambda m=mod, yy=y, oo=off: m.run(x, yy, oo, True))
    print(f"MaxPool3d(3, 2, 1) {shape} {a.dtype}: floor {floor_ms:.3f} ms (values only)")
    with torch.no_grad():
        for label, fn in rows.items():
            ms = min(cuda_time_ms(fn, 3, a.reps) for _ in range(2))
            print(f"  {label:<28} {ms:7.3f} ms ({floor_ms / ms:5.1%} of floor)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
