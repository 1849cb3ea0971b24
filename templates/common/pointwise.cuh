// kgen pointwise helpers: the functions the expressions of kgen/pointwise.py's table call (kgen::pw::...).
// float32 throughout, written as PyTorch's CUDA kernels compute each op (aten/src/ATen/native/cuda/Activation*.cu),
// kinks and NaN handling included, except where a cheaper form says how close it stays (mish's and
// gelu's forwards). No torch headers; host-compilable too (the CPU tests evaluate these with g++).
#ifndef KGEN_POINTWISE_CUH
#define KGEN_POINTWISE_CUH

#include <math.h>

#if defined(__CUDACC__)
#define KGEN_PW_FN __host__ __device__ __forceinline__
#else
#define KGEN_PW_FN inline
#endif

namespace kgen {
namespace pw {

constexpr float kOneSixth = 1.0f / 6.0f;
// gelu (ActivationGeluKernel.cu): double constants rounded once to float.
constexpr float kGeluAlpha = (float)0.70710678118654752440;                               // M_SQRT1_2
constexpr float kGeluBeta = (float)(1.12837916709551257390 * 0.70710678118654752440 * 0.5);  // M_2_SQRTPI*M_SQRT1_2/2
constexpr float kGeluTanhBeta = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);  // M_SQRT2*M_2_SQRTPI/2
constexpr float kGeluTanhKappa = (float)0.044715;

// sign as torch.sign: 0 for 0 and NaN.
KGEN_PW_FN float sign(float x) { return (float)((0.0f < x) - (x < 0.0f)); }

// maximum / minimum as torch.maximum / torch.minimum: a NaN operand wins (fmaxf alone would drop it).
KGEN_PW_FN float maximum(float a, float b) { return (a != a) ? a : ((b != b) ? b : fmaxf(a, b)); }
KGEN_PW_FN float minimum(float a, float b) { return (a != a) ? a : ((b != b) ? b : fminf(a, b)); }

// clamp as torch.clamp: NaN stays NaN; with lo > hi every value becomes hi. relu, relu6 and hardtanh are clamps.
KGEN_PW_FN float clamp(float x, float lo, float hi) { return (x != x) ? x : fminf(fmaxf(x, lo), hi); }
KGEN_PW_FN float clamp_min(float x, float lo) { return (x != x) ? x : fmaxf(x, lo); }
KGEN_PW_FN float clamp_max(float x, float hi) { return (x != x) ? x : fminf(x, hi); }
KGEN_PW_FN float relu(float x) { return clamp_min(x, 0.0f); }

// hardsigmoid / hardswish: min(max(x + 3, 0), 6) / 6, multiplying by the float 1/6 as the CUDA kernels do.
KGEN_PW_FN float hardsigmoid(float x) { return clamp(x + 3.0f, 0.0f, 6.0f) * kOneSixth; }
KGEN_PW_FN float hardswish(float x) { return x * clamp(x + 3.0f, 0.0f, 6.0f) * kOneSixth; }

// gelu, exact: x/2 (1 + erf(x / sqrt 2)); its derivative cdf + x pdf. The forward's erf is Abramowitz & Stegun
// 7.1.26 (|error| < 1.5e-7): for u = x / sqrt 2 and a = |u|, erfc(a) = t P(t) exp(-a^2) with t = 1 / (1 + p a), and
// gelu = x (1 - erfc(a) / 2) for u >= 0, x erfc(a) / 2 below (no cancellation where gelu nears 0); NaN and
// gelu(-inf) = NaN as PyTorch's. On the GPU with the fast exp and reciprocal: about 17 instructions instead of erff's
// 30 (H200: erff was over half the instructions of the gelu -> global average forward's epilogue).
KGEN_PW_FN float gelu(float x) {
  const float u = x * kGeluAlpha, a = fabsf(u);
#if defined(__CUDA_ARCH__)
  const float t = __fdividef(1.0f, fmaf(0.3275911f, a, 1.0f)), e = __expf(-a * a);
#else
  const float t = 1.0f / fmaf(0.3275911f, a, 1.0f), e = expf(-a * a);
#endif
  const float poly = fmaf(t, fmaf(t, fmaf(t, fmaf(t, 1.061405429f, -1.453152027f), 1.421413741f), -0.284496736f),
                          0.254829592f);
  const float h = 0.5f * t * poly * e;  // erfc(a) / 2
  return u >= 0.0f ? x * (1.0f - h) : x * h;
}
KGEN_PW_FN float gelu_vjp(float g, float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kGeluAlpha));
  const float pdf = expf(-0.5f * x * x) * kGeluBeta;
  return g * (cdf + x * pdf);
}

// gelu, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
KGEN_PW_FN float gelu_tanh(float x) {
  const float inner = kGeluTanhBeta * (x + kGeluTanhKappa * (x * x * x));
  return 0.5f * x * (1.0f + tanhf(inner));
}
KGEN_PW_FN float gelu_tanh_vjp(float g, float x) {
  const float x_sq = x * x;
  const float t = tanhf(kGeluTanhBeta * (x + kGeluTanhKappa * (x_sq * x)));
  const float left_derivative = 0.5f * (1.0f + t);
  const float right_derivative = 0.5f * x * (1.0f - t * t) * (kGeluTanhBeta * (1.0f + 3.0f * kGeluTanhKappa * x_sq));
  return g * (left_derivative + right_derivative);
}

// sigmoid's derivative from x (the table's first form reads the output instead).
KGEN_PW_FN float sigmoid_vjp(float g, float x) {
  const float s = 1.0f / (1.0f + expf(-x));
  return g * (1.0f - s) * s;
}

// silu(x) = x sigmoid(x); derivative s (1 + x (1 - s)).
KGEN_PW_FN float silu_vjp(float g, float x) {
  const float s = 1.0f / (1.0f + expf(-x));
  return g * s * (1.0f + x * (1.0f - s));
}

// mish(x) = x tanh(log1p(exp(x))) (no softplus threshold, as PyTorch), with one exp instead of exp, log1p and tanh:
// for e = exp(x) and n = e (e + 2), tanh(log1p(e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1) = n / (n + 2). Above 20 that
// ratio is 1 in float32 (and n would overflow past 44), so mish is x. Derivative t + x s (1 - t^2), with s = e / (1 + e)
// and 1 - t^2 = 4 (n + 1) / (n + 2)^2 (no cancellation as t nears 1). H200, the MaxPool2d -> mish forward: log1pf and
// tanhf were about a third of its epilogue's instructions.
// The forward takes the GPU's fast exp and division (ex2.approx and rcp.approx: a few ulp, about 3e-6 relative at
// x = 20; an exp that underflows makes mish -0 instead of a denormal), the host libm's: 2 instructions each instead of
// about 12 (H200, the MaxPool2d -> mish forward).
KGEN_PW_FN float mish(float x) {
  if (x > 20.0f) return x;
#if defined(__CUDA_ARCH__)
  const float e = __expf(x), n = e * (e + 2.0f);
  return x * __fdividef(n, n + 2.0f);
#else
  const float e = expf(x), n = e * (e + 2.0f);
  return x * (n / (n + 2.0f));
#endif
}
KGEN_PW_FN float mish_vjp(float g, float x) {
  if (x > 20.0f) return g + x * 0.0f;  // NaN at x = inf, as PyTorch's inf * (1 - t^2)
  const float e = expf(x), n = e * (e + 2.0f), d = n + 2.0f;
  return g * (n / d + x * (e / (1.0f + e)) * (4.0f * (n + 1.0f) / (d * d)));
}

// softplus(x) = log1p(exp(beta x)) / beta, or x itself where beta x > threshold (the gradient switches with it).
KGEN_PW_FN float softplus(float x, float beta, float threshold) {
  return (x * beta) > threshold ? x : log1pf(expf(x * beta)) / beta;
}
KGEN_PW_FN float softplus_vjp(float g, float x, float beta, float threshold) {
  const float z = expf(x * beta);
  return (x * beta) > threshold ? g : g * z / (z + 1.0f);
}

// x ** e for a constant e, as PyTorch's CUDA pow_tensor_scalar kernel computes it: products for 2 and 3, sqrt, rsqrt
// and reciprocals for 0.5, -0.5, -1 and -2, powf otherwise (pow(x, 0) is 1, NaN included). The branches fold away
// where e is a literal.
KGEN_PW_FN float rsqrt(float x) {
#if defined(__CUDA_ARCH__)
  return rsqrtf(x);
#else
  return 1.0f / sqrtf(x);
#endif
}
KGEN_PW_FN float pow_scalar(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 3.0f) return x * x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == -0.5f) return rsqrt(x);
  if (e == -1.0f) return 1.0f / x;
  if (e == -2.0f) return 1.0f / (x * x);
  return powf(x, e);
}

// log_sigmoid (ActivationLogSigmoidKernel.cu): min(x, 0) - log1p(exp(-|x|)); its derivative from x.
KGEN_PW_FN float logsigmoid(float x) { return fminf(0.0f, x) - log1pf(expf(-fabsf(x))); }
KGEN_PW_FN float logsigmoid_vjp(float g, float x) {
  const bool neg = x < 0.0f;
  const float z = expf(-fabsf(x));
  return g * ((neg ? 1.0f : 0.0f) - (neg ? 1.0f : -1.0f) * (z / (1.0f + z)));
}

}  // namespace pw
}  // namespace kgen

#endif  // KGEN_POINTWISE_CUH
