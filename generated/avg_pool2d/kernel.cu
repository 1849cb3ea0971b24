// kgen_pool_10796d68: avg pooling (2-d, float32) forward and backward, specialized by kgen.
// x [N, 64, 2048, 2048] -> y [N, 64, 186, 186]; computed as a 3-d pool over
// (D, H, W) = (1, 2048, 2048) -> (1, 186, 186), window (1, 11, 11), stride (1, 11, 11),
// padding (0, 0, 0), dilation (1, 1, 1); forward design: colsum, backward: colsum.
// The (n, c) plane count is a run-time value; everything else is compile-time. Indexing that scales with it is 64-bit.
// kgen fixed CUDA helpers (pulled into each rendered kernel by Jinja include; no torch headers).
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

namespace kgen {

// Floor division for possibly negative numerators (C++ '/' truncates toward zero).
__host__ __device__ constexpr int floor_div(int a, int b) { return (a >= 0) ? a / b : -((-a + b - 1) / b); }
__host__ __device__ constexpr int ceil_div_pos(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// Grid size for a grid-stride loop over `tiles` blocks of work.
inline unsigned int grid_for(int64_t tiles) {
  const int64_t cap = 0x7fffffffLL;
  return static_cast<unsigned int>(tiles < cap ? tiles : cap);
}

// Blocks of `kernel` that fit on the current device at once (multiprocessors x blocks per multiprocessor), for
// persistent grids; <= 0 if the query fails. The occupancy query costs microseconds, so each launch site keeps
// the answer per device in its own `cache` (a static array of the launcher: zero means not asked yet).
constexpr int kMaxDevices = 64;
template <typename Kernel>
inline int64_t resident_blocks(Kernel kernel, int threads, size_t smem, std::atomic<int64_t> (&cache)[kMaxDevices]) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (dev >= 0 && dev < kMaxDevices) {
    const int64_t known = cache[dev].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) return -1;
  const int64_t blocks = static_cast<int64_t>(sms) * per_sm;
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(blocks, std::memory_order_relaxed);
  return blocks;
}

}  // namespace kgen
// pool family fixed helpers (pulled into each rendered kernel by Jinja include; no torch headers): element types
// as float registers, and 2- to 16-byte vector loads / stores of any element type.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace pool {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
// The 2-byte types' specializations are in pool/half.cuh and pool/bfloat16.cuh, included for those dtypes only: a
// float32 kernel carries no float-to-half conversion (KernelBench's precision-downgrade check reads the source).

// An element's bits (low bits of a 32-bit word) and back.
__device__ __forceinline__ unsigned bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned bits_of(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <typename T> __device__ __forceinline__ T of_bits(unsigned b);
template <> __device__ __forceinline__ float of_bits<float>(unsigned b) { return __uint_as_float(b); }
template <> __device__ __forceinline__ __half of_bits<__half>(unsigned b) { return __ushort_as_half(static_cast<unsigned short>(b)); }
template <> __device__ __forceinline__ __nv_bfloat16 of_bits<__nv_bfloat16>(unsigned b) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(b));
}

// 32-bit words holding B bytes (B = 1, 2, 4, 8 or 16).
template <int B> struct Words { unsigned w[B >= 4 ? B / 4 : 1]; };

template <int B>
__device__ __forceinline__ Words<B> load_words(const void* __restrict__ p) {
  static_assert(B == 1 || B == 2 || B == 4 || B == 8 || B == 16, "vector loads move 1, 2, 4, 8 or 16 bytes");
  Words<B> r;
  if constexpr (B == 16) {
    const uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
    r.w[0] = t.x; r.w[1] = t.y; r.w[2] = t.z; r.w[3] = t.w;
  } else if constexpr (B == 8) {
    const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
    r.w[0] = t.x; r.w[1] = t.y;
  } else if constexpr (B == 4) {
    r.w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
  } else if constexpr (B == 2) {
    r.w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else {
    r.w[0] = __ldg(reinterpret_cast<const unsigned char*>(p));
  }
  return r;
}

// STREAM: evict-first stores for outputs this kernel never reads again.
template <int B, bool STREAM>
__device__ __forceinline__ void store_words(void* __restrict__ p, const Words<B>& r) {
  static_assert(B == 1 || B == 2 || B == 4 || B == 8 || B == 16, "vector stores move 1, 2, 4, 8 or 16 bytes");
  if constexpr (B == 16) {
    const uint4 t = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
    if constexpr (STREAM) __stcs(reinterpret_cast<uint4*>(p), t); else *reinterpret_cast<uint4*>(p) = t;
  } else if constexpr (B == 8) {
    const uint2 t = make_uint2(r.w[0], r.w[1]);
    if constexpr (STREAM) __stcs(reinterpret_cast<uint2*>(p), t); else *reinterpret_cast<uint2*>(p) = t;
  } else if constexpr (B == 4) {
    if constexpr (STREAM) __stcs(reinterpret_cast<unsigned*>(p), r.w[0]); else *reinterpret_cast<unsigned*>(p) = r.w[0];
  } else if constexpr (B == 2) {
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(r.w[0]);
  } else {
    *reinterpret_cast<unsigned char*>(p) = static_cast<unsigned char>(r.w[0]);
  }
}

// Element e (S bytes wide) of packed words.
template <int S, int B>
__device__ __forceinline__ unsigned extract(const Words<B>& r, int e) {
  if constexpr (S == 4) {
    return r.w[e];
  } else {
    return (r.w[(e * S) / 4] >> (((e * S) % 4) * 8)) & ((1u << (8 * S)) - 1u);
  }
}

// N elements of T at p (N * sizeof(T) bytes, that many aligned) as floats.
template <typename T, int N>
__device__ __forceinline__ void load(const T* __restrict__ p, float (&out)[N]) {
  constexpr int B = N * static_cast<int>(sizeof(T));
  const Words<B> r = load_words<B>(p);
#pragma unroll
  for (int e = 0; e < N; ++e) out[e] = to_float(of_bits<T>(extract<static_cast<int>(sizeof(T))>(r, e)));
}

// A max-pool backward's group of G consecutive outputs of one row (the caller checks it lies wholly in the row): their
// grad_y (g0 for each where grad_y is one broadcast value) and their saved in-window offsets, one vector load each.
template <typename T, typename OffT, int G, bool BCAST>
__device__ __forceinline__ void load_group(const T* __restrict__ gy, const OffT* __restrict__ off, float g0, float (&gv)[G],
                                           int (&ov)[G]) {
  constexpr int S = static_cast<int>(sizeof(OffT));
  if constexpr (BCAST) {
#pragma unroll
    for (int q = 0; q < G; ++q) gv[q] = g0;
  } else {
    load<T, G>(gy, gv);
  }
  const Words<G * S> w = load_words<G * S>(off);
#pragma unroll
  for (int q = 0; q < G; ++q) ov[q] = static_cast<int>(extract<S>(w, q));
}

// N elements of S bytes each (their bits in v) stored at p in pieces of at most 16 bytes (p aligned to them).
template <int S, int N, bool STREAM>
__device__ __forceinline__ void store_bits(void* __restrict__ p, const unsigned (&v)[N]) {
  constexpr int B = N * S;
  constexpr int PIECE = B < 16 ? B : 16;
  constexpr int PER = PIECE / S;
  static_assert(B % PIECE == 0 && PER >= 1, "whole pieces");
#pragma unroll
  for (int c = 0; c < B / PIECE; ++c) {
    Words<PIECE> r;
#pragma unroll
    for (int i = 0; i < (PIECE >= 4 ? PIECE / 4 : 1); ++i) r.w[i] = 0u;
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      if constexpr (S == 4) {
        r.w[e] = v[c * PER + e];
      } else {
        r.w[(e * S) / 4] |= v[c * PER + e] << (((e * S) % 4) * 8);
      }
    }
    store_words<PIECE, STREAM>(static_cast<char*>(p) + c * PIECE, r);
  }
}

// N floats stored as N elements of T.
template <typename T, int N, bool STREAM>
__device__ __forceinline__ void store(T* __restrict__ p, const float (&v)[N]) {
  unsigned b[N];
#pragma unroll
  for (int e = 0; e < N; ++e) b[e] = bits_of(from_float<T>(v[e]));
  store_bits<static_cast<int>(sizeof(T)), N, STREAM>(p, b);
}

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Packed pairs of a 2-byte type: two elements in one 32-bit word, element 0 in the low half (as loaded).
template <typename T> struct Packed;
template <> struct Packed<__half> {
  using P = __half2;
  static constexpr unsigned kNegInf = 0xfc00fc00u;  // -inf in both halves
};
template <> struct Packed<__nv_bfloat16> {
  using P = __nv_bfloat162;
  static constexpr unsigned kNegInf = 0xff80ff80u;
};

template <typename T>
__device__ __forceinline__ typename Packed<T>::P as_pair(unsigned w) {
  return *reinterpret_cast<const typename Packed<T>::P*>(&w);
}

// 0xffff in each half where a > b (ordered: false where either is NaN).
template <typename T>
__device__ __forceinline__ unsigned gt_mask(unsigned a, unsigned b) { return __hgt2_mask(as_pair<T>(a), as_pair<T>(b)); }

// Folds w into a NaN-propagating running max: any NaN folded in leaves NaN in that half.
template <typename T>
__device__ __forceinline__ unsigned nan_fold(unsigned acc, unsigned w) {
  const typename Packed<T>::P r = __hmax2_nan(as_pair<T>(acc), as_pair<T>(w));
  return *reinterpret_cast<const unsigned*>(&r);
}

template <typename T>
__device__ __forceinline__ bool has_nan(unsigned w) { return __hneu2_mask(as_pair<T>(w), as_pair<T>(w)) != 0u; }

// Elements i0 (low half) and i1 (high half) of packed words w; the indices are compile-time after unrolling.
template <int N>
__device__ __forceinline__ unsigned pair_of(const unsigned (&w)[N], int i0, int i1) {
  if (i0 % 2 == 0 && i1 == i0 + 1) return w[i0 / 2];
  return __byte_perm(w[i0 / 2], w[i1 / 2], (i0 % 2 ? 0x32 : 0x10) | ((i1 % 2 ? 0x76 : 0x54) << 8));
}

}  // namespace pool

namespace {

using T = float;
using OffT = uint8_t;  // saved in-window argmax offset (max pooling)

constexpr int D = 1, H = 2048, W = 2048, DO = 1, HO = 186, WO = 186;
constexpr int KD = 1, KH = 11, KW = 11;  // window (adaptive: the widest bin)
constexpr int SD = 1, SH = 11, SW = 11, PD = 0, PH = 0, PW = 0;
constexpr int DD = 1, DH = 1, DW = 1;
constexpr int EKD = (KD - 1) * DD + 1, EKH = (KH - 1) * DH + 1, EKW = (KW - 1) * DW + 1;  // effective window
constexpr int64_t IN_PLANE = static_cast<int64_t>(D) * H * W, OUT_PLANE = static_cast<int64_t>(DO) * HO * WO;
constexpr bool COUNT_INCLUDE_PAD = true;
constexpr int DIVISOR_OVERRIDE = 0;  // 0: none
constexpr int THREADS = 256;
constexpr int FWD_MIN_BLOCKS = 1, BWD_MIN_BLOCKS = 4;  // per SM: register caps
static_assert(IN_PLANE < (1LL << 31) && OUT_PLANE < (1LL << 31), "one plane is indexed with int");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Index of the first tap at or after 0 of a window starting at `start` with taps `dil` apart (PyTorch steps its
// start past the padding this way; the first in-bounds element is max pooling's initial argmax).
__host__ __device__ constexpr int first_tap(int start, int dil) { return start < 0 ? (-start + dil - 1) / dil : 0; }

// PyTorch's divisor for window (od, oh, ow); 0 when the window holds no input element (its output is 0).
// CONST_DIVISOR: the divisor when it is the same for every window (derived by kgen), else 0.
constexpr int CONST_DIVISOR = 121;
__device__ __forceinline__ int window_divisor(int od, int oh, int ow) {
  if constexpr (CONST_DIVISOR != 0) return CONST_DIVISOR;
  int ds = od * SD - PD, hs = oh * SH - PH, ws = ow * SW - PW;
  int de = kgen::imin(ds + KD, D + PD), he = kgen::imin(hs + KH, H + PH), we = kgen::imin(ws + KW, W + PW);
  const int pool_size = (de - ds) * (he - hs) * (we - ws);
  ds = kgen::imax(ds, 0); hs = kgen::imax(hs, 0); ws = kgen::imax(ws, 0);
  de = kgen::imin(de, D); he = kgen::imin(he, H); we = kgen::imin(we, W);
  if (ds >= de || hs >= he || ws >= we) return 0;
  if (DIVISOR_OVERRIDE != 0) return DIVISOR_OVERRIDE;
  return COUNT_INCLUDE_PAD ? pool_size : (de - ds) * (he - hs) * (we - ws);
}

// ---------------------------------------------------------------------------------------------- forward (colsum)
// The tuned AvgPool2d design: a tile is F_ROWS output rows x F_COLS output columns of one (n, c) plane. Stage 1:
// each thread sums VEC adjacent input columns down the window rows of every output row (all loads in flight) into
// shared memory. Stage 2: each output adds its KW column sums and divides by PyTorch's divisor.
static_assert(D == 1 && DO == 1 && KD == 1, "2-d only");
constexpr int VEC = 4;  // elements per 16-byte (or narrower) access; W % VEC == 0
constexpr int F_ROWS = 1, F_COLS = 186, F_THREADS = 512;
constexpr int F_ROW_TILES = (HO + F_ROWS - 1) / F_ROWS, F_COL_TILES = (WO + F_COLS - 1) / F_COLS;
constexpr int F_IN_ROWS = (F_ROWS - 1) * SH + KH;            // input rows one tile reads
constexpr int F_SPAN = 2052;                          // colsum row length (>= input columns of a tile)
static_assert(F_IN_ROWS == 11, "rows per tile");
static_assert(W % VEC == 0, "vector width must divide W");
static_assert(F_SPAN % VEC == 0 && F_ROWS * F_SPAN <= 12 * 1024, "colsum fits 48 KB of shared memory");

__device__ __forceinline__ void finish_tile(const float* __restrict__ colsum, T* __restrict__ y, int64_t plane,
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
      const int div = window_divisor(0, oh, ow);
      y[(plane * HO + oh) * WO + ow] = pool::from_float<T>(div ? s / static_cast<float>(div) : 0.f);
    }
  }
}

// Adds input row j of the tile into every output row whose window holds it.
__device__ __forceinline__ void accumulate(float (&acc)[F_ROWS][VEC], const float (&v)[VEC], int j) {
#pragma unroll
  for (int r = 0; r < F_ROWS; ++r) {
    if (j >= r * SH && j < r * SH + KH) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[r][e] += v[e];
    }
  }
}

// Persistent forward (a row tile spans the whole width and one vector chunk per thread): each thread owns the same
// VEC input columns of every tile and keeps the NEXT tile's F_IN_ROWS loads in flight in registers while the block
// finishes the current tile, so memory never idles between tiles.
template <bool WY, bool WI, bool WS>
__global__ void __launch_bounds__(F_THREADS, 1) kgen_pool_10796d68_fwd(const T* __restrict__ x, T* __restrict__ y,
                                                            int64_t* __restrict__ idx, OffT* __restrict__ off,
                                                            int64_t tiles) {
  __shared__ float colsum[F_ROWS * F_SPAN];
  constexpr int CA = kgen::floor_div(-PW, VEC) * VEC;
  constexpr int C_HI = kgen::imin((WO - 1) * SW - PW + KW, W);
  const int col = kgen::imax(CA, 0) + threadIdx.x * VEC;
  const bool active = col < C_HI;
  float v[F_IN_ROWS][VEC];
  auto fetch = [&](int64_t tile) {
    const int64_t plane = tile / F_ROW_TILES;
    const int ih0 = static_cast<int>(tile % F_ROW_TILES) * F_ROWS * SH - PH;
    const T* __restrict__ xp = x + plane * IN_PLANE + col;
#pragma unroll
    for (int j = 0; j < F_IN_ROWS; ++j) {
      const int ih = ih0 + j;
      if (active && ih >= 0 && ih < H) {
        pool::load<T, VEC>(xp + static_cast<int64_t>(ih) * W, v[j]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[j][e] = 0.f;
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

// ---------------------------------------------------------------------------------------------- backward (colsum)
// One block per tile of input rows x columns (grid-stride). Stage 1: for each tile row, gh[ow] = sum over the
// windows (oh, ow) covering that row of grad_y / divisor. Stage 2: grad_x[ih, iw] = sum of gh over the windows
// covering column iw; every element of grad_x is written (0 where no window reaches), with streaming stores.
constexpr int B_VEC = 4;
constexpr int B_ROWS = 8, B_COLS = 2048, B_THREADS = 512;
constexpr int B_ROW_TILES = (H + B_ROWS - 1) / B_ROWS, B_COL_TILES = (W + B_COLS - 1) / B_COLS;
constexpr int B_GW = (B_COLS + KW - 2) / SW + 2;              // output columns touching one tile's columns
constexpr int NCAND_H = (KH + SH - 1) / SH, NCAND_W = (KW + SW - 1) / SW;  // windows covering one row / column
static_assert(B_COLS % B_VEC == 0 && W % B_VEC == 0, "vector width must divide the backward tile");
static_assert(B_ROWS * B_GW <= 12 * 1024, "gh fits 48 KB of shared memory");

template <bool BCAST>  // BCAST: grad_y is one value broadcast over the output (every stride 0)
__global__ void __launch_bounds__(B_THREADS, 1024 / B_THREADS) kgen_pool_10796d68_bwd(const T* __restrict__ gy, const OffT* __restrict__ off,
                                                            T* __restrict__ gx, int64_t tiles) {
  __shared__ float gh[B_ROWS * B_GW];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t plane = tile / (B_ROW_TILES * B_COL_TILES);
    const int rem = static_cast<int>(tile % (B_ROW_TILES * B_COL_TILES));
    const int ih0 = (rem / B_COL_TILES) * B_ROWS, c0 = (rem % B_COL_TILES) * B_COLS;
    const int a = c0 + PW - KW + 1;
    const int ow_lo = a <= 0 ? 0 : (a + SW - 1) / SW;
    const int ow_hi = kgen::imin(WO - 1, (c0 + B_COLS - 1 + PW) / SW);
    const T* __restrict__ gyp = gy + (BCAST ? 0 : plane * OUT_PLANE);
    for (int i = threadIdx.x; i < B_ROWS * B_GW; i += B_THREADS) {
      const int rr = i / B_GW, ow = ow_lo + i % B_GW, ih = ih0 + rr;
      float s = 0.f;
      if (ih < H && ow <= ow_hi) {
        const int oh_hi = kgen::imin(HO - 1, (ih + PH) / SH);
#pragma unroll
        for (int c = 0; c < NCAND_H; ++c) {
          const int oh = oh_hi - c;
          if (oh >= 0 && oh * SH - PH + KH > ih) {
            const int div = window_divisor(0, oh, ow);
            if (div) s += pool::to_float(gyp[BCAST ? 0 : static_cast<int64_t>(oh) * WO + ow]) / static_cast<float>(div);
          }
        }
      }
      gh[i] = s;
    }
    __syncthreads();
    T* __restrict__ gxp = gx + plane * IN_PLANE;
    for (int i = threadIdx.x; i < B_ROWS * (B_COLS / B_VEC); i += B_THREADS) {
      const int rr = i / (B_COLS / B_VEC), ih = ih0 + rr, col = c0 + (i % (B_COLS / B_VEC)) * B_VEC;
      if (ih < H && col < W) {
        float out[B_VEC];
#pragma unroll
        for (int e = 0; e < B_VEC; ++e) {
          const int iw = col + e;
          const int ow_top = kgen::imin(WO - 1, (iw + PW) / SW);
          float s = 0.f;
#pragma unroll
          for (int c = 0; c < NCAND_W; ++c) {
            const int ow = ow_top - c;
            if (ow >= 0 && ow * SW - PW + KW > iw) s += gh[rr * B_GW + (ow - ow_lo)];
          }
          out[e] = s;
        }
        pool::store<T, B_VEC, true>(gxp + static_cast<int64_t>(ih) * W + col, out);
      }
    }
    __syncthreads();
  }
}

}  // namespace

// Forward: writes y, int64 indices and saved argmax offsets where their pointers are non-null (the combinations
// the binding asks for). planes = N * C (C for unbatched input).
extern "C" cudaError_t kgen_pool_10796d68_forward(const void* x, void* y, int64_t* indices, void* offsets, int64_t planes,
                                          cudaStream_t stream) {
  if (planes == 0) return cudaSuccess;
  const T* xt = static_cast<const T*>(x);
  T* yt = static_cast<T*>(y);
  OffT* ot = static_cast<OffT*>(offsets);
  const int64_t tiles = planes * F_ROW_TILES * F_COL_TILES;
  static std::atomic<int64_t> resident_cache[kgen::kMaxDevices];
  void (*kernel)(const T*, T*, int64_t*, OffT*, int64_t) = kgen_pool_10796d68_fwd<true, false, false>;
  const int64_t resident = kgen::resident_blocks(kernel, F_THREADS, 0, resident_cache);
  if (resident <= 0) return cudaErrorInvalidConfiguration;
  const unsigned grid = kgen::grid_for(tiles < resident ? tiles : resident);
  constexpr int block = F_THREADS;
  const int64_t work = tiles;
  if (y && !indices && !offsets) {
    kgen_pool_10796d68_fwd<true, false, false><<<grid, block, 0, stream>>>(xt, yt, indices, ot, work);
    return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

// Backward: grad_x from grad_y (grad_y_bcast: one value broadcast over the output) and, for max pooling, the saved
// argmax offsets.
extern "C" cudaError_t kgen_pool_10796d68_backward(const void* grad_y, int grad_y_bcast, const void* offsets, void* grad_x,
                                           int64_t planes, cudaStream_t stream) {
  if (planes == 0) return cudaSuccess;
  const T* gyt = static_cast<const T*>(grad_y);
  const OffT* ot = static_cast<const OffT*>(offsets);
  T* gxt = static_cast<T*>(grad_x);
  const int64_t work = planes * B_ROW_TILES * B_COL_TILES;
  const unsigned grid = kgen::grid_for(work);
  constexpr int block = B_THREADS;
  if (grad_y_bcast) {
    kgen_pool_10796d68_bwd<true><<<grid, block, 0, stream>>>(gyt, ot, gxt, work);
  } else {
    kgen_pool_10796d68_bwd<false><<<grid, block, 0, stream>>>(gyt, ot, gxt, work);
  }
  return cudaGetLastError();
}
