// ---------------- tensor-core GEMM pieces (conv2d_avgpool_act_reduce/gemm.cuh) ----------------
// m16n8k8 fragment loaders from shared memory and GEMM1 (box sums x W^T), in 3xTF32 (X3) or one TF32 pass. Plain
// CUDA, included by kernel.cu.j2 after the problem constants it reads.

// c = 0 (every element; fully unrolled)
template <int A, int B>
__device__ __forceinline__ void zero(float (&c)[A][B]) {
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < B; ++j) c[i][j] = 0.0f;
}
template <int A, int B, int C>
__device__ __forceinline__ void zero(float (&c)[A][B][C]) {
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < B; ++j)
#pragma unroll
            for (int r = 0; r < C; ++r) c[i][j][r] = 0.0f;
}

// ---- m16n8k8 fragments from shared memory, split into tf32 hi/lo (lane = 4*g + t) ----
// One fragment element: split (kg_split), or RAW: a value staged already rounded to TF32 (staged<false>), whose bits
// are hi as they are (the one-pass TF32 mode reads only hi)
template <bool RAW>
__device__ __forceinline__ void frag_elem(float v, uint32_t& hi, uint32_t& lo) {
    if constexpr (RAW) { hi = __float_as_uint(v); lo = 0u; }
    else kg_split(v, hi, lo);
}
// A (16 x 8): element (row, col) at p[row*RS + col*CS], p pointing at (g, t); the lane holds rows g, g+8 of
// columns t, t+4.
template <int RS, int CS, bool RAW = false>
__device__ __forceinline__ void load_a(KgAFrag& a, const float* p) {
    frag_elem<RAW>(p[0], a.h[0], a.l[0]);
    frag_elem<RAW>(p[8 * RS], a.h[1], a.l[1]);
    frag_elem<RAW>(p[4 * CS], a.h[2], a.l[2]);
    frag_elem<RAW>(p[8 * RS + 4 * CS], a.h[3], a.l[3]);
}
// the same with column t scaled by s0 and column t+4 by s1
template <int RS, int CS>
__device__ __forceinline__ void load_a(KgAFrag& a, const float* p, float s0, float s1) {
    kg_split(p[0] * s0, a.h[0], a.l[0]);
    kg_split(p[8 * RS] * s0, a.h[1], a.l[1]);
    kg_split(p[4 * CS] * s1, a.h[2], a.l[2]);
    kg_split(p[8 * RS + 4 * CS] * s1, a.h[3], a.l[3]);
}
// B (8 x 8, k x n): element (k, n) at p[k*KS + n], p pointing at (t, g); the lane holds rows t, t+4 of column g.
template <int KS, bool RAW = false>
__device__ __forceinline__ void load_b(KgBFrag& b, const float* p) {
    frag_elem<RAW>(p[0], b.h[0], b.l[0]);
    frag_elem<RAW>(p[4 * KS], b.h[1], b.l[1]);
}
// B pre-split by stage_wfrag: {hi(b0), hi(b1), lo(b0), lo(b1)}
__device__ __forceinline__ void load_b(KgBFrag& b, const float4 v) {
    b.h[0] = __float_as_uint(v.x); b.h[1] = __float_as_uint(v.y);
    b.l[0] = __float_as_uint(v.z); b.l[1] = __float_as_uint(v.w);
}

// GEMM1: acc[i][j] (m-tile mt0+NW*i, n-tile j of channel pass co0) += As * Ws^T over this K chunk; W as staged by
// stage_weights<WF, X3> and the box sums by compute_as<..., X3> (RAW loads where !X3). X3: the three 3xTF32
// products are three passes over the m-tiles, so their mma chains interleave; else only the last pass (the product
// of the TF32-rounded operands).
template <int MT, int MTW, bool WF, bool X3>
__device__ __forceinline__ void gemm1(const float* As, const float* Ws, int co0, int mt0, float (&acc)[MTW][NT8][4]) {
    const int warp = mt0, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ks = 0; ks < KN8; ++ks) {
        KgAFrag a[MTW];
#pragma unroll
        for (int i = 0; i < MTW; ++i) {
            const int mt = warp + NW * i;
            if (mt < MT) load_a<KP, 1, !X3>(a[i], As + (mt * 16 + g) * KP + ks * 8 + t);
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
            KgBFrag b;
            if constexpr (WF)
                load_b(b, reinterpret_cast<const float4*>(Ws)[(ks * (CO_ALL / 8) + co0 / 8 + j) * 32 + lane]);
            else load_b<1, !X3>(b, Ws + (co0 + j * 8 + g) * KP + ks * 8 + t);
            if constexpr (X3) {
#pragma unroll
                for (int i = 0; i < MTW; ++i)
                    if (warp + NW * i < MT) kg_mma(acc[i][j], a[i].l[0], a[i].l[1], a[i].l[2], a[i].l[3], b.h[0], b.h[1]);
#pragma unroll
                for (int i = 0; i < MTW; ++i)
                    if (warp + NW * i < MT) kg_mma(acc[i][j], a[i].h[0], a[i].h[1], a[i].h[2], a[i].h[3], b.l[0], b.l[1]);
            }
#pragma unroll
            for (int i = 0; i < MTW; ++i)
                if (warp + NW * i < MT) kg_mma(acc[i][j], a[i].h[0], a[i].h[1], a[i].h[2], a[i].h[3], b.h[0], b.h[1]);
        }
    }
}
