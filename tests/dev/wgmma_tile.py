"""The first step of the wgmma design in docs/notes/conv2d_epilogue_plan.md (a development harness, H100/H200 only):
is a warpgroup's `wgmma.mma_async` m64n128k8 TF32, with A from registers in the m16n8k8 fragment layout (as the
halo forward loads it) and B read by the tensor core from shared memory through a matrix descriptor, faster than the
mma.sync main loop kgen ships (32 x 64 warp tiles, B fragments as float4s in registers)?

Both kernels compute C = A B (A: M x K row-major, B: K x N given as Bt, N x K) on TF32-rounded operands with float32
accumulation, at the GEMM shape of the 64->128 level-2 block scaling_min_c (M = 64 * 62 * 62 positions, N = 128 out
channels, K = 64 channels x 9 taps), staging K chunks of KC floats with cp.async, double-buffered. Each is checked
against a float64 GEMM of the same rounded operands before it is timed; torch.matmul (cuBLAS, TF32) is timed too.

  wgmma: a CTA of WG warpgroups, each computing MW m64 x n128 tiles (BM = 64 * MW * WG rows x 128 columns); A rows
         staged with a 4-float pad (conflict-free 4-byte fragment loads), B in the canonical no-swizzle K-major
         layout (8-row x 16-byte core matrices: LBO 128 bytes between the two core matrices of a k8 step, SBO 256
         bytes between 8-row groups), arranged once in global memory so a chunk is one contiguous copy.
  mma:   a CTA of 4 warps over 128 rows x 64 columns, 32 x 64 warp tiles (MI = 2, NI = 8), B arranged in fragment
         order (a lane's 16 floats of a k8 step as 4 float4s, vector j of all lanes contiguous), as halo.cu.j2.

Usage (GPU, sm_90): python tests/dev/wgmma_tile.py [--m M] [--k K] [--mw 1|2] [--wg 1|2] [--swap-lbo-sbo] [--probe]
[--emit F]
--swap-lbo-sbo tries the descriptor's two offsets the other way round (a layout check, if the first fails); --probe
prints where one-hot products land (A, B and D layouts: see probe());
--emit writes the CUDA source to F and exits (no GPU: `nvcc -arch=sm_90a -c F` checks it compiles).
Written without a GPU (twenty-seventh session); nothing here is verified until it has run on one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

N = 128
KC = 32  # K floats a stage
APAD = 4  # A rows of KC + APAD floats: lane (gid, tig) reads bank (36 gid + tig) % 32 = 4 gid + tig, all distinct


def wgmma_asm() -> str:
    """The m64n128k8 TF32 wgmma with A in 4 registers: 64 accumulators a thread, then a[4], then B's descriptor."""
    d = ", ".join(f"%{i}" for i in range(64))
    return ('asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {' + d + '}, {%64, %65, %66, %67}, %68, 1, 1, 1;\\n"\n'
            '      : ' + ", ".join(f'"+f"(d[{i}])' for i in range(64)) + '\n'
            '      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));')


def source(swap: bool) -> str:
    lbo, sbo = (256, 128) if swap else (128, 256)
    return r'''
#include <cuda_runtime.h>
#include <stdint.h>

constexpr int N = ''' + str(N) + ''', KC = ''' + str(KC) + ''', APAD = ''' + str(APAD) + r''', LDA = KC + APAD;

__device__ __forceinline__ void cp16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int NW>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(NW)); }

// A's rows m0 .. m0 + BM - 1, columns of chunk `chunk`, into rows of LDA floats (rows past M: a copy of the last one,
// never stored)
template <int BM, int THREADS>
__device__ __forceinline__ void stage_a(float* as, const float* __restrict__ A, int m0, int M, int K, int chunk) {
  for (int e = threadIdx.x; e < BM * (KC / 4); e += THREADS) {
    const int r = e / (KC / 4), q = e % (KC / 4);
    cp16(as + r * LDA + 4 * q, A + (long long)min(m0 + r, M - 1) * K + chunk * KC + 4 * q);
  }
}

// The K loop of both kernels: chunk ch + 1 loads while chunk ch's body runs from slot ch & 1 (ASYNC_PROXY: the
// copies made visible to the tensor core's descriptor reads first)
template <bool ASYNC_PROXY, class Load, class Body>
__device__ __forceinline__ void k_loop(int nch, Load load, Body body) {
  load(0, 0);
  cp_commit();
  for (int ch = 0; ch < nch; ++ch) {
    if (ch + 1 < nch) load(ch + 1, (ch + 1) & 1);
    cp_commit();
    cp_wait<1>();
    if (ASYNC_PROXY) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    body(ch & 1);
    __syncthreads();  // the slot is free for the load after next
  }
}

// ---------------- wgmma ----------------
// B (canonical, global): per k8 step s, 16 groups g of 8 columns, 2 core matrices c (4 k each), 8 rows r, 4 floats:
// Bc[((s * 16 + g) * 2 + c) * 32 + r * 4 + e] = Bt[8 g + r][8 s + 4 c + e]
__device__ __forceinline__ uint64_t b_desc(const float* smem) {
  const uint64_t addr = static_cast<uint64_t>(__cvta_generic_to_shared(smem));
  return ((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(''' + str(lbo) + r''' >> 4) << 16) |
         (static_cast<uint64_t>(''' + str(sbo) + r''' >> 4) << 32);
}

__device__ __forceinline__ void wg_mma(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  ''' + wgmma_asm() + r'''
}

template <int MW, int WG>
__global__ void __launch_bounds__(128 * WG, 1) gemm_wgmma(const float* __restrict__ A, const float* __restrict__ Bc,
                                                        float* __restrict__ C, int M, int K) {
  constexpr int BM = 64 * MW * WG, THREADS = 128 * WG;
  constexpr int A_STAGE = BM * LDA, B_STAGE = KC * N;  // floats
  extern __shared__ __align__(128) float smem[];
  const int m0 = blockIdx.x * BM;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int gid = lane >> 2, tig = lane & 3;
  auto load = [&](int chunk, int slot) {
    float* as = smem + slot * (A_STAGE + B_STAGE);
    stage_a<BM, THREADS>(as, A, m0, M, K, chunk);
    const float* src = Bc + (long long)chunk * B_STAGE;
    for (int e = threadIdx.x; e < B_STAGE / 4; e += THREADS) cp16(as + A_STAGE + 4 * e, src + 4 * e);
  };
  float d[MW][64];
#pragma unroll
  for (int w = 0; w < MW; ++w)
#pragma unroll
    for (int i = 0; i < 64; ++i) d[w][i] = 0.0f;
  k_loop<true>(K / KC, load, [&](int slot) {
    const float* as = smem + slot * (A_STAGE + B_STAGE);
    const float* bs = as + A_STAGE;
    uint32_t a[MW][KC / 8][4];
#pragma unroll
    for (int w = 0; w < MW; ++w)
#pragma unroll
      for (int s = 0; s < KC / 8; ++s) {
        const float* ap = as + ((wg * MW + w) * 64 + warp * 16 + gid) * LDA + 8 * s + tig;
        a[w][s][0] = __float_as_uint(ap[0]);
        a[w][s][1] = __float_as_uint(ap[8 * LDA]);
        a[w][s][2] = __float_as_uint(ap[4]);
        a[w][s][3] = __float_as_uint(ap[8 * LDA + 4]);
      }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < KC / 8; ++s)
#pragma unroll
      for (int w = 0; w < MW; ++w) wg_mma(d[w], a[w][s], b_desc(bs + s * 8 * N));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  });
  // d[w][4 j + {0, 1, 2, 3}]: (row gid, cols 8 j + 2 tig + {0, 1}), (row gid + 8, the same columns)
#pragma unroll
  for (int w = 0; w < MW; ++w) {
    const int r0 = m0 + (wg * MW + w) * 64 + warp * 16 + gid;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const int col = 8 * j + 2 * tig;
      if (r0 < M) *reinterpret_cast<float2*>(C + (long long)r0 * N + col) = make_float2(d[w][4 * j], d[w][4 * j + 1]);
      if (r0 + 8 < M) *reinterpret_cast<float2*>(C + (long long)(r0 + 8) * N + col) = make_float2(d[w][4 * j + 2], d[w][4 * j + 3]);
    }
  }
}

// ---------------- mma.sync (the shipped halo forward's warp tile) ----------------
// B (fragment order, global): per 64-column tile t, k8 step s, vector j (0..3), lane l, element e, with
// 2 ni + q = 4 j + e: Bf[(((t * (K / 8) + s) * 4 + j) * 32 + l) * 4 + e] = Bt[64 t + 8 ni + l / 4][8 s + l % 4 + 4 q]
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(128, 2) gemm_mma(const float* __restrict__ A, const float* __restrict__ Bf,
                                                   float* __restrict__ C, int M, int K) {
  constexpr int BM = 128, BN = 64, MI = 2, NI = 8;
  constexpr int A_STAGE = BM * LDA, B_STAGE = KC * BN;
  extern __shared__ __align__(128) float smem[];
  const int m0 = blockIdx.x * BM, t = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
  auto load = [&](int chunk, int slot) {
    float* as = smem + slot * (A_STAGE + B_STAGE);
    stage_a<BM, 128>(as, A, m0, M, K, chunk);
    const float* src = Bf + ((long long)t * (K / 8) + chunk * (KC / 8)) * 512;
    for (int e = threadIdx.x; e < B_STAGE / 4; e += 128) cp16(as + A_STAGE + 4 * e, src + 4 * e);
  };
  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  k_loop<false>(K / KC, load, [&](int slot) {
    const float* as = smem + slot * (A_STAGE + B_STAGE);
    const float* bs = as + A_STAGE;
#pragma unroll
    for (int s = 0; s < KC / 8; ++s) {
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const float* ap = as + (warp * 32 + mi * 16 + gid) * LDA + 8 * s + tig;
        a[mi][0] = __float_as_uint(ap[0]);
        a[mi][1] = __float_as_uint(ap[8 * LDA]);
        a[mi][2] = __float_as_uint(ap[4]);
        a[mi][3] = __float_as_uint(ap[8 * LDA + 4]);
      }
      uint32_t b[NI][2];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(bs + ((s * 4 + j) * 32 + lane) * 4);
        b[2 * j][0] = __float_as_uint(v.x), b[2 * j][1] = __float_as_uint(v.y);
        b[2 * j + 1][0] = __float_as_uint(v.z), b[2 * j + 1][1] = __float_as_uint(v.w);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_tf32(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
  });
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int r0 = m0 + warp * 32 + mi * 16 + gid;
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int col = BN * t + 8 * ni + 2 * tig;
      if (r0 < M) *reinterpret_cast<float2*>(C + (long long)r0 * N + col) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
      if (r0 + 8 < M) *reinterpret_cast<float2*>(C + (long long)(r0 + 8) * N + col) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
    }
  }
}

template <int MW, int WG>
cudaError_t run_wgmma(const float* A, const float* Bc, float* C, int M, int K, cudaStream_t stream) {
  constexpr int BM = 64 * MW * WG;
  const int smem = 2 * (BM * LDA + KC * N) * 4;
  cudaError_t err = cudaFuncSetAttribute(gemm_wgmma<MW, WG>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  gemm_wgmma<MW, WG><<<(M + BM - 1) / BM, 128 * WG, smem, stream>>>(A, Bc, C, M, K);
  return cudaGetLastError();
}

extern "C" cudaError_t harness_wgmma(int mw, int wg, const float* A, const float* Bc, float* C, int M, int K, cudaStream_t stream) {
  if (K % KC) return cudaErrorInvalidValue;
  if (mw == 1 && wg == 1) return run_wgmma<1, 1>(A, Bc, C, M, K, stream);
  if (mw == 2 && wg == 1) return run_wgmma<2, 1>(A, Bc, C, M, K, stream);
  if (mw == 1 && wg == 2) return run_wgmma<1, 2>(A, Bc, C, M, K, stream);
  if (mw == 2 && wg == 2) return run_wgmma<2, 2>(A, Bc, C, M, K, stream);
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t harness_mma(const float* A, const float* Bf, float* C, int M, int K, cudaStream_t stream) {
  if (K % KC) return cudaErrorInvalidValue;
  const int smem = 2 * (128 * LDA + KC * 64) * 4;
  cudaError_t err = cudaFuncSetAttribute(gemm_mma, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  gemm_mma<<<dim3((M + 127) / 128, N / 64), 128, smem, stream>>>(A, Bf, C, M, K);
  return cudaGetLastError();
}
'''


BINDING = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
extern "C" cudaError_t harness_wgmma(int, int, const float*, const float*, float*, int, int, cudaStream_t);
extern "C" cudaError_t harness_mma(const float*, const float*, float*, int, int, cudaStream_t);
void wgmma(int64_t mw, int64_t wg, torch::Tensor A, torch::Tensor Bc, torch::Tensor C) {
  cudaError_t e = harness_wgmma(mw, wg, A.data_ptr<float>(), Bc.data_ptr<float>(), C.data_ptr<float>(), A.size(0), A.size(1),
                                at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "wgmma harness: ", cudaGetErrorString(e));
}
void mma(torch::Tensor A, torch::Tensor Bf, torch::Tensor C) {
  cudaError_t e = harness_mma(A.data_ptr<float>(), Bf.data_ptr<float>(), C.data_ptr<float>(), A.size(0), A.size(1),
                              at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(e == cudaSuccess, "mma harness: ", cudaGetErrorString(e));
}
'''


def arrange_canonical(bt):
    """Bt (N x K) -> the wgmma harness's canonical K-major layout (source()'s comment): [s][g][c][r][e]."""
    n, k = bt.shape
    return bt.reshape(n // 8, 8, k // 8, 2, 4).permute(2, 0, 3, 1, 4).contiguous().reshape(-1)


def arrange_fragments(bt):
    """Bt (N x K) -> the mma harness's fragment order: [t][s][j][lane][e], 2 ni + q = 4 j + e, element
    Bt[64 t + 8 ni + lane / 4][8 s + lane % 4 + 4 q]."""
    import torch

    n, k = bt.shape
    t, s, j, lane, e = torch.meshgrid(torch.arange(n // 64), torch.arange(k // 8), torch.arange(4), torch.arange(32),
                                      torch.arange(4), indexing="ij")
    f = 4 * j + e
    ni, q = f // 2, f % 2
    return bt[64 * t + 8 * ni + lane // 4, 8 * s + lane % 4 + 4 * q].contiguous().reshape(-1)


def probe(ext) -> int:
    """Where a layout is wrong, say how: one CTA (64 x 128, K = 32) with A[m][k] = m + 64 k (exact in TF32) and a
    one-hot B (Bt[n0][k0] = 1), so C should hold A[.][k0] in column n0 and zeros elsewhere; each misplaced nonzero is
    printed with the (m, k) its value encodes."""
    import torch

    m_, k_ = 64, KC
    A = (torch.arange(m_, device="cuda")[:, None] + 64 * torch.arange(k_, device="cuda")[None, :]).float().contiguous()
    bad = 0
    for n0, k0 in ((0, 0), (1, 0), (0, 1), (9, 5), (8, 4), (127, 31)):
        Bt = torch.zeros(N, k_, device="cuda")
        Bt[n0, k0] = 1.0
        C = torch.full((m_, N), float("nan"), device="cuda")
        ext.wgmma(1, 1, A, arrange_canonical(Bt), C)
        torch.cuda.synchronize()
        want = torch.zeros_like(C)
        want[:, n0] = A[:, k0]
        wrong = (C != want).nonzero().tolist()
        bad += len(wrong)
        where = [(r, c, C[r, c].item()) for r, c in wrong[:8]]
        print(f"  one-hot B at (n {n0}, k {k0}): {len(wrong)} of {m_ * N} wrong"
              + "".join(f"; C[{r}][{c}] = {v:g}" + (f" = A[{int(v) % 64}][{int(v) // 64}]" if v == v and v > 0 else "")
                        for r, c, v in where))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=64 * 62 * 62)
    ap.add_argument("--k", type=int, default=64 * 9)
    ap.add_argument("--mw", type=int, default=2)
    ap.add_argument("--wg", type=int, default=1)
    ap.add_argument("--swap-lbo-sbo", action="store_true")
    ap.add_argument("--emit")
    ap.add_argument("--probe", action="store_true", help="map where the wgmma kernel puts one-hot products (layouts)")
    a = ap.parse_args()
    if a.emit:
        Path(a.emit).write_text(source(a.swap_lbo_sbo))
        return 0
    import torch
    from torch.utils.cpp_extension import load_inline

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from kgen.bench import cuda_time_ms

    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"  # wgmma needs the sm_90a target (and nothing else in the build)
    ext = load_inline(f"kgen_wgmma_harness_{int(a.swap_lbo_sbo)}", BINDING, cuda_sources=source(a.swap_lbo_sbo),
                      functions=["wgmma", "mma"], extra_cuda_cflags=["-O3"], verbose=False)
    torch.manual_seed(0)

    def tf32(t):  # round to nearest (ties away), as cvt.rna.tf32.f32
        i = t.view(torch.int32)
        return ((i + 0x1000) & ~0x1FFF).view(torch.float32)

    if a.probe:
        return probe(ext)
    A = tf32(torch.randn(a.m, a.k, device="cuda"))
    Bt = tf32(torch.randn(N, a.k, device="cuda"))
    ref = (A.double() @ Bt.double().t())
    scale = ref.abs().max().item()
    Bc, Bf = arrange_canonical(Bt), arrange_fragments(Bt)
    flops = 2.0 * a.m * N * a.k
    print(f"GEMM {a.m} x {N} x {a.k} on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    # mma.sync first: a wgmma layout mistake that faults then still leaves the comparison's other half printed
    runs = {"mma.sync": lambda C: ext.mma(A, Bf, C), "wgmma": lambda C: ext.wgmma(a.mw, a.wg, A, Bc, C)}
    ok = True
    for name, fn in runs.items():
        C = torch.full((a.m, N), float("nan"), device="cuda")
        fn(C)
        torch.cuda.synchronize()
        err = (C.double() - ref).abs().max().item() / scale
        good = err < 1e-5
        ok &= good
        ms = min(cuda_time_ms(lambda: fn(C), 3, 7) for _ in range(2)) if good else float("nan")
        print(f"  {name:10s} max error / max |C| {err:.2e} {'ok' if good else 'WRONG'}   {ms:.3f} ms   {flops / ms / 1e9:.1f} TFLOPS")
        if not good:
            bad = ((C.double() - ref).abs() > 1e-5 * scale).nonzero()[:6].tolist()
            print("    first wrong (row, col):", bad, "values", [(C[r, c].item(), ref[r, c].item()) for r, c in bad[:3]])
    torch.backends.cuda.matmul.allow_tf32 = True
    C = torch.empty(a.m, N, device="cuda")
    ms = min(cuda_time_ms(lambda: torch.matmul(A, Bt.t(), out=C), 3, 7) for _ in range(2))
    print(f"  {'cuBLAS':10s} (TF32 allowed)                      {ms:.3f} ms   {flops / ms / 1e9:.1f} TFLOPS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
