// ---------------- backward (conv2d_avgpool_act_reduce/backward.cuh) ----------------
// One __device__ function per phase of a backward tile, the persistent kernel that runs them between barriers, and
// the fixed-order sum of the blocks' grad_w / grad_b partials. Plain CUDA, included by kernel.cu.j2 after the
// problem constants it reads. Functions that take (warp, L) get this thread's warp and its lane's fragment row g,
// column t (lane = 4*g + t) and swizzle offsets (Lane, gemm.cuh) from the kernel.

// The backward's shared memory (B_SMEM bytes): Ws (W/DIV of the K chunk), As (box sums; GEMM3 overwrites them with
// dBs, stored plain: the gather reads them), Dp (dpre, positions x channels), mask (1 at the tile's core positions),
// bias * BSCALE. Ws, As (box sums) and Dp are swizzled (swz<KP>, swz<CP>).
struct BwdSmem { float* Ws; float* As; float* Dp; float* mask; float* bias_s; };
// One backward tile: sample img, core tile (th, tw) of pooled positions; its extended tile (core + halo) starts at
// pooled position (ph_base, pw_base).
struct BwdTile { long long img; int th, tw, ph_base, pw_base; };

// Phase 1: mask[m] = 1 at the core positions of the tile (owned by it: grad_w, grad_b and grad_x count them once),
// 0 at the halo, outside the pooled output and at the padding positions.
__device__ __forceinline__ void bwd_mark_core(float* mask, const BwdTile& tile) {
#pragma unroll
    for (int k = 0; k < (B_MPAD + NT - 1) / NT; ++k) {
        const int m = threadIdx.x + k * NT;
        if (B_MPAD % NT != 0 && m >= B_MPAD) break;
        const int eh = m / B_EW, ew = m - eh * B_EW;
        const bool core = m < B_M && eh >= HALO_H && ew >= HALO_W && tile.ph_base + eh < PHO && tile.pw_base + ew < PWO;
        mask[m] = core ? 1.0f : 0.0f;
    }
}

// Phase 2, GEMM1: Dp[m][co] = gval * act'(pre[m][co]) at every extended position (core and halo), 0 outside the
// pooled output and at padding channels; pre = As * (W/DIV)^T + bias * BSCALE, recomputed from the box sums.
// Stages each K chunk (barrier, W and box sums, barrier) before its first use.
// Without K chunks, one m-tile per sweep (NT8 x 4 accumulators live, not B_MTW x NT8 x 4: the pair spills
// at 128 registers on some shapes); with K chunks the accumulators must outlive each chunk's box sums, and each chunk's
// sums are added into Dp (this thread's own elements, in float32) and the accumulators restarted: one mma chain over
// every chunk (17 chunks x 27 mma on a 7x5 kernel over 33 channels) left pre, and so grad_w through dpre, about 15x
// further from float64 than eager (sweep seed 4901; tests/dev/cases/sweep4901_k7x5_pool1x2s3_gelu_tanh.py).
// this lane's elements acc[.][j][2h], acc[.][j][2h + 1] of m-tile mt in Dp (row mt * 16 + g + 8h, channels co0 and
// co0 + 1 of channel pass cc), as one float2
__device__ __forceinline__ float2* dp_pair(float* Dp, int mt, int cc, int j, int h, const Lane& L) {
    return reinterpret_cast<float2*>(Dp + swz<CP>(mt * 16 + L.g + 8 * h, cc * COCH + j * 8 + 2 * L.t));
}
template <int MTW>
__device__ __forceinline__ void g1_flush(float* Dp, float (&acc)[MTW][NT8][4], int cc, int mt0, const Lane& L,
                                         bool first) {
#pragma unroll
    for (int i = 0; i < MTW; ++i) {
        const int mt = mt0 + NW * i;
        if (mt >= B_MT) continue;
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float2* p = dp_pair(Dp, mt, cc, j, h, L);
                const float2 v = first ? make_float2(0.0f, 0.0f) : *p;
                *p = make_float2(v.x + acc[i][j][2 * h], v.y + acc[i][j][2 * h + 1]);
                acc[i][j][2 * h] = acc[i][j][2 * h + 1] = 0.0f;
            }
    }
}

template <bool X3>
__device__ __forceinline__ void bwd_dpre(const float* x, const float* w, const BwdSmem& s, const BwdTile& tile,
                                         float gval, int warp, const Lane& L) {
    constexpr int G1_SWEEPS = NCHUNK == 1 ? B_MTW : 1, G1_MTW = NCHUNK == 1 ? 1 : B_MTW;
    for (int cc = 0; cc < NCO_CH; ++cc) {
#pragma unroll 1
        for (int sweep = 0; sweep < G1_SWEEPS; ++sweep) {
            float acc[G1_MTW][NT8][4];
            zero(acc);
            for (int ch = 0; ch < NCHUNK; ++ch) {
                if ((NCHUNK > 1 || cc == 0) && sweep == 0)
                    stage_chunk<B_EW, B_M, B_MPAD, BSU, false, X3>(x, w, s.Ws, s.As, tile.img, ch, tile.ph_base,
                                                                   tile.pw_base);
                gemm1<B_MT, G1_MTW, false, X3>(s.As, s.Ws, cc * COCH, warp + NW * sweep, L, acc);
                if (NCHUNK > 1 && ch + 1 < NCHUNK) g1_flush(s.Dp, acc, cc, warp + NW * sweep, L, ch == 0);
            }
#pragma unroll
            for (int i = 0; i < G1_MTW; ++i) {
                const int mt = warp + NW * (sweep + i);
                if (mt >= B_MT) continue;
                bool rv[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = mt * 16 + L.g + 8 * h;
                    const int eh = m / B_EW, ew = m - eh * B_EW;
                    const int ph = tile.ph_base + eh, pw = tile.pw_base + ew;
                    rv[h] = m < B_M && ph >= 0 && ph < PHO && pw >= 0 && pw < PWO;
                }
#pragma unroll
                for (int j = 0; j < NT8; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {   // rows g + 8h: channels co0, co0 + 1 as one float2
                        const int co0 = cc * COCH + j * 8 + 2 * L.t;
                        float2* p = dp_pair(s.Dp, mt, cc, j, h, L);
                        float pre[2] = {acc[i][j][2 * h], acc[i][j][2 * h + 1]};
                        if constexpr (NCHUNK > 1) {   // plus the earlier chunks' sums
                            const float2 fl = *p;
                            pre[0] += fl.x;
                            pre[1] += fl.y;
                        }
                        float d[2];
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int co = co0 + e;
                            const float v = gval * Act::grad(pre[e] + s.bias_s[co]);
                            d[e] = (rv[h] && (CO == CO_ALL || co < CO)) ? v : 0.0f;
                        }
                        *p = make_float2(d[0], d[1]);
                    }
            }
        }
    }
}

// Phase 3, grad_b partial: this block's slice of grad_b += the sum over the tile's core positions of dpre, per
// channel (DB_SEG threads per channel, added in a fixed shuffle order). The first tile stores instead of adding:
// the slice is uninitialised until then.
__device__ __forceinline__ void bwd_grad_b(const BwdSmem& s, float* part_b, bool first) {
    for (int base = 0; base < CO_ALL * DB_SEG; base += NT) {
        const int idx = base + threadIdx.x;
        const int co = idx / DB_SEG, sg = idx - co * DB_SEG;
        float sum = 0.0f;
        if (co < CO)
            for (int m = DW_MS0 * 8 + sg; m < B_M; m += DB_SEG) sum += s.Dp[swz<CP>(m, co)] * s.mask[m];
#pragma unroll
        for (int o = DB_SEG / 2; o >= 1; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (sg == 0 && co < CO) {
            float* p = part_b + co;
            if (first) *p = sum; else *p += sum;   // never read the (uninitialised) slice on the first tile
        }
    }
}

// Phase 4, grad_w partial of K chunk ch: this block's slice dW[co][kk] += sum_m dpre[m][co]*mask[m] * As[m][kk], a
// CO_ALL x KC8 GEMM over the 8-position steps that hold core positions (DW_MS0 .. DW_MS1), in 3xTF32. The chunk is
// given by its first input channel ci0 = ch * CI_CHUNK and its offset koff = ch * CI_CHUNK * KK in a row of the
// slice; element (co, kk) is real (not padding) where co < CO && kk < KC && ci0 + kk / KK < CI. (3xTF32 where X3,
// else one TF32 pass: every GEMM phase below takes X3)
constexpr int DW_MT = CO_ALL / 16, DW_NT = KN8;   // its m-tiles (channels) and n-tiles (k)
constexpr bool DW_WARP_GRID = NW % DW_MT == 0;    // NW / DW_MT warps per channel m-tile, else tiles dealt to warps

// dW with each warp on one channel m-tile and every (NW/DW_MT)-th n-tile: the A fragment (dpre) is loaded once per
// position step for all its n-tiles. The slice's previous values are loaded before the mma loop (their latency hides
// under it).
template <bool X3>
__device__ __forceinline__ void grad_w_warp_grid(const BwdSmem& s, float* mypart, int ci0, size_t koff, bool first,
                                                 int warp, const Lane& L) {
    const int g = L.g, t = L.t;
    constexpr int WPM = DW_WARP_GRID ? NW / DW_MT : 1;   // (1 where this variant is unused: no division by 0)
    constexpr int NJP = (DW_NT + WPM - 1) / WPM;
    // warps w and w+4 (one SMSP) get the same mi: n-tiles spread evenly over the SMSPs
    const int nj0 = warp / DW_MT, mi = warp - nj0 * DW_MT;
    float c[NJP][4], prev[NJP][4];
#pragma unroll
    for (int q = 0; q < NJP; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r) c[q][r] = prev[q][r] = 0.0f;
    if (!first) {   // issue the partial's loads now: their latency hides under the mma loop
#pragma unroll
        for (int q = 0; q < NJP; ++q) {
            const int nj = nj0 + WPM * q;
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int co = mi * 16 + g + (r >> 1) * 8;
                const int kk = nj * 8 + 2 * t + (r & 1);
                if (nj < DW_NT && co < CO && kk < KC && ci0 + kk / KK < CI)
                    prev[q][r] = mypart[(size_t)co * KTOT + koff + kk];
            }
        }
    }
#pragma unroll DWU
    for (int ms = DW_MS0; ms < DW_MS1; ++ms) {
        const int m0 = ms * 8;
        const float mk0 = s.mask[m0 + t], mk1 = s.mask[m0 + t + 4];
        KgAFrag a;
        load_a<1>(a, s.Dp + (m0 + t) * CP + mi * 16 + g, 4 * CP + L.dcol, mk0, mk1);   // A = (dpre * mask)^T: channels x positions
#pragma unroll
        for (int q = 0; q < NJP; ++q) {
            const int nj = nj0 + WPM * q;
            if (DW_NT % WPM != 0 && nj >= DW_NT) continue;
            KgBFrag bf;
            load_b<!X3>(bf, s.As + (m0 + t) * KP + nj * 8 + g, 4 * KP + L.dcol);
            kg_mma_x<X3>(c[q], a, bf);
        }
    }
#pragma unroll
    for (int q = 0; q < NJP; ++q) {
        const int nj = nj0 + WPM * q;
        if (nj >= DW_NT) continue;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int co = mi * 16 + g + (r >> 1) * 8;
            const int kk = nj * 8 + 2 * t + (r & 1);
            if (co < CO && kk < KC && ci0 + kk / KK < CI) {
                float* p = mypart + (size_t)co * KTOT + koff + kk;
                *p = first ? c[q][r] : prev[q][r] + c[q][r];
            }
        }
    }
}

// dW with the DW_MT x DW_NT output tiles dealt to the warps in turn (channel counts where NW % DW_MT != 0)
template <bool X3>
__device__ __forceinline__ void grad_w_tile_list(const BwdSmem& s, float* mypart, int ci0, size_t koff, bool first,
                                                 int warp, const Lane& L) {
    const int g = L.g, t = L.t;
    constexpr int DW_TILES = DW_MT * DW_NT, DW_PER = (DW_TILES + NW - 1) / NW;
    float c[DW_PER][4];
    zero(c);
#pragma unroll DWU
    for (int ms = DW_MS0; ms < DW_MS1; ++ms) {
        const int m0 = ms * 8;
        const float mk0 = s.mask[m0 + t], mk1 = s.mask[m0 + t + 4];
#pragma unroll
        for (int q = 0; q < DW_PER; ++q) {
            const int tix = warp + NW * q;
            if (DW_TILES % NW != 0 && tix >= DW_TILES) continue;
            const int mi = tix / DW_NT, nj = tix - mi * DW_NT;
            KgAFrag a;
            load_a<1>(a, s.Dp + (m0 + t) * CP + mi * 16 + g, 4 * CP + L.dcol, mk0, mk1);
            KgBFrag bf;
            load_b<!X3>(bf, s.As + (m0 + t) * KP + nj * 8 + g, 4 * KP + L.dcol);
            kg_mma_x<X3>(c[q], a, bf);
        }
    }
#pragma unroll
    for (int q = 0; q < DW_PER; ++q) {
        const int tix = warp + NW * q;
        if (tix >= DW_TILES) continue;
        const int mi = tix / DW_NT, nj = tix - mi * DW_NT;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int co = mi * 16 + g + (r >> 1) * 8;
            const int kk = nj * 8 + 2 * t + (r & 1);
            if (co < CO && kk < KC && ci0 + kk / KK < CI) {
                float* p = mypart + (size_t)co * KTOT + koff + kk;
                if (first) *p = c[q][r]; else *p += c[q][r];
            }
        }
    }
}

// Phase 5, GEMM3: dBs[m][kk] = sum_co dpre[m][co] * Ws[co][kk], written over As (the caller's barrier comes first:
// grad_w reads As). One m-tile at a time, so only KN8 x 4 accumulators are live (both m-tiles' at once spill at 128
// registers on some shapes).
template <bool X3>
__device__ __forceinline__ void bwd_dbs(const BwdSmem& s, int warp, const Lane& L) {
    const int g = L.g, t = L.t;
#pragma unroll 1
    for (int i = 0; i < B_MTW; ++i) {
        const int mt = warp + NW * i;
        if (mt >= B_MT) break;
        float acc3[KN8][4];
        zero(acc3);
#pragma unroll G3U
        for (int ks = 0; ks < CO_ALL / 8; ++ks) {
            KgAFrag a;
            load_a<CP>(a, s.Dp + (mt * 16 + g) * CP + ks * 8 + L.kcol, L.dcol);
#pragma unroll
            for (int j = 0; j < KN8; ++j) {
                KgBFrag bf;
                load_b<!X3>(bf, s.Ws + (ks * 8 + t) * KP + j * 8 + g, 4 * KP + L.dcol);
                kg_mma_x<X3>(acc3[j], a, bf);
            }
        }
        const int m = mt * 16 + g;
#pragma unroll
        for (int j = 0; j < KN8; ++j) {
            const int kk = j * 8 + 2 * t;
            *reinterpret_cast<float2*>(s.As + m * KP + kk) = make_float2(acc3[j][0], acc3[j][1]);
            *reinterpret_cast<float2*>(s.As + (m + 8) * KP + kk) = make_float2(acc3[j][2], acc3[j][3]);
        }
    }
}

// Phase 6 (cell gather, FASTG: stride-1 undilated conv, pool stride == pool kernel): one thread per channel and
// PKH x PKW cell of input pixels (P, Q) of rows r_lo..r_hi, cols c_lo..c_hi; every dBs term of the cell is at a
// compile-time offset (dh, dw) from its pooled position.
__device__ __forceinline__ void gather_cells(float* grad_x, const float* As, const BwdTile& tile, int ch, int r_lo,
                                             int r_hi, int c_lo, int c_hi, int ncl) {
    const int P_lo = (r_lo + PH) / PKH, P_hi = (r_hi + PH + PKH - 1) / PKH;
    const int Q_lo = (c_lo + PW) / PKW, Q_hi = (c_hi + PW + PKW - 1) / PKW;
    const int nQ = Q_hi - Q_lo, items = ncl * (P_hi - P_lo) * nQ;
#pragma unroll GU
    for (int idx = threadIdx.x; idx < items; idx += NT) {
        const int cl = idx % ncl, rest = idx / ncl;   // channel fastest: fewer bank conflicts
        const int P = P_lo + rest / nQ, Q = Q_lo + rest % nQ;
        const float* rp[G_NDH];
        bool okh[G_NDH];
#pragma unroll
        for (int a = 0; a < G_NDH; ++a) {
            const int ph = P + G_DH0 + a;
            okh[a] = ph >= 0 && ph < PHO;   // valid pooled rows lie inside the extended tile
            rp[a] = As + (okh[a] ? (ph - tile.ph_base) * B_EW * KP : 0) + cl * KK;
        }
        int cof[G_NDW];
        bool okw[G_NDW];
#pragma unroll
        for (int b2 = 0; b2 < G_NDW; ++b2) {
            const int pw = Q + G_DW0 + b2;
            okw[b2] = pw >= 0 && pw < PWO;
            cof[b2] = okw[b2] ? (pw - tile.pw_base) * KP : 0;
        }
        // column pass: cs[a][ky][j] = sum_kx dBs[P+G_DH0+a][Q+dw(j,kx)][ky][kx]
        float cs[G_NDH][KH][PKW];
#pragma unroll
        for (int a = 0; a < G_NDH; ++a)
#pragma unroll
            for (int ky = 0; ky < KH; ++ky) {
                if (!gh_used(a, ky)) continue;
                float v[G_NDW][KW];
#pragma unroll
                for (int b2 = 0; b2 < G_NDW; ++b2)
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) {
                        if (!gw_used(b2, kx)) continue;
                        const float t2 = rp[a][cof[b2] + ky * KW + kx];
                        v[b2][kx] = (okh[a] && okw[b2]) ? t2 : 0.0f;
                    }
#pragma unroll
                for (int j = 0; j < PKW; ++j) {
                    float sacc = 0.0f;
#pragma unroll
                    for (int kx = 0; kx < KW; ++kx) sacc += v[fdiv(j - kx, PKW) - G_DW0][kx];
                    cs[a][ky][j] = sacc;
                }
            }
        float* gplane = grad_x + ((size_t)tile.img * CI + ch * CI_CHUNK + cl) * (size_t)H * W;
#pragma unroll
        for (int i = 0; i < PKH; ++i) {
            const int r = PKH * P + i - PH;
            if (r < r_lo || r >= r_hi) continue;
            float o[PKW];
#pragma unroll
            for (int j = 0; j < PKW; ++j) {
                float sacc = 0.0f;
#pragma unroll
                for (int ky = 0; ky < KH; ++ky) sacc += cs[fdiv(i - ky, PKH) - G_DH0][ky][j];
                o[j] = sacc;
            }
            float* gp = gplane + (size_t)r * W;
            if constexpr (VECG) {   // __stcs: one 16-byte store (a plain float4 store here compiled to 4 scalar ones)
#pragma unroll
                for (int j4 = 0; j4 < PKW / 4; ++j4) {
                    const int c = PKW * Q + 4 * j4 - PW;
                    if (c >= c_lo && c < c_hi)
                        __stcs(reinterpret_cast<float4*>(gp + c),
                               make_float4(o[4 * j4], o[4 * j4 + 1], o[4 * j4 + 2], o[4 * j4 + 3]));
                }
            } else {
#pragma unroll
                for (int j = 0; j < PKW; ++j) {
                    const int c = PKW * Q + j - PW;
                    if (c >= c_lo && c < c_hi) gp[c] = o[j];
                }
            }
        }
    }
}

// Phase 6 (per-pixel gather, other shapes): each thread takes GV adjacent columns of one channel and every RS-th row
// of rows r_lo..r_hi, cols c_lo..c_hi; the column offsets of the dBs terms are hoisted out of the row loop.
__device__ __forceinline__ void gather_pixels(float* grad_x, const float* As, const BwdTile& tile, int ch, int r_lo,
                                              int r_hi, int c_lo, int nc, int ncl) {
    constexpr int GV = VEC4 ? 4 : 1;   // VEC4 => c_lo, c_hi and W are multiples of 4
    constexpr int RS = 8;              // row groups
    const int ncq = nc / GV, items = RS * ncl * ncq;
    for (int idx = threadIdx.x; idx < items; idx += NT) {
        const int q = idx % ncq, rest = idx / ncq;
        const int cl = rest % ncl, rg = rest / ncl;
        const int cbase = c_lo + q * GV;
        int coff[GV][KW][NPW];
#pragma unroll
        for (int jj = 0; jj < GV; ++jj)
#pragma unroll
            for (int kx = 0; kx < KW; ++kx) {
                const int qc = cbase + jj + PW - kx * DW;
#pragma unroll
                for (int bb = 0; bb < NPW; ++bb) {
                    int e = -1;
                    if (qc >= 0 && (SW == 1 || qc % SW == 0)) {
                        const int u = qc / SW;
                        const int pw = u / PSW - bb;
                        if (pw >= 0 && pw < PWO && u - pw * PSW < PKW) e = (pw - tile.pw_base) * KP + kx;
                    }
                    coff[jj][kx][bb] = e;
                }
            }
        float* gcol = grad_x + ((size_t)tile.img * CI + ch * CI_CHUNK + cl) * (size_t)H * W + cbase;
        for (int r = r_lo + rg; r < r_hi; r += RS) {
            int roff[KH][NPH];
#pragma unroll
            for (int ky = 0; ky < KH; ++ky) {
                const int qr = r + PH - ky * DH;
#pragma unroll
                for (int a = 0; a < NPH; ++a) {
                    int e = -1;
                    if (qr >= 0 && (SH == 1 || qr % SH == 0)) {
                        const int u = qr / SH;
                        const int ph = u / PSH - a;
                        if (ph >= 0 && ph < PHO && u - ph * PSH < PKH)
                            e = (ph - tile.ph_base) * B_EW * KP + cl * KK + ky * KW;
                    }
                    roff[ky][a] = e;
                }
            }
            float sv[GV];
#pragma unroll
            for (int jj = 0; jj < GV; ++jj) {
                float sacc = 0.0f;
#pragma unroll
                for (int ky = 0; ky < KH; ++ky)
#pragma unroll
                    for (int a = 0; a < NPH; ++a) {
                        if (roff[ky][a] < 0) continue;
#pragma unroll
                        for (int kx = 0; kx < KW; ++kx)
#pragma unroll
                            for (int bb = 0; bb < NPW; ++bb)
                                if (coff[jj][kx][bb] >= 0) sacc += As[roff[ky][a] + coff[jj][kx][bb]];
                    }
                sv[jj] = sacc;
            }
            float* gp = gcol + (size_t)r * W;
            if constexpr (GV == 4) {
                __stcs(reinterpret_cast<float4*>(gp), make_float4(sv[0], sv[1], sv[2], sv[3]));
            } else {
                gp[0] = sv[0];
            }
        }
    }
}

// Phase 6, grad_x of the input pixels this core tile owns, for the channels of K chunk ch: gathered from dBs (in
// As) through the pool box and the conv taps; every pixel written once, by one thread (coalesced, race-free).
__device__ __forceinline__ void bwd_grad_x(float* grad_x, const float* As, const BwdTile& tile, int ch) {
    const int th = tile.th, tw = tile.tw;
    const int r_lo = th == 0 ? 0 : max(0, th * TPH_B * S_H - PH);
    const int r_hi = th == B_TH - 1 ? H : min(H, (th + 1) * TPH_B * S_H - PH);
    const int c_lo = tw == 0 ? 0 : max(0, tw * TPW_B * S_W - PW);
    const int c_hi = tw == B_TW - 1 ? W : min(W, (tw + 1) * TPW_B * S_W - PW);
    const int nr = r_hi - r_lo, nc = c_hi - c_lo;
    const int ncl = min(CI_CHUNK, CI - ch * CI_CHUNK);
    if (nr > 0 && nc > 0) {
        if constexpr (FASTG) gather_cells(grad_x, As, tile, ch, r_lo, r_hi, c_lo, c_hi, ncl);
        else gather_pixels(grad_x, As, tile, ch, r_lo, r_hi, c_lo, nc, ncl);
    }
}

// Persistent grid of G blocks over n*B_TILES tiles. Each tile, in barrier-separated phases: mark the core positions;
// recompute pre (GEMM1) on core+halo, dpre -> smem; grad_b and grad_w partials (core positions only) accumulated in
// this block's workspace slice (read-modify-write by its owner thread: deterministic); dBs = dpre * W/DIV (GEMM3)
// -> smem; grad_x gathered for the input pixels owned by the core tile (coalesced, race-free writes).
template <bool X3>
__global__ void __launch_bounds__(NT, B_MINB)
bwd_kernel(const float* __restrict__ gout, const float* __restrict__ x, const float* __restrict__ w,
           const float* __restrict__ b, float* __restrict__ grad_x, float* __restrict__ part,
           long long total_tiles, int G, int want_wb) {
    extern __shared__ float4 smem_f4[];
    BwdSmem s;
    s.Ws = reinterpret_cast<float*>(smem_f4);
    s.As = s.Ws + CO_ALL * KP;
    s.Dp = s.As + B_MPAD * KP;
    s.mask = s.Dp + B_MPAD * CP;
    s.bias_s = s.mask + B_MPAD;
    for (int i = threadIdx.x; i < CO_ALL; i += NT)
        s.bias_s[i] = (b != nullptr && i < CO) ? __ldg(b + i) * BSCALE : 0.0f;
    const int warp = threadIdx.x >> 5;
    const Lane L = lane_of(threadIdx.x & 31);
    float* mypart = part + (size_t)blockIdx.x * PART;
    if constexpr (NCHUNK == 1) stage_weights<false, X3>(s.Ws, w, 0);
    bool first = true;
    for (long long tt = blockIdx.x; tt < total_tiles; tt += G) {
        BwdTile tile;
        tile.img = tt / B_TILES;
        const int tix = (int)(tt - tile.img * B_TILES);
        tile.th = tix / B_TW;
        tile.tw = tix - tile.th * B_TW;
        tile.ph_base = tile.th * TPH_B - HALO_H;
        tile.pw_base = tile.tw * TPW_B - HALO_W;
        const float gval = reduce_finish(__ldg(gout + tile.img));   // the gradient at each summed value
        __syncthreads();                               // the previous tile is done with the shared memory
        bwd_mark_core(s.mask, tile);                   // phase 1
        bwd_dpre<X3>(x, w, s, tile, gval, warp, L);   // phase 2 (stages the box sums: its own barriers)
        __syncthreads();
        if (want_wb) bwd_grad_b(s, mypart + CO * KTOT, first);   // phase 3, into the grad_b end of the slice
        for (int ch = 0; ch < NCHUNK; ++ch) {
            // with K chunks, W and the box sums of chunk ch again (phase 2 left the last chunk's)
            if constexpr (NCHUNK > 1) stage_chunk<B_EW, B_M, B_MPAD, BSU, false, X3>(x, w, s.Ws, s.As, tile.img, ch,
                                                                                     tile.ph_base, tile.pw_base);
            if (want_wb) {                             // phase 4
                const int ci0 = ch * CI_CHUNK;
                const size_t koff = (size_t)ch * CI_CHUNK * KK;
                if constexpr (DW_WARP_GRID) grad_w_warp_grid<X3>(s, mypart, ci0, koff, first, warp, L);
                else grad_w_tile_list<X3>(s, mypart, ci0, koff, first, warp, L);
            }
            if (grad_x != nullptr) {
                __syncthreads();   // dBs overwrites As, which grad_w reads
                bwd_dbs<X3>(s, warp, L);               // phase 5
                __syncthreads();
                bwd_grad_x(grad_x, s.As, tile, ch);    // phase 6
            }
        }
        first = false;
    }
}

// grad_w[e] / grad_b[e] = fixed-order sum of the G block partials. A block takes 32 elements; its warp k adds the
// partials k, k + WB_SLICES, ... (coalesced: lane = element) and lane e of warp 0 adds the WB_SLICES sums in order:
// deterministic, with WB_SLICES times the loads in flight of one thread an element.
constexpr int WB_SLICES = 8;
__global__ void __launch_bounds__(32 * WB_SLICES)
wb_reduce_kernel(const float* __restrict__ part, int G, float* __restrict__ gw, float* __restrict__ gb) {
    __shared__ float red[WB_SLICES][32];
    const int lane = threadIdx.x & 31, k = threadIdx.x >> 5;
    const int e = blockIdx.x * 32 + lane;
    float s = 0.0f;
    if (e < PART)
        for (int i = k; i < G; i += WB_SLICES) s += __ldg(part + (size_t)i * PART + e);
    red[k][lane] = s;
    __syncthreads();
    if (k != 0 || e >= PART) return;
    s = 0.0f;
#pragma unroll
    for (int j = 0; j < WB_SLICES; ++j) s += red[j][lane];
    if (e < CO * KTOT) {
        if (gw) gw[e] = s / (float)DIV;
    } else {
        if (gb) gb[e - CO * KTOT] = s * BSCALE;
    }
}
