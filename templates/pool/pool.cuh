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
