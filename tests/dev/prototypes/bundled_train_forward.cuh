// Prototype, not shipped (forty-fifth session): the training forward of docs/notes/conv2d_avgpool_act_reduce.md's
// design for the bundled step, written against the rendered bundled kernel's names. How it was checked (CPU, ptxas):
//   kgen generate kgen/problems/conv2d_avgpool_sigmoid_sum.py --out /tmp/bund/gen
//   insert this file before "// ---------------- host: launch configuration" of /tmp/bund/gen/*/kernel.cu
//   nvcc -gencode=arch=compute_90a,code=sm_90a -DKGEN_SM90=1 -DKGEN_SM90A=1 -O3 -std=c++17 -c -Xptxas -v
//   (and sm_80 with -DKGEN_SM90=0 -DKGEN_SM90A=0)
// Result: no spills; sm_90a 126 registers (3xTF32) / 84 (TF32), sm_80 127 / 83; FT_SMEM 111,488 bytes on the sm_90
// path (two CTAs an SM). Not run: no host launcher, no stored backward, no binding.
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
