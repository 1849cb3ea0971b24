// kgen_avg_pool2d_c48d4bec: AvgPool2d forward and backward, specialized by kgen.
// x [N, 64, 2048, 2048] -> y [N, 64, 186, 186]; kernel 11x11, stride 11x11,
// padding 0x0, ceil_mode=False, count_include_pad=True, divisor_override=None.
// N is a run-time value; everything else is compile-time. All indexing that scales with N is 64-bit.
// kgen fixed CUDA helpers (pulled into each rendered kernel by Jinja include; no torch headers).
#include <cuda_runtime.h>
#include <stdint.h>

namespace kgen {

// Floor division for possibly negative numerators (C++ '/' truncates toward zero).
__host__ __device__ constexpr int floor_div(int a, int b) { return (a >= 0) ? a / b : -((-a + b - 1) / b); }
__host__ __device__ constexpr int ceil_div_pos(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// VEC consecutive floats moved as one access (16, 8 or 4 bytes); the address must be VEC*4-byte aligned.
template <int VEC> struct Vec { float v[VEC]; };

template <int VEC>
__device__ __forceinline__ Vec<VEC> load(const float* __restrict__ p) {
  Vec<VEC> r;
  if constexpr (VEC == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    r.v[0] = t.x; r.v[1] = t.y; r.v[2] = t.z; r.v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = __ldg(reinterpret_cast<const float2*>(p));
    r.v[0] = t.x; r.v[1] = t.y;
  } else {
    r.v[0] = __ldg(p);
  }
  return r;
}

// Streaming store (evict-first): outputs written once and not re-read by this kernel.
template <int VEC>
__device__ __forceinline__ void store_stream(float* __restrict__ p, const Vec<VEC>& r) {
  if constexpr (VEC == 4) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(r.v[0], r.v[1], r.v[2], r.v[3]));
  } else if constexpr (VEC == 2) {
    __stcs(reinterpret_cast<float2*>(p), make_float2(r.v[0], r.v[1]));
  } else {
    __stcs(p, r.v[0]);
  }
}

// Grid size for a grid-stride loop over `tiles` blocks of work.
inline unsigned int grid_for(int64_t tiles) {
  const int64_t cap = 0x7fffffffLL;
  return static_cast<unsigned int>(tiles < cap ? tiles : cap);
}

// Blocks of `kernel` that fit on the current device at once (multiprocessors x blocks per multiprocessor), for
// persistent grids; <= 0 if the query fails.
template <typename Kernel>
inline int64_t resident_blocks(Kernel kernel, int threads, size_t smem = 0) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) return -1;
  return static_cast<int64_t>(sms) * per_sm;
}

}  // namespace kgen

namespace {

constexpr int C = 64, H = 2048, W = 2048, HO = 186, WO = 186;
constexpr int KH = 11, KW = 11, SH = 11, SW = 11, PH = 0, PW = 0;
constexpr bool COUNT_INCLUDE_PAD = true;
constexpr int DIVISOR_OVERRIDE = 0;  // 0: none
constexpr int VEC = 4;  // floats per global access (W % VEC == 0)

// Forward tile: F_ROWS output rows x F_COLS output columns of one (n, c) plane.
constexpr int F_ROWS = 1, F_COLS = 186, F_THREADS = 512;
constexpr int F_ROW_TILES = (HO + F_ROWS - 1) / F_ROWS, F_COL_TILES = (WO + F_COLS - 1) / F_COLS;
constexpr int F_IN_ROWS = (F_ROWS - 1) * SH + KH;            // input rows one tile reads
constexpr int F_SPAN = 2052;                          // colsum row length (>= input columns of a tile)
// Backward tile: B_ROWS input rows x B_COLS input columns; each input element gathers its windows' gradients.
constexpr int B_ROWS = 8, B_COLS = 2048, B_THREADS = 512;
constexpr int B_ROW_TILES = (H + B_ROWS - 1) / B_ROWS, B_COL_TILES = (W + B_COLS - 1) / B_COLS;
constexpr int B_GW = (B_COLS + KW - 2) / SW + 2;              // output columns touching one tile's columns
constexpr int NCAND_H = (KH + SH - 1) / SH, NCAND_W = (KW + SW - 1) / SW;  // windows covering one row / column

static_assert(W % VEC == 0, "vector width must divide W");
static_assert(B_COLS % VEC == 0, "vector width must divide the backward tile");

// PyTorch's divisor for window (oh, ow); 0 when the window holds no input element (its output is 0).
__device__ __forceinline__ int window_divisor(int oh, int ow) {
  int hs = oh * SH - PH, ws = ow * SW - PW;
  int he = kgen::imin(hs + KH, H + PH), we = kgen::imin(ws + KW, W + PW);
  const int pool_size = (he - hs) * (we - ws);
  hs = kgen::imax(hs, 0); ws = kgen::imax(ws, 0);
  he = kgen::imin(he, H); we = kgen::imin(we, W);
  if (hs >= he || ws >= we) return 0;
  if (DIVISOR_OVERRIDE != 0) return DIVISOR_OVERRIDE;
  return COUNT_INCLUDE_PAD ? pool_size : (he - hs) * (we - ws);
}

// Pass 2 of the forward: each output of the tile adds its KW column sums from shared memory and divides by
// PyTorch's divisor. colsum[r][c] holds input column ca + c summed over the window rows of output row oh0 + r.
__device__ __forceinline__ void finish_tile(const float* __restrict__ colsum, float* __restrict__ y, int64_t plane,
                                            int oh0, int ow0, int ca) {
  for (int i = threadIdx.x; i < F_ROWS * F_COLS; i += F_THREADS) {
    const int r = i / F_COLS, oh = oh0 + r, ow = ow0 + i % F_COLS;
    if (oh < HO && ow < WO) {
      const int w0 = ow * SW - PW;
      float s = 0.f;
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        const int iw = w0 + kx;
        if (iw >= 0 && iw < W) s += colsum[r * F_SPAN + (iw - ca)];
      }
      const int div = window_divisor(oh, ow);
      y[(plane * HO + oh) * WO + ow] = div ? s / static_cast<float>(div) : 0.f;
    }
  }
}

// Pass 1 for one VEC-column chunk: add input row j of the tile into every output row whose window holds it.
__device__ __forceinline__ void accumulate(float (&acc)[F_ROWS][VEC], const kgen::Vec<VEC>& v, int j) {
#pragma unroll
  for (int r = 0; r < F_ROWS; ++r) {
    if (j >= r * SH && j < r * SH + KH) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] += v.v[e];
    }
  }
}

// Persistent forward (a row tile spans the whole width and one vector chunk per thread): each thread owns the same
// VEC input columns of every tile and keeps the NEXT tile's F_IN_ROWS 16-byte loads in flight in registers while
// the block finishes the current tile, so memory never idles between tiles.
__global__ void __launch_bounds__(F_THREADS) kgen_avg_pool2d_c48d4bec_fwd(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t tiles) {
  __shared__ float colsum[F_ROWS * F_SPAN];
  constexpr int CA = kgen::floor_div(-PW, VEC) * VEC;
  constexpr int C_HI = kgen::imin((WO - 1) * SW - PW + KW, W);
  const int col = kgen::imax(CA, 0) + threadIdx.x * VEC;
  const bool active = col < C_HI;
  kgen::Vec<VEC> v[F_IN_ROWS];
  auto fetch = [&](int64_t tile) {
    const int64_t plane = tile / F_ROW_TILES;
    const int ih0 = static_cast<int>(tile % F_ROW_TILES) * F_ROWS * SH - PH;
    const float* __restrict__ xp = x + plane * (static_cast<int64_t>(H) * W) + col;
#pragma unroll
    for (int j = 0; j < F_IN_ROWS; ++j) {
      const int ih = ih0 + j;
      if (active && ih >= 0 && ih < H) {
        v[j] = kgen::load<VEC>(xp + static_cast<int64_t>(ih) * W);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[j].v[e] = 0.f;
      }
    }
  };
  int64_t tile = blockIdx.x;
  if (tile < tiles) fetch(tile);
  for (; tile < tiles; tile += gridDim.x) {
    float acc[F_ROWS][VEC];
#pragma unroll
    for (int r = 0; r < F_ROWS; ++r)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] = 0.f;
#pragma unroll
    for (int j = 0; j < F_IN_ROWS; ++j) accumulate(acc, v[j], j);
    if (tile + gridDim.x < tiles) fetch(tile + gridDim.x);
    if (active) {
#pragma unroll
      for (int r = 0; r < F_ROWS; ++r)
#pragma unroll
        for (int e = 0; e < VEC; ++e) colsum[r * F_SPAN + (col - CA) + e] = acc[r][e];
    }
    __syncthreads();
    finish_tile(colsum, y, tile / F_ROW_TILES, static_cast<int>(tile % F_ROW_TILES) * F_ROWS, 0, CA);
    __syncthreads();
  }
}

// One block per tile of input rows x columns (grid-stride). Pass 1: for each tile row, gh[ow] = sum over the
// windows (oh, ow) covering that row of grad_y / divisor. Pass 2: grad_x[ih, iw] = sum of gh over the windows
// covering column iw; every element of grad_x is written (0 where no window reaches), with streaming stores.
__global__ void __launch_bounds__(B_THREADS) kgen_avg_pool2d_c48d4bec_bwd(const float* __restrict__ gy, float* __restrict__ gx,
                                                            int64_t tiles) {
  __shared__ float gh[B_ROWS * B_GW];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t plane = tile / (B_ROW_TILES * B_COL_TILES);
    const int rem = static_cast<int>(tile % (B_ROW_TILES * B_COL_TILES));
    const int ih0 = (rem / B_COL_TILES) * B_ROWS, c0 = (rem % B_COL_TILES) * B_COLS;
    const int a = c0 + PW - KW + 1;
    const int ow_lo = a <= 0 ? 0 : (a + SW - 1) / SW;
    const int ow_hi = kgen::imin(WO - 1, (c0 + B_COLS - 1 + PW) / SW);
    const float* __restrict__ gyp = gy + plane * (static_cast<int64_t>(HO) * WO);
    for (int i = threadIdx.x; i < B_ROWS * B_GW; i += B_THREADS) {
      const int rr = i / B_GW, ow = ow_lo + i % B_GW, ih = ih0 + rr;
      float s = 0.f;
      if (ih < H && ow <= ow_hi) {
        const int oh_hi = kgen::imin(HO - 1, (ih + PH) / SH);
#pragma unroll
        for (int c = 0; c < NCAND_H; ++c) {
          const int oh = oh_hi - c;
          if (oh >= 0 && oh * SH - PH + KH > ih) {
            const int div = window_divisor(oh, ow);
            if (div) s += gyp[static_cast<int64_t>(oh) * WO + ow] / static_cast<float>(div);
          }
        }
      }
      gh[i] = s;
    }
    __syncthreads();
    float* __restrict__ gxp = gx + plane * (static_cast<int64_t>(H) * W);
    for (int i = threadIdx.x; i < B_ROWS * (B_COLS / VEC); i += B_THREADS) {
      const int rr = i / (B_COLS / VEC), ih = ih0 + rr, col = c0 + (i % (B_COLS / VEC)) * VEC;
      if (ih < H && col < W) {
        kgen::Vec<VEC> out;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int iw = col + e;
          const int ow_top = kgen::imin(WO - 1, (iw + PW) / SW);
          float s = 0.f;
#pragma unroll
          for (int c = 0; c < NCAND_W; ++c) {
            const int ow = ow_top - c;
            if (ow >= 0 && ow * SW - PW + KW > iw) s += gh[rr * B_GW + (ow - ow_lo)];
          }
          out.v[e] = s;
        }
        kgen::store_stream<VEC>(gxp + static_cast<int64_t>(ih) * W + col, out);
      }
    }
    __syncthreads();
  }
}

}  // namespace

extern "C" cudaError_t kgen_avg_pool2d_c48d4bec_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t tiles = n * C * F_ROW_TILES * F_COL_TILES;
  const int64_t resident = kgen::resident_blocks(kgen_avg_pool2d_c48d4bec_fwd, F_THREADS);
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  kgen_avg_pool2d_c48d4bec_fwd<<<kgen::grid_for(tiles < resident ? tiles : resident), F_THREADS, 0, stream>>>(x, y, tiles);
  return cudaGetLastError();
}

extern "C" cudaError_t kgen_avg_pool2d_c48d4bec_backward(const float* grad_y, float* grad_x, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t tiles = n * C * B_ROW_TILES * B_COL_TILES;
  kgen_avg_pool2d_c48d4bec_bwd<<<kgen::grid_for(tiles), B_THREADS, 0, stream>>>(grad_y, grad_x, tiles);
  return cudaGetLastError();
}
