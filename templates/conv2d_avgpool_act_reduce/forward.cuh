// ---------------- forward (conv2d_avgpool_act_reduce/forward.cuh) ----------------
// x -> out[n]: per tile, box sums, GEMM1, bias, activation and a masked sum; then the per-sample sum in a fixed
// order. Plain CUDA, included by kernel.cu.j2 after the problem constants it reads.

// tsum plus act(pre) of the valid positions and real channels of the accumulators of tile (ph0, pw0), channel pass
// cc (pre = acc + bias * BSCALE), added one by one in the order i, j, r
__device__ __forceinline__ float fwd_act_sum(float tsum, const float (&acc)[F_MTW][NT8][4], const float* bias_s, int cc,
                                             int ph0, int pw0, int warp, int g, int t) {
#pragma unroll
    for (int i = 0; i < F_MTW; ++i) {
        const int mt = warp + NW * i;
        if (mt >= F_MT) continue;
        bool rv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = mt * 16 + g + 8 * h;
            const int eh = m / F_EW, ew = m - eh * F_EW;
            rv[h] = m < F_M && ph0 + eh < PHO && pw0 + ew < PWO;
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int co = cc * COCH + j * 8 + 2 * t + (r & 1);
                const float v = Act::fwd(acc[i][j][r] + bias_s[co]);
                if (rv[r >> 1] && (CO == CO_ALL || co < CO)) tsum += v;
            }
    }
    return tsum;
}

// grid = n * cl blocks, cl blocks per image; block `rank` handles tiles rank, rank+cl, ...
// cl == 1: the block writes out[img]. Otherwise the cl partial sums are added in rank order (deterministic):
// sm_90: by rank 0 of the image's thread-block cluster, through distributed shared memory (one launch);
// sm_80: each block stores its sum to fpart[img * cl + rank] and fwd_finish_kernel adds them.
// X3: 3xTF32 (TF32 off); else one TF32 pass (torch.backends.cudnn.allow_tf32).
template <bool X3>
__global__ void __launch_bounds__(NT, F_MINB)
fwd_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
           float* __restrict__ out, float* __restrict__ fpart, int cl) {
    // shared memory (F_SMEM bytes): W (WS_FLOATS), box sums As, warp sums, bias * BSCALE
    extern __shared__ float4 smem_f4[];
    float* Ws = reinterpret_cast<float*>(smem_f4);
    float* As = Ws + WS_FLOATS;
    float* red = As + F_MPAD * KP;
    float* bias_s = red + 32;
    for (int i = threadIdx.x; i < CO_ALL; i += NT) bias_s[i] = (b != nullptr && i < CO) ? __ldg(b + i) * BSCALE : 0.0f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const Lane L = lane_of(lane);
    const long long img = blockIdx.x / cl;
    const int rank = (int)(blockIdx.x - img * cl);
    if constexpr (NCHUNK == 1) stage_weights<FWD_WFRAG, X3>(Ws, w, 0);
    float tsum = 0.0f;
    for (int tile = rank; tile < F_TILES; tile += cl) {
        const int th = tile / F_TW, tw = tile - th * F_TW;
        const int ph0 = th * TPH, pw0 = tw * TPW;
        for (int cc = 0; cc < NCO_CH; ++cc) {
            // With K chunks each chunk's mma chain restarts from zero and is added into pre in float32: one chain over
            // every chunk rounds each mma's sum toward zero hundreds of times (the backward's g1_flush, the same reason).
            float acc[F_MTW][NT8][4], pre[F_MTW][NT8][4];
            zero(acc);
            for (int ch = 0; ch < NCHUNK; ++ch) {
                if (NCHUNK > 1 || cc == 0)
                    stage_chunk<F_EW, F_M, F_MPAD, 1, FWD_WFRAG, X3>(x, w, Ws, As, img, ch, ph0, pw0);
                gemm1<F_MT, F_MTW, FWD_WFRAG, X3>(As, Ws, cc * COCH, warp, L, acc);
                if constexpr (NCHUNK > 1) add_and_zero(pre, acc, ch == 0);
            }
            if constexpr (NCHUNK > 1) tsum = fwd_act_sum(tsum, pre, bias_s, cc, ph0, pw0, warp, L.g, L.t);
            else tsum = fwd_act_sum(tsum, acc, bias_s, cc, ph0, pw0, warp, L.g, L.t);
        }
    }
    // block sum in a fixed order: warp shuffles, then the NW warp sums by thread 0
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
    if (lane == 0) red[warp] = tsum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NW; ++i) s += red[i];
        red[NW] = s;
    }
    if (cl == 1) {
        if (threadIdx.x == 0) out[img] = reduce_finish(red[NW]);
        return;
    }
#if KGEN_SM90
    (void)fpart;
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    if (rank == 0 && threadIdx.x == 0) {
        float s = 0.0f;
        for (int r = 0; r < cl; ++r) s += *cluster.map_shared_rank(red + NW, r);
        out[img] = reduce_finish(s);
    }
    cluster.sync();
#else
    if (threadIdx.x == 0) fpart[img * cl + rank] = red[NW];
#endif
}

#if !KGEN_SM90
// out[i] = the cl block sums of sample i, added in rank order (the order of the sm_90 cluster reduction)
__global__ void __launch_bounds__(256)
fwd_finish_kernel(const float* __restrict__ fpart, int cl, long long n, float* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int r = 0; r < cl; ++r) s += __ldg(fpart + i * cl + r);
    out[i] = reduce_finish(s);
}
#endif
