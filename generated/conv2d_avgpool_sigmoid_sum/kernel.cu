// kgen: fused Conv2d -> AvgPool2d -> sigmoid -> sum over [C,H,W]  (kgen_conv2d_avgpool_act_reduce_db82dd54)
// Pool-first: conv followed by avg-pool is one linear map, so each pooled output is
//   pre[n,co,ph,pw] = bias[co] + sum_k (W[co,k]/DIV) * Bs[n,ph,pw,k]   (k = ci*KH*KW + ky*KW + kx)
// where Bs is a PKH x PKW box sum of the (zero-padded) input at the conv tap offsets.
// The per-tile GEMM (positions x CO x K) runs on tensor cores in 3xTF32 (fp32-level accuracy) when the caller passes
// tf32 = 0 (torch.backends.cudnn.allow_tf32 off), else in one TF32 pass on the rounded operands, as cuDNN: every kernel
// is a template on X3, both instantiations built.
// Two paths, chosen by the build: KGEN_SM90=1 (every target arch >= 9.0) reduces the forward's per-sample partial
// sums through thread-block clusters; KGEN_SM90=0 (sm_80/86/89) writes them to the workspace and adds them in a
// second small kernel. Both are deterministic (fixed summation order).
// Rendered by Jinja from templates/conv2d_avgpool_act_reduce/kernel.cu.j2 (problem constants, host launchers) with
// its folder's staging.cuh, gemm.cuh, forward.cuh and backward.cuh (the device code) and common/activation.cuh and
// common/mma_tf32x3.cuh; self-contained (only CUDA/system headers).
#ifndef KGEN_SM90
#define KGEN_SM90 0
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <atomic>
#include <mutex>
#if KGEN_SM90
#include <cooperative_groups.h>
#endif
// kgen activations for fused reductions: one struct per activation, fwd(v) the activation of the pre-activation v
// and grad(v) its derivative at v. A family's Python table names the struct (ACT_TYPES in
// kgen/families/conv2d_avgpool_act_reduce.py); the kernel takes it as `using Act = kgen::act::<row>;`.
// float32, device code only. These are not kgen::pw's forms (common/pointwise.cuh): sigmoid is the fast one
// (__expf + __fdividef, about 2 ulp) and the gelu constants and products are grouped differently, so each row keeps
// the exact expressions its kernels were measured and tested with (relu alone equals kgen::pw::relu).
#ifndef KGEN_ACTIVATION_CUH
#define KGEN_ACTIVATION_CUH

#include <math.h>

namespace kgen {
namespace act {

// fast sigmoid: __fdividef(1, inf) = 0 for very negative v
struct Sigmoid {
    static __device__ __forceinline__ float fwd(float v) { return __fdividef(1.0f, 1.0f + __expf(-v)); }
    static __device__ __forceinline__ float grad(float v) {
        const float s = fwd(v);
        return s * (1.0f - s);
    }
};

struct Tanh {
    static __device__ __forceinline__ float fwd(float v) { return tanhf(v); }
    static __device__ __forceinline__ float grad(float v) {
        const float t = fwd(v);
        return 1.0f - t * t;
    }
};

// NaN propagates, as torch.relu
struct Relu {
    static __device__ __forceinline__ float fwd(float v) { return v != v ? v : fmaxf(v, 0.0f); }
    static __device__ __forceinline__ float grad(float v) {
        return (v > 0.0f || v != v) ? 1.0f : 0.0f;  // PyTorch: output <= 0 ? 0 : grad (NaN passes)
    }
};

// gelu, exact: v/2 (1 + erf(v / sqrt 2)); derivative cdf + v pdf.
struct Gelu {
    static __device__ __forceinline__ float fwd(float v) {
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
    }
    static __device__ __forceinline__ float grad(float v) {
        return 0.5f * (1.0f + erff(v * 0.70710678118654752440f)) + v * 0.39894228040143267794f * expf(-0.5f * v * v);
    }
};

// gelu, tanh approximation: v/2 (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))).
struct GeluTanh {
    static __device__ __forceinline__ float fwd(float v) {
        return 0.5f * v * (1.0f + tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v)));
    }
    static __device__ __forceinline__ float grad(float v) {
        const float kb = 0.79788456080286535588f, kk = 0.044715f;
        const float t = tanhf(kb * (v + kk * v * v * v));
        return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kb * (1.0f + 3.0f * kk * v * v);
    }
};

// no activation
struct Identity {
    static __device__ __forceinline__ float fwd(float v) { return v; }
    static __device__ __forceinline__ float grad(float) { return 1.0f; }
};

}  // namespace act
}  // namespace kgen

#endif  // KGEN_ACTIVATION_CUH

namespace kgen_conv2d_avgpool_act_reduce_db82dd54_ns {

// ---- 3xTF32 tensor-core helpers (mma.sync m16n8k8, fp32-level accuracy) ----
// a = hi + lo with hi = rna(a) in tf32; lo is passed raw (the tensor core ignores its low 13 bits).
// acc += a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (small terms first).
// v rounded to TF32 (to nearest, ties away from zero), as a float's bits with the low 13 mantissa bits clear
__device__ __forceinline__ uint32_t tf32_rna(float v) {
    uint32_t h;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ void kg_split(float v, uint32_t& hi, uint32_t& lo) {
    hi = tf32_rna(v);
    lo = __float_as_uint(v - __uint_as_float(hi));
}
__device__ __forceinline__ void kg_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
struct KgAFrag { uint32_t h[4], l[4]; };
struct KgBFrag { uint32_t h[2], l[2]; };
__device__ __forceinline__ void kg_mma3(float (&c)[4], const KgAFrag& a, const KgBFrag& b) {
    kg_mma(c, a.l[0], a.l[1], a.l[2], a.l[3], b.h[0], b.h[1]);
    kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.l[0], b.l[1]);
    kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.h[0], b.h[1]);
}
// X3: 3xTF32 as above; else one TF32 product of the rounded operands (the hi parts), as cuDNN with TF32 allowed
template <bool X3>
__device__ __forceinline__ void kg_mma_x(float (&c)[4], const KgAFrag& a, const KgBFrag& b) {
    if constexpr (X3) kg_mma3(c, a, b);
    else kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.h[0], b.h[1]);
}

// ---------------- compile-time problem description ----------------
constexpr int CI = 8, H = 384, W = 384, CO = 64;
constexpr int KH = 3, KW = 3, SH = 1, SW = 1;
constexpr int PH = 0, PW = 0, DH = 1, DW = 1;
constexpr int PKH = 4, PKW = 4, PSH = 4, PSW = 4, DIV = 16;
// tiling, chosen by derive() in Python for each path's shared memory
#if KGEN_SM90
constexpr int TPH = 5, TPW = 48;          // forward tile, pooled positions
constexpr int TPH_B = 7, TPW_B = 19;  // backward core tile, pooled positions
constexpr int CI_CHUNK = 8;                    // input channels per K chunk
constexpr bool FWD_WFRAG = true;        // forward keeps W as pre-split tf32 hi/lo B fragments
constexpr size_t F_SMEM_PY = 106368, B_SMEM_PY = 111488;  // derive()'s shared-memory sizes
constexpr size_t SMEM_MAX = 227 * 1024;   // opt-in shared memory per block (sm_90)
constexpr size_t SMEM_2B = 113 * 1024;    // two blocks per SM fit at or below this
#else
constexpr int TPH = 4, TPW = 32;          // forward tile, pooled positions
constexpr int TPH_B = 5, TPW_B = 20;  // backward core tile, pooled positions
constexpr int CI_CHUNK = 8;                    // input channels per K chunk
constexpr bool FWD_WFRAG = false;        // forward keeps W as pre-split tf32 hi/lo B fragments
constexpr size_t F_SMEM_PY = 55680, B_SMEM_PY = 92928;  // derive()'s shared-memory sizes
constexpr size_t SMEM_MAX = 99 * 1024;    // opt-in shared memory per block on sm_86/89 (sm_80: 163 KB)
constexpr size_t SMEM_2B = 81 * 1024;     // two blocks per SM fit at or below this on sm_80
#endif
constexpr int BSU = 1, DWU = 2, G3U = 1;  // backward loop unrolls (box sums, dW, GEMM3)
constexpr int GU = 1;                                      // unroll of the cell gather's loop

constexpr int HO = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1;
constexpr int WO = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
constexpr int PHO = (HO - PKH) / PSH + 1;
constexpr int PWO = (WO - PKW) / PSW + 1;
static_assert(HO >= 1 && WO >= 1 && PHO >= 1 && PWO >= 1, "empty output");
constexpr long long COUNT = (long long)CO * PHO * PWO;
constexpr int KK = KH * KW, KTOT = CI * KK;
constexpr int PR = (PKH - 1) * SH + (KH - 1) * DH + 1;   // input rows under one pooled output
constexpr int PC = (PKW - 1) * SW + (KW - 1) * DW + 1;   // input cols under one pooled output
constexpr int S_H = PSH * SH, S_W = PSW * SW;            // input step between pooled outputs
constexpr int NCHUNK = (CI + CI_CHUNK - 1) / CI_CHUNK;
constexpr int KC = CI_CHUNK * KK, KC8 = (KC + 7) / 8 * 8, KN8 = KC8 / 8;
constexpr int KP = KC8 % 16 == 8 ? KC8 : KC8 + 8;        // row stride of As / Ws: 8 mod 16 (the swizzle, gemm.cuh)
constexpr int CO16 = (CO + 15) / 16 * 16;
constexpr int COCH = CO16 < 64 ? CO16 : 64;              // output channels per GEMM pass
constexpr int NCO_CH = (CO16 + COCH - 1) / COCH;
constexpr int CO_ALL = NCO_CH * COCH, NT8 = COCH / 8, CP = CO_ALL + 8;   // CP: Dp's row stride, 8 mod 16
constexpr int NT = 256, NW = 8;
// forward tiles
constexpr int F_EW = TPW, F_M = TPH * TPW, F_MPAD = (F_M + 15) / 16 * 16, F_MT = F_MPAD / 16;
constexpr int F_MTW = (F_MT + NW - 1) / NW;
constexpr int F_TH = (PHO + TPH - 1) / TPH, F_TW = (PWO + TPW - 1) / TPW, F_TILES = F_TH * F_TW;
// backward tiles (core + halo of pooled rows/cols whose windows reach the core's input pixels)
constexpr int B_TH = (PHO + TPH_B - 1) / TPH_B, B_TW = (PWO + TPW_B - 1) / TPW_B, B_TILES = B_TH * B_TW;
constexpr int HALO_H = (B_TH == 1) ? 0 : (PR - 1) / S_H;
constexpr int HALO_W = (B_TW == 1) ? 0 : (PC - 1) / S_W;
constexpr int B_EH = TPH_B + HALO_H, B_EW = TPW_B + HALO_W, B_M = B_EH * B_EW;
constexpr int B_MPAD = (B_M + 15) / 16 * 16, B_MT = B_MPAD / 16, B_MTW = (B_MT + NW - 1) / NW;
constexpr int DW_MS0 = HALO_H * B_EW / 8, DW_MS1 = (B_M + 7) / 8;   // 8-position steps holding core positions
constexpr int NPH = (PKH + PSH - 1) / PSH, NPW = (PKW + PSW - 1) / PSW;
constexpr int DB_SEG = CO_ALL >= NT ? 1 : (NT / CO_ALL >= 32 ? 32 : NT / CO_ALL >= 16 ? 16 : NT / CO_ALL >= 8 ? 8
                       : NT / CO_ALL >= 4 ? 4 : NT / CO_ALL >= 2 ? 2 : 1);   // threads per channel for grad_b
constexpr int PART = CO * KTOT + CO;                       // floats of one block's grad_w/grad_b partial
constexpr float BSCALE = (float)(PKH * PKW) / (float)DIV;  // avg-pool of a constant bias with divisor_override
constexpr int CL_MAX = F_TILES < 8 ? F_TILES : 8;         // forward blocks per sample (cluster size on sm_90)
constexpr bool VEC4 = (S_W % 4 == 0) && (PW % 4 == 0) && (W % 4 == 0);
constexpr int PC4 = (PC + 3) / 4;
constexpr int VW = VEC4 ? PC4 * 4 : PC;                    // floats one input row of a window loads
// compute_as: windows of more loads than this are summed one row at a time (staging.cuh)
constexpr int STREAM_LOADS = 48;
constexpr bool STREAM_ROWS = PR * VW > STREAM_LOADS;
constexpr int KPADW = KC8 > KC ? KC8 - KC : 1;
__host__ __device__ constexpr bool row_used(int rr) {
    for (int i = 0; i < PKH; ++i)
        for (int ky = 0; ky < KH; ++ky)
            if (i * SH + ky * DH == rr) return true;
    return false;
}
__host__ __device__ constexpr bool col_used(int cc) {
    for (int j = 0; j < PKW; ++j)
        for (int kx = 0; kx < KW; ++kx)
            if (j * SW + kx * DW == cc) return true;
    return false;
}
// fast grad_x gather (stride-1, undilated conv; non-overlapping pool with stride == kernel): each thread takes one
// PKH x PKW cell of input pixels (u = r + PH = PKH*P + i) of one channel; every dBs term is at a compile-time
// offset from the cell's pooled position (P + dh, Q + dw), dh = floor((i - ky) / PKH) in [G_DH0, 0].
constexpr bool FASTG = SH == 1 && SW == 1 && DH == 1 && DW == 1 && PSH == PKH && PSW == PKW;
__host__ __device__ constexpr int fdiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
constexpr int G_DH0 = fdiv(-(KH - 1), PKH), G_NDH = 1 - G_DH0;
constexpr int G_DW0 = fdiv(-(KW - 1), PKW), G_NDW = 1 - G_DW0;
__host__ __device__ constexpr bool gh_used(int a, int ky) {
    for (int i = 0; i < PKH; ++i)
        if (fdiv(i - ky, PKH) == G_DH0 + a) return true;
    return false;
}
__host__ __device__ constexpr bool gw_used(int b, int kx) {
    for (int j = 0; j < PKW; ++j)
        if (fdiv(j - kx, PKW) == G_DW0 + b) return true;
    return false;
}
constexpr bool VECG = FASTG && (PKW % 4 == 0) && (PW % 4 == 0) && (W % 4 == 0);
constexpr int WS_FLOATS = FWD_WFRAG ? KC8 * CO_ALL * 2 : CO_ALL * KP;   // forward W staging
constexpr size_t F_SMEM = (size_t)(WS_FLOATS + F_MPAD * KP + 32 + CO_ALL) * 4;
constexpr size_t B_SMEM = (size_t)(CO_ALL * KP + B_MPAD * KP + B_MPAD * CP + B_MPAD + CO_ALL) * 4;
constexpr bool NEED_BOUNDS = (PH > 0 || PW > 0);  // without padding a valid window never leaves the image
// (large box-sum footprints PR*KW > 20 get the full register file: 1 block/SM guaranteed, no spills)
constexpr bool SLIM = PR * KW <= 20;
// K chunks keep the GEMM accumulators live through the next chunk's box sums: no 128-register cap either
constexpr int F_MINB = (SLIM && NCHUNK == 1 && F_SMEM <= SMEM_2B) ? 2 : 1;  // (3 blocks/SM at <= 80 registers measured slower)
constexpr int B_MINB = (SLIM && NCHUNK == 1 && B_SMEM <= SMEM_2B) ? 2 : 1;
static_assert(F_SMEM == F_SMEM_PY && B_SMEM == B_SMEM_PY, "derive() and the template disagree on the smem layout");
static_assert(KP % 16 == 8 && CP % 16 == 8, "the swizzled layout (gemm.cuh) needs row strides of 8 mod 16");
#if KGEN_SM90
static_assert(F_SMEM <= SMEM_MAX && B_SMEM <= SMEM_MAX, "tile does not fit shared memory");
#else
static_assert(F_SMEM <= SMEM_MAX && B_SMEM <= SMEM_MAX,
              "kgen: this shape's tiles need more than the 99 KB of shared memory per block of sm_80/86/89 GPUs; "
              "run it on sm_90 or newer");
#endif

// ---------------- activation and reduction ----------------
using Act = kgen::act::Sigmoid;   // sigmoid: Act::fwd(v), its derivative Act::grad(v)
constexpr bool MEAN = false;   // sum over [C,H,W]
// out[n] from the sum over [C,H,W] of sample n; applied to grad_out[n], the gradient at each summed value
__device__ __forceinline__ float reduce_finish(float s) {
    if constexpr (MEAN) return s / (float)COUNT;
    else return s;
}

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

// ---------------- host: launch configuration ----------------
// Launch facts of one device (SM count, resident blocks per SM of each kernel, indexed by tf32: [0] the 3xTF32
// kernels, [1] the one-pass TF32 ones), looked up once per device id for the device current at the call: a process
// using several GPUs gets one entry each.
struct DevInfo { int sms; int fwd_per_sm[2]; int bwd_per_sm[2]; };
constexpr int MAX_DEVICES = 64;
static DevInfo g_dev[MAX_DEVICES];
static std::atomic<bool> g_dev_ready[MAX_DEVICES];
static std::mutex g_dev_mutex;

// The shared-memory opt-in and the resident blocks per SM of one instantiation (at least 1 each)
template <bool X3>
static cudaError_t kernel_facts(int* fwd_per_sm, int* bwd_per_sm) {
    cudaError_t e;
    if ((e = cudaFuncSetAttribute(fwd_kernel<X3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F_SMEM)) != cudaSuccess) return e;
    if ((e = cudaFuncSetAttribute(bwd_kernel<X3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)B_SMEM)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(fwd_per_sm, fwd_kernel<X3>, NT, F_SMEM)) != cudaSuccess) return e;
    if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(bwd_per_sm, bwd_kernel<X3>, NT, B_SMEM)) != cudaSuccess) return e;
    *fwd_per_sm = *fwd_per_sm < 1 ? 1 : *fwd_per_sm;
    *bwd_per_sm = *bwd_per_sm < 1 ? 1 : *bwd_per_sm;
    return cudaSuccess;
}

static cudaError_t dev_info(const DevInfo** out) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= MAX_DEVICES) return cudaErrorInvalidDevice;
    if (!g_dev_ready[dev].load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(g_dev_mutex);
        if (!g_dev_ready[dev].load(std::memory_order_relaxed)) {
            DevInfo d = {0, {0, 0}, {0, 0}};
            if ((e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
            if ((e = kernel_facts<true>(&d.fwd_per_sm[0], &d.bwd_per_sm[0])) != cudaSuccess) return e;
            if ((e = kernel_facts<false>(&d.fwd_per_sm[1], &d.bwd_per_sm[1])) != cudaSuccess) return e;
            d.sms = d.sms < 1 ? 1 : d.sms;
            g_dev[dev] = d;
            g_dev_ready[dev].store(true, std::memory_order_release);
        }
    }
    *out = &g_dev[dev];
    return cudaSuccess;
}

// Blocks per sample of the forward (1..CL_MAX): minimise waves x tiles-per-block.
static int fwd_split(int64_t n, const DevInfo& d, int tf32) {
    const long long slots = (long long)d.sms * d.fwd_per_sm[tf32];
    int cl = 1;
    long long best = -1;
    for (int c = 1; c <= CL_MAX; ++c) {
        const long long waves = ((long long)n * c + slots - 1) / slots;
        const long long cost = waves * ((F_TILES + c - 1) / c);
        if (best < 0 || cost < best) { best = cost; cl = c; }
    }
    return cl;
}

// Blocks of the persistent backward kernel: one full wave (every SM filled), fewer when there are fewer tiles.
// grad_w/grad_b add the blocks' partials in block order: bit-identical from run to run on one device.
static long long bwd_grid(int64_t n, const DevInfo& d, int tf32) {
    const long long tiles = (long long)n * B_TILES, wave = (long long)d.sms * d.bwd_per_sm[tf32];
    return tiles < wave ? tiles : wave;
}
}  // namespace kgen_conv2d_avgpool_act_reduce_db82dd54_ns

// Workspace bytes the forward (backward == 0) or the backward (backward != 0) needs at batch n on the current
// device, in TF32 mode tf32 (0: 3xTF32, 1: one TF32 pass; the launch must pass the same). Uninitialised memory is
// fine: every float the kernels read back was written earlier in the same call.
extern "C" cudaError_t kgen_conv2d_avgpool_act_reduce_db82dd54_workspace_bytes(int64_t n, int backward, int tf32, size_t* bytes) {
    using namespace kgen_conv2d_avgpool_act_reduce_db82dd54_ns;
    tf32 = tf32 ? 1 : 0;
    *bytes = 0;
    if (n <= 0) return cudaSuccess;
    if (!backward) {
#if !KGEN_SM90
        *bytes = (size_t)n * CL_MAX * sizeof(float);   // the blocks' partial sums
#endif
        return cudaSuccess;
    }
    const DevInfo* d = nullptr;
    const cudaError_t e = dev_info(&d);
    if (e != cudaSuccess) return e;
    *bytes = (size_t)bwd_grid(n, *d, tf32) * PART * sizeof(float);   // one grad_w/grad_b partial per block
    return cudaSuccess;
}

extern "C" cudaError_t kgen_conv2d_avgpool_act_reduce_db82dd54_forward(const float* x, const float* w, const float* b, float* out,
                                         void* workspace, int64_t n, int tf32, cudaStream_t stream) {
    using namespace kgen_conv2d_avgpool_act_reduce_db82dd54_ns;
    if (n <= 0) return cudaSuccess;
    tf32 = tf32 ? 1 : 0;
    const DevInfo* d = nullptr;
    cudaError_t e = dev_info(&d);
    if (e != cudaSuccess) return e;
    const int cl = fwd_split(n, *d, tf32);
    const auto kernel = tf32 ? fwd_kernel<false> : fwd_kernel<true>;
    float* fpart = static_cast<float*>(workspace);
#if KGEN_SM90
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((long long)n * cl), 1, 1);
    cfg.blockDim = dim3(NT, 1, 1);
    cfg.dynamicSmemBytes = F_SMEM;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cl;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, x, w, b, out, fpart, cl);
    if (e != cudaSuccess) return e;
#else
    kernel<<<(unsigned)((long long)n * cl), NT, F_SMEM, stream>>>(x, w, b, out, fpart, cl);
    if (cl > 1) {
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        fwd_finish_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(fpart, cl, (long long)n, out);
    }
#endif
    return cudaGetLastError();
}

extern "C" cudaError_t kgen_conv2d_avgpool_act_reduce_db82dd54_backward(const float* grad_out, const float* x, const float* w, const float* b,
                                          float* grad_x, float* grad_w, float* grad_b, void* workspace,
                                          int64_t n, int tf32, cudaStream_t stream) {
    using namespace kgen_conv2d_avgpool_act_reduce_db82dd54_ns;
    tf32 = tf32 ? 1 : 0;
    const int want_wb = (grad_w != nullptr || grad_b != nullptr) ? 1 : 0;
    float* part = static_cast<float*>(workspace);
    cudaError_t e;
    long long G = 0;
    if (n > 0 && (want_wb || grad_x != nullptr)) {
        const DevInfo* d = nullptr;
        if ((e = dev_info(&d)) != cudaSuccess) return e;
        G = bwd_grid(n, *d, tf32);
        const auto kernel = tf32 ? bwd_kernel<false> : bwd_kernel<true>;
        kernel<<<(unsigned)G, NT, B_SMEM, stream>>>(grad_out, x, w, b, grad_x, part, (long long)n * B_TILES, (int)G,
                                                    want_wb);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (want_wb) {   // G == 0 (empty batch): zeros
        wb_reduce_kernel<<<(PART + 31) / 32, 32 * WB_SLICES, 0, stream>>>(part, (int)G, grad_w, grad_b);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}
