// kgen_avg_pool2d_c48d4bec: torch glue for the AvgPool2d kernels in kernel.cu (ops under torch.ops.kgen_avg_pool2d_c48d4bec).
// kgen fixed C++ glue helpers (pulled into each rendered binding by Jinja include).
// Light headers only: torch/library.h and ATen/core, not torch/extension.h.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace kgen_glue {

inline std::string shape_str(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Checks one float32 CUDA input against the specialization: expected[i] < 0 means "any size" (the batch).
// Returns a contiguous tensor (non-contiguous and channels_last inputs are copied to NCHW-contiguous).
inline at::Tensor check_input(const at::Tensor& t, const char* what, const std::vector<int64_t>& expected,
                              const char* problem) {
  std::string want = "[";
  for (size_t i = 0; i < expected.size(); ++i)
    want += (i ? ", " : "") + (expected[i] < 0 ? std::string("N") : std::to_string(expected[i]));
  want += "]";
  TORCH_CHECK(t.defined(), "kgen ", problem, ": ", what, " is undefined; pass a float32 CUDA tensor of shape ", want);
  TORCH_CHECK(t.is_cuda(), "kgen ", problem, ": ", what, " must be a CUDA tensor, got device ", t.device().str(),
              "; move it with .cuda()");
  TORCH_CHECK(t.scalar_type() == at::kFloat, "kgen ", problem, ": ", what, " must be float32, got ",
              c10::toString(t.scalar_type()), "; convert with .float()");
  bool ok = t.dim() == static_cast<int64_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = expected[i] < 0 || t.size(i) == expected[i];
  TORCH_CHECK(ok, "kgen ", problem, ": ", what, " has shape ", shape_str(t.sizes()), " but this module was generated for ",
              want, " (N: any batch size); regenerate with `kgen generate` for a problem file with this shape");
  return t.contiguous();
}

inline void check_launch(cudaError_t err, const char* kernel, const char* problem) {
  TORCH_CHECK(err == cudaSuccess, "kgen ", problem, ": ", kernel, " failed to launch: ", cudaGetErrorString(err),
              " (", cudaGetErrorName(err), ")");
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* what, const char* problem) {
  TORCH_CHECK(a.device() == b.device(), "kgen ", problem, ": ", what, " is on ", b.device().str(), " but the input is on ",
              a.device().str(), "; move the module and its inputs to one GPU");
}

}  // namespace kgen_glue

extern "C" cudaError_t kgen_avg_pool2d_c48d4bec_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
extern "C" cudaError_t kgen_avg_pool2d_c48d4bec_backward(const float* grad_y, float* grad_x, int64_t n, cudaStream_t stream);

namespace {

constexpr const char* kProblem = "avg_pool2d";

at::Tensor forward(const at::Tensor& x_in) {
  const at::Tensor x = kgen_glue::check_input(x_in, "input x", {-1, 64, 2048, 2048}, kProblem);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty({x.size(0), 64, 186, 186}, x.options());
  kgen_glue::check_launch(kgen_avg_pool2d_c48d4bec_forward(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
                                             c10::cuda::getCurrentCUDAStream().stream()), "avg_pool2d forward", kProblem);
  return y;
}

at::Tensor backward(const at::Tensor& grad_y_in) {
  const at::Tensor grad_y = kgen_glue::check_input(grad_y_in, "grad_y", {-1, 64, 186, 186}, kProblem);
  const c10::cuda::CUDAGuard guard(grad_y.device());
  at::Tensor grad_x = at::empty({grad_y.size(0), 64, 2048, 2048}, grad_y.options());
  kgen_glue::check_launch(kgen_avg_pool2d_c48d4bec_backward(grad_y.data_ptr<float>(), grad_x.data_ptr<float>(), grad_y.size(0),
                                              c10::cuda::getCurrentCUDAStream().stream()), "avg_pool2d backward", kProblem);
  return grad_x;
}

}  // namespace

TORCH_LIBRARY(kgen_avg_pool2d_c48d4bec, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad_y) -> Tensor");
}

// CPU inputs reach the same functions, which reject them with a message saying what to do.
TORCH_LIBRARY_IMPL(kgen_avg_pool2d_c48d4bec, CUDA, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
TORCH_LIBRARY_IMPL(kgen_avg_pool2d_c48d4bec, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
