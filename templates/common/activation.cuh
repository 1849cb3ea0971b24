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
