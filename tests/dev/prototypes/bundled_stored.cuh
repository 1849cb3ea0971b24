// Prototype, not shipped (forty-fifth session): the kernels of docs/notes/conv2d_avgpool_act_reduce.md's design for
// the bundled step (a training forward that keeps act'(pre) and the unit weight / bias gradient partials, a stored
// backward, the g-weighted reduction), written against the rendered bundled kernel's names. tests/dev/prototypes/
// bundled_ab.py inserts this file into the rendered kernel, adds a host harness and compiles (--compile-only) or runs
// it against the shipped kernels. ptxas (CPU, nvcc 13.0): no spills; training forward sm_90a 126 registers (3xTF32)
// / 84 (TF32), sm_80 127 / 83, 111,488 bytes of shared memory on the sm_90 path (two CTAs an SM); stored backward
// 100 / 86 (sm_90a), 95 / 85 (sm_80). Not run on a GPU.
// ---- PROTOTYPE (forty-fifth session, not shipped): the training forward of docs/notes/conv2d_avgpool_act_reduce.md's
// design. Per tile: box sums, GEMM1, act and the forward sum as fwd_kernel; then s = act'(pre) (unit dpre) into Dp and to
// global (sg, (n, CO, PHO, PWO)), and this block's unit grad_b / grad_w partials (its image's) from Dp and As.
// NCHUNK == 1 and NCO_CH == 1 only (the bundled shape).
constexpr int FT_TPH = 4, FT_TPW = 32, FT_M = FT_TPH * FT_TPW, FT_MPAD = (FT_M + 15) / 16 * 16, FT_MT = FT_MPAD / 16;
constexpr int FT_MTW = (FT_MT + NW - 1) / NW;
constexpr int FT_TH = (PHO + FT_TPH - 1) / FT_TPH, FT_TW = (PWO + FT_TPW - 1) / FT_TPW, FT_TILES = FT_TH * FT_TW;
constexpr size_t FT_SMEM = (size_t)(WS_FLOATS + FT_MPAD * KP + FT_MPAD * CP + FT_MPAD + 32 + CO_ALL) * 4;
static_assert(NCHUNK == 1 && NCO_CH == 1, "prototype: one K chunk, one channel pass");

template <bool X3>
__global__ void __launch_bounds__(NT, 2)
fwd_train_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                 float* __restrict__ out, float* __restrict__ fpart, float* __restrict__ sg, float* __restrict__ part, int cl) {
    extern __shared__ float4 smem_f4[];
    float* Ws = reinterpret_cast<float*>(smem_f4);
    float* As = Ws + WS_FLOATS;
    float* Dp = As + FT_MPAD * KP;
    float* mask = Dp + FT_MPAD * CP;
    float* red = mask + FT_MPAD;
    float* bias_s = red + 32;
    for (int i = threadIdx.x; i < CO_ALL; i += NT) bias_s[i] = (b != nullptr && i < CO) ? __ldg(b + i) * BSCALE : 0.0f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long long img = blockIdx.x / cl;
    const int rank = (int)(blockIdx.x - img * cl);
    float* mypart = part + (size_t)blockIdx.x * PART;
    stage_weights<FWD_WFRAG, X3>(Ws, w, 0);
    float tsum = 0.0f;
    bool first = true;
    for (int tile = rank; tile < FT_TILES; tile += cl) {
        const int th = tile / FT_TW, tw = tile - th * FT_TW;
        const int ph0 = th * FT_TPH, pw0 = tw * FT_TPW;
        __syncthreads();  // the previous tile's dW is done with As and Dp
        for (int m = threadIdx.x; m < FT_MPAD; m += NT) {
            const int eh = m / FT_TPW, ew = m - eh * FT_TPW;
            mask[m] = (m < FT_M && ph0 + eh < PHO && pw0 + ew < PWO) ? 1.0f : 0.0f;
        }
        float acc[FT_MTW][NT8][4];
        zero(acc);
        stage_chunk<FT_TPW, FT_M, FT_MPAD, 1, FWD_WFRAG, X3>(x, w, Ws, As, img, 0, ph0, pw0);
        gemm1<FT_MT, FT_MTW, FWD_WFRAG, X3>(As, Ws, 0, warp, acc);
#pragma unroll
        for (int i = 0; i < FT_MTW; ++i) {
            const int mt = warp + NW * i;
            if (mt >= FT_MT) continue;
#pragma unroll
            for (int j = 0; j < NT8; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int m = mt * 16 + g + (r >> 1) * 8;
                    const int co = j * 8 + 2 * t + (r & 1);
                    const int eh = m / FT_TPW, ew = m - eh * FT_TPW;
                    const bool ok = m < FT_M && ph0 + eh < PHO && pw0 + ew < PWO && (CO == CO_ALL || co < CO);
                    const float pre = acc[i][j][r] + bias_s[co];
                    if (ok) tsum += Act::fwd(pre);
                    const float s = ok ? Act::grad(pre) : 0.0f;
                    Dp[m * CP + co] = s;
                    if (ok) sg[((size_t)img * CO + co) * (PHO * PWO) + (ph0 + eh) * PWO + pw0 + ew] = s;
                }
        }
        __syncthreads();
        // unit grad_b: per channel, the sum of s over the tile (fixed order)
        for (int co = threadIdx.x; co < CO; co += NT) {
            float sum = 0.0f;
            for (int m = 0; m < FT_M; ++m) sum += Dp[m * CP + co];
            float* p = mypart + CO * KTOT + co;
            if (first) *p = sum; else *p += sum;
        }
        // unit grad_w: dW[co][kk] += sum_m s[m][co] * As[m][kk] (warp grid: warp -> channel m-tile, n-tiles dealt)
        {
            constexpr int WPM = NW / DW_MT, NJP = (DW_NT + WPM - 1) / WPM;
            const int nj0 = warp / DW_MT, mi = warp - nj0 * DW_MT;
            float c[NJP][4];
            zero(c);
#pragma unroll 2
            for (int ms = 0; ms < FT_MPAD / 8; ++ms) {
                const int m0 = ms * 8;
                KgAFrag a;
                load_a<1, CP>(a, Dp + (m0 + t) * CP + mi * 16 + g, mask[m0 + t], mask[m0 + t + 4]);
#pragma unroll
                for (int q = 0; q < NJP; ++q) {
                    const int nj = nj0 + WPM * q;
                    if (DW_NT % WPM != 0 && nj >= DW_NT) continue;
                    KgBFrag bf;
                    load_b<KP, !X3>(bf, As + (m0 + t) * KP + nj * 8 + g);
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
                    if (co < CO && kk < KC) {
                        float* p = mypart + (size_t)co * KTOT + kk;
                        if (first) *p = c[q][r]; else *p += c[q][r];
                    }
                }
            }
        }
        first = false;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
    if (lane == 0) red[warp] = tsum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NW; ++i) s += red[i];
        fpart[blockIdx.x] = s;  // prototype: the finish adds the cl slots in rank order
    }
}
template __global__ void fwd_train_kernel<true>(const float*, const float*, const float*, float*, float*, float*, float*, int);
template __global__ void fwd_train_kernel<false>(const float*, const float*, const float*, float*, float*, float*, float*, int);

// The stored backward of the same design: per tile, dpre = g * r * s staged from the training forward's s (core and
// halo positions), W/DIV staged once, then GEMM3 (dBs) and the gather (phases 5-6): no x, no box sums, no GEMM1.
template <bool X3>
__global__ void __launch_bounds__(NT, B_MINB)
bwd_stored_kernel(const float* __restrict__ gout, const float* __restrict__ sg, const float* __restrict__ w,
                  float* __restrict__ grad_x, long long total_tiles, int G) {
    extern __shared__ float4 smem_f4[];
    BwdSmem s;
    s.Ws = reinterpret_cast<float*>(smem_f4);
    s.As = s.Ws + CO_ALL * KP;
    s.Dp = s.As + B_MPAD * KP;
    s.mask = s.Dp + B_MPAD * CP;
    s.bias_s = s.mask + B_MPAD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    stage_weights<false, X3>(s.Ws, w, 0);
    for (long long tt = blockIdx.x; tt < total_tiles; tt += G) {
        BwdTile tile;
        tile.img = tt / B_TILES;
        const int tix = (int)(tt - tile.img * B_TILES);
        tile.th = tix / B_TW;
        tile.tw = tix - tile.th * B_TW;
        tile.ph_base = tile.th * TPH_B - HALO_H;
        tile.pw_base = tile.tw * TPW_B - HALO_W;
        const float gval = reduce_finish(__ldg(gout + tile.img));
        __syncthreads();  // the previous tile's gather is done with As; Ws is staged
        const float* sp = sg + (size_t)tile.img * CO * (PHO * PWO);
        for (int idx = threadIdx.x; idx < CO_ALL * B_MPAD; idx += NT) {
            const int co = idx / B_MPAD, m = idx - co * B_MPAD;
            const int eh = m / B_EW, ew = m - eh * B_EW;
            const int ph = tile.ph_base + eh, pw = tile.pw_base + ew;
            const bool ok = m < B_M && co < CO && ph >= 0 && ph < PHO && pw >= 0 && pw < PWO;
            s.Dp[m * CP + co] = ok ? gval * __ldg(sp + (size_t)co * (PHO * PWO) + ph * PWO + pw) : 0.0f;
        }
        __syncthreads();
        bwd_dbs<X3>(s, warp, g, t);         // phase 5: dBs over As
        __syncthreads();
        bwd_grad_x(grad_x, s.As, tile, 0);  // phase 6
    }
    (void)lane;
}
template __global__ void bwd_stored_kernel<true>(const float*, const float*, const float*, float*, long long, int);
template __global__ void bwd_stored_kernel<false>(const float*, const float*, const float*, float*, long long, int);

// grad_w / grad_b of the design: the G = n * cl training-forward blocks' unit partials, each times its image's
// g * r, added in block order (deterministic)
__global__ void __launch_bounds__(256)
wb_unit_reduce_kernel(const float* __restrict__ part, const float* __restrict__ gout, int G, int cl,
                      float* __restrict__ gw, float* __restrict__ gb) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= PART) return;
    float s = 0.0f;
    for (int i = 0; i < G; ++i) s += reduce_finish(__ldg(gout + i / cl)) * __ldg(part + (size_t)i * PART + e);
    if (e < CO * KTOT) {
        if (gw) gw[e] = s / (float)DIV;
    } else {
        if (gb) gb[e - CO * KTOT] = s * BSCALE;
    }
}
