// bfloat16 problems only (DType.headers): rounding a float32 result to the element type.
namespace pool {
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
}  // namespace pool
