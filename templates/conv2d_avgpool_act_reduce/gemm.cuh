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
// sum = (first ? 0 : sum) + c, then c = 0 (every element; fully unrolled)
template <int A, int B, int C>
__device__ __forceinline__ void add_and_zero(float (&sum)[A][B][C], float (&c)[A][B][C], bool first) {
#pragma unroll
    for (int i = 0; i < A; ++i)
#pragma unroll
        for (int j = 0; j < B; ++j)
#pragma unroll
            for (int r = 0; r < C; ++r) {
                sum[i][j][r] = first ? c[i][j][r] : sum[i][j][r] + c[i][j][r];
                c[i][j][r] = 0.0f;
            }
}

// ---- the swizzled operand layout and m16n8k8 fragments from it (lane = 4*g + t) ----
// As, Ws and Dp hold element (row, col) at row * S + (col ^ (row & 4)) with a row stride S = 8 mod 16 (KP, CP): bit 2
// of the column flipped on rows with bit 2 set. Both fragment read patterns are then free of bank conflicts: 8 rows x
// 4 columns (rows g, columns t: A fragments, GEMM1's B) and 4 rows x 8 columns (rows t, columns g: the operands of
// grad_w, GEMM3's B), where a plain stride serves only one of the two. Row blocks start at multiples of 8, so bit 2 of
// a fragment row is bit 2 of g (or 0 for rows t, 1 for rows t + 4).
template <int S>
__device__ __forceinline__ int swz(int row, int col) { return row * S + (col ^ (row & 4)); }
// This lane's offsets, computed once per kernel: kcol is its column t on rows g (t ^ (g & 4)), and dcol the step from
// its element in column c to the one in column c ^ 4 of the same row block, (g & 4) ? -4 : 4: the second column of an
// 8 x 4 fragment (rows g), or, in a 4 x 8 fragment (rows t, columns g), the column of row t + 4.
struct Lane { int g, t, kcol, dcol; };
__device__ __forceinline__ Lane lane_of(int lane) {
    const int g = lane >> 2, t = lane & 3;
    return Lane{g, t, t ^ (g & 4), 4 - ((g & 4) << 1)};
}
// One fragment element: split (kg_split), or RAW: a value staged already rounded to TF32 (staged<false>), whose bits
// are hi as they are (the one-pass TF32 mode reads only hi)
template <bool RAW>
__device__ __forceinline__ void frag_elem(float v, uint32_t& hi, uint32_t& lo) {
    if constexpr (RAW) { hi = __float_as_uint(v); lo = 0u; }
    else kg_split(v, hi, lo);
}
// A (16 x 8): the lane holds rows g, g+8 of columns t, t+4: p[0] (row g, column t), p[8 * RS] (row g+8), p[o4]
// (column t+4), p[8 * RS + o4]. On the swizzled layout: rows g at row stride RS with o4 = dcol (p at column kcol), or
// transposed (rows of the fragment along a stored row, RS = 1) with o4 = 4 * S + dcol.
template <int RS, bool RAW = false>
__device__ __forceinline__ void load_a(KgAFrag& a, const float* p, int o4) {
    frag_elem<RAW>(p[0], a.h[0], a.l[0]);
    frag_elem<RAW>(p[8 * RS], a.h[1], a.l[1]);
    frag_elem<RAW>(p[o4], a.h[2], a.l[2]);
    frag_elem<RAW>(p[8 * RS + o4], a.h[3], a.l[3]);
}
// the same with columns t scaled by s0 and columns t+4 by s1
template <int RS>
__device__ __forceinline__ void load_a(KgAFrag& a, const float* p, int o4, float s0, float s1) {
    kg_split(p[0] * s0, a.h[0], a.l[0]);
    kg_split(p[8 * RS] * s0, a.h[1], a.l[1]);
    kg_split(p[o4] * s1, a.h[2], a.l[2]);
    kg_split(p[8 * RS + o4] * s1, a.h[3], a.l[3]);
}
// B (8 x 8, k x n): the lane holds rows t, t+4 of column g: p[0] and p[o4] (o4 as load_a's: dcol where k runs along
// a stored row, 4 * S + dcol where it runs down the rows)
template <bool RAW = false>
__device__ __forceinline__ void load_b(KgBFrag& b, const float* p, int o4) {
    frag_elem<RAW>(p[0], b.h[0], b.l[0]);
    frag_elem<RAW>(p[o4], b.h[1], b.l[1]);
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
__device__ __forceinline__ void gemm1(const float* As, const float* Ws, int co0, int mt0, const Lane& L,
                                      float (&acc)[MTW][NT8][4]) {
    const int warp = mt0, lane = 4 * L.g + L.t;
#pragma unroll
    for (int ks = 0; ks < KN8; ++ks) {
        KgAFrag a[MTW];
#pragma unroll
        for (int i = 0; i < MTW; ++i) {
            const int mt = warp + NW * i;
            if (mt < MT) load_a<KP, !X3>(a[i], As + (mt * 16 + L.g) * KP + ks * 8 + L.kcol, L.dcol);
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
            KgBFrag b;
            if constexpr (WF)
                load_b(b, reinterpret_cast<const float4*>(Ws)[(ks * (CO_ALL / 8) + co0 / 8 + j) * 32 + lane]);
            else load_b<!X3>(b, Ws + (co0 + j * 8 + L.g) * KP + ks * 8 + L.kcol, L.dcol);
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
