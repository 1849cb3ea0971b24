{% raw %}
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
{% endraw %}
