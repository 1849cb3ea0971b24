// float16 problems only (DType.headers): rounding a float32 result to the element type.
namespace pool {
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
}  // namespace pool
