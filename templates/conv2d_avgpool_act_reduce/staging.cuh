// ---------------- staging (conv2d_avgpool_act_reduce/staging.cuh) ----------------
// Shared memory of one tile and K chunk: W scaled by 1/DIV (plain, or as pre-split tf32 B fragments) and the box
// sums As of the tile's pooled positions, straight from x. Plain CUDA, included by kernel.cu.j2 after the problem
// constants it reads.

// W[co, ch*CI_CHUNK*KK + kk] / DIV (element kk of K chunk ch of output channel co), 0 at the padding of the
// CO_ALL x KC8 chunk
__device__ __forceinline__ float w_scaled(const float* __restrict__ w, int co, int kk, int ch) {
    float v = 0.0f;
    if (co < CO && kk < KC && ch * CI_CHUNK + kk / KK < CI)
        v = __ldg(w + (size_t)co * KTOT + (size_t)ch * CI_CHUNK * KK + kk) / (float)DIV;
    return v;
}

// v as staged for the GEMMs: as is for 3xTF32 (X3, split at each fragment load), else rounded to TF32 once here, so
// the one-pass fragment loads take the bits as they are (load_a / load_b with RAW)
template <bool X3>
__device__ __forceinline__ float staged(float v) {
    if constexpr (X3) return v;
    else return __uint_as_float(tf32_rna(v));
}

// Ws[co][kk] = W[co, ch*CI_CHUNK*KK + kk] / DIV, zero padded to CO_ALL x KP, swizzled (swz<KP>)
template <bool X3>
__device__ __forceinline__ void stage_w(float* Ws, const float* __restrict__ w, int ch) {
    for (int idx = threadIdx.x; idx < CO_ALL * KP; idx += NT) {
        const int co = idx / KP, kk = idx - co * KP;
        Ws[swz<KP>(co, kk)] = staged<X3>(w_scaled(w, co, kk, ch));
    }
}

// Wf[(ks*(CO_ALL/8) + j)*32 + lane] = {hi(b0), hi(b1), lo(b0), lo(b1)}: the m16n8k8 B fragment of lane
// for k-step ks and n-tile j (b0 = W[j*8+g][ks*8+t]/DIV, b1 = W[j*8+g][ks*8+t+4]/DIV)
__device__ __forceinline__ void stage_wfrag(float4* Wf, const float* __restrict__ w, int ch) {
    constexpr int NJ = CO_ALL / 8;
    for (int idx = threadIdx.x; idx < KN8 * NJ * 32; idx += NT) {
        const int lane = idx & 31, j = (idx >> 5) % NJ, ks = (idx >> 5) / NJ;
        const int co = j * 8 + (lane >> 2), k0 = ks * 8 + (lane & 3);
        float bv[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) bv[e] = w_scaled(w, co, k0 + 4 * e, ch);
        uint32_t h0, l0, h1, l1;
        kg_split(bv[0], h0, l0);
        kg_split(bv[1], h1, l1);
        Wf[idx] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
    }
}

// W of K chunk ch into shared memory: pre-split B fragments (WF, read back as float4) or plain Ws (staged<X3>)
template <bool WF, bool X3>
__device__ __forceinline__ void stage_weights(float* Ws, const float* w, int ch) {
    if constexpr (WF) stage_wfrag(reinterpret_cast<float4*>(Ws), w, ch);
    else stage_w<X3>(Ws, w, ch);
}

// horizontal box sums of input row r of one channel plane xp, its columns from c0 (clamped to valid addresses and
// zeroed outside the image, or where !ok): h[kx] = sum_j v[j*SW + kx*DW]. Every load is unconditional, so the row's
// loads are in flight together.
__device__ __forceinline__ void row_hsums(const float* __restrict__ xp, int r, int c0, bool ok, float (&h)[KW]) {
    float v[VW];
    const bool rok = NEED_BOUNDS ? (ok && (unsigned)r < (unsigned)H) : true;
    const float* rowp = xp + (size_t)(rok ? r : 0) * W;
    if constexpr (VEC4) {
#pragma unroll
        for (int q = 0; q < PC4; ++q) {
            const int c = c0 + 4 * q;
            const bool cok = NEED_BOUNDS ? (rok && (unsigned)c < (unsigned)W) : true;
            const float4 t = __ldg(reinterpret_cast<const float4*>(rowp + (cok ? c : 0)));
            v[4 * q + 0] = cok ? t.x : 0.0f;
            v[4 * q + 1] = cok ? t.y : 0.0f;
            v[4 * q + 2] = cok ? t.z : 0.0f;
            v[4 * q + 3] = cok ? t.w : 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < PC; ++j) {
            if (!col_used(j)) { v[j] = 0.0f; continue; }
            const int c = c0 + j;
            const bool cok = NEED_BOUNDS ? (rok && (unsigned)c < (unsigned)W) : true;
            const float t = __ldg(rowp + (cok ? c : 0));
            v[j] = cok ? t : 0.0f;
        }
    }
    if constexpr (SW == 1 && DW == 1) {   // sliding window
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < PKW; ++j) t += v[j];
        h[0] = t;
#pragma unroll
        for (int kx = 1; kx < KW; ++kx) h[kx] = h[kx - 1] - v[kx - 1] + v[kx - 1 + PKW];
    } else {
#pragma unroll
        for (int kx = 0; kx < KW; ++kx) {
            float t = 0.0f;
#pragma unroll
            for (int j = 0; j < PKW; ++j) t += v[j * SW + kx * DW];
            h[kx] = t;
        }
    }
}

// As[m][cl*KK + ky*KW + kx] = box sums for positions m of a tile (row-major EW wide), channel chunk ch (staged<X3>),
// swizzled (swz<KP>). Windows of up to STREAM_LOADS loads: all PR rows' loads of an item in flight together, the rows
// summed into hs and then down the columns. Larger windows (STREAM_ROWS; all their loads at once, each with a 64-bit
// address, spilled at the 255-register cap) take one row at a time, adding it into the taps it belongs to (the
// column sums' order of additions, except for the sliding window of SH = DH = 1).
template <int EW, int M, int MPAD, int UNR, bool X3>
__device__ __forceinline__ void compute_as(const float* __restrict__ x, float* As, long long img, int ch,
                                           int ph_base, int pw_base) {
    constexpr int ITEMS = CI_CHUNK * MPAD, ITER = (ITEMS + NT - 1) / NT;
#pragma unroll UNR
    for (int it = 0; it < ITER; ++it) {
        const int idx = threadIdx.x + it * NT;
        if (ITEMS % NT != 0 && idx >= ITEMS) break;
        const int cl = idx / MPAD, m = idx - cl * MPAD;
        const int ci = ch * CI_CHUNK + cl;
        const int eh = m / EW, ew = m - eh * EW;
        const int ph = ph_base + eh, pw = pw_base + ew;
        const bool ok = (m < M) && (ci < CI) && ph >= 0 && ph < PHO && pw >= 0 && pw < PWO;
        // without padding, clamp invalid positions to (0,0) (in bounds) and zero the result at the end
        const int r0 = NEED_BOUNDS ? ph * S_H - PH : (ok ? ph * S_H : 0);
        const int c0 = NEED_BOUNDS ? pw * S_W - PW : (ok ? pw * S_W : 0);
        const float* xp = x + ((size_t)img * CI + (ok ? ci : 0)) * (size_t)(H * W);
        float acc[KH][KW];
        if constexpr (STREAM_ROWS) {
            zero(acc);
#pragma unroll 1
            for (int rr = 0; rr < PR; ++rr) {
                if (!row_used(rr)) continue;
                float h[KW];
                row_hsums(xp, r0 + rr, c0, ok, h);
#pragma unroll
                for (int ky = 0; ky < KH; ++ky) {
                    const int i = rr - ky * DH;   // row rr is row i of tap row ky's pool window
                    if (i >= 0 && i % SH == 0 && i / SH < PKH)
#pragma unroll
                        for (int kx = 0; kx < KW; ++kx) acc[ky][kx] += h[kx];
                }
            }
        } else {
            float hs[PR][KW];   // horizontal box sums per used row
#pragma unroll
            for (int rr = 0; rr < PR; ++rr) {
                if (!row_used(rr)) {
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) hs[rr][kx] = 0.0f;
                    continue;
                }
                row_hsums(xp, r0 + rr, c0, ok, hs[rr]);
            }
            if constexpr (SH == 1 && DH == 1) {   // sliding window over rows
#pragma unroll
                for (int kx = 0; kx < KW; ++kx) {
                    float t = 0.0f;
#pragma unroll
                    for (int i = 0; i < PKH; ++i) t += hs[i][kx];
                    acc[0][kx] = t;
#pragma unroll
                    for (int ky = 1; ky < KH; ++ky)
                        acc[ky][kx] = acc[ky - 1][kx] - hs[ky - 1][kx] + hs[ky - 1 + PKH][kx];
                }
            } else {
#pragma unroll
                for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) {
                        float t = 0.0f;
#pragma unroll
                        for (int i = 0; i < PKH; ++i) t += hs[i * SH + ky * DH][kx];
                        acc[ky][kx] = t;
                    }
            }
        }
        if constexpr (!NEED_BOUNDS) {
#pragma unroll
            for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                for (int kx = 0; kx < KW; ++kx) acc[ky][kx] = ok ? acc[ky][kx] : 0.0f;
        }
#pragma unroll
        for (int ky = 0; ky < KH; ++ky)
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) As[swz<KP>(m, cl * KK + ky * KW + kx)] = staged<X3>(acc[ky][kx]);
    }
    if constexpr (KC8 > KC) {
        for (int idx = threadIdx.x; idx < MPAD * (KC8 - KC); idx += NT) {
            const int m = idx / KPADW, j = idx - m * KPADW;
            As[swz<KP>(m, KC + j)] = 0.0f;
        }
    }
}

// Barrier; K chunk ch into shared memory: its W (with K chunks only: otherwise the block stages W once, before its
// first tile) and the box sums As of the tile's positions, as staged for mode X3; barrier.
template <int EW, int M, int MPAD, int UNR, bool WF, bool X3>
__device__ __forceinline__ void stage_chunk(const float* x, const float* w, float* Ws, float* As, long long img, int ch,
                                            int ph_base, int pw_base) {
    __syncthreads();
    if constexpr (NCHUNK > 1) stage_weights<WF, X3>(Ws, w, ch);
    compute_as<EW, M, MPAD, UNR, X3>(x, As, img, ch, ph_base, pw_base);
    __syncthreads();
}
