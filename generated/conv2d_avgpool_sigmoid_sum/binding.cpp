// kgen_conv2d_avgpool_act_reduce_acccf95f: torch glue for the fused Conv2d -> AvgPool2d -> sigmoid -> sum kernels in kernel.cu
// (ops under torch.ops.kgen_conv2d_avgpool_act_reduce_acccf95f).
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
#include <ATen/ops/empty_like.h>

#include <array>

extern "C" size_t kgen_conv2d_avgpool_act_reduce_acccf95f_workspace_bytes(int64_t n);
extern "C" cudaError_t kgen_conv2d_avgpool_act_reduce_acccf95f_forward(const float* x, const float* w, const float* b, float* out, void* workspace,
                                          int64_t n, cudaStream_t stream);
extern "C" cudaError_t kgen_conv2d_avgpool_act_reduce_acccf95f_backward(const float* grad_out, const float* x, const float* w, const float* b,
                                           float* grad_x, float* grad_w, float* grad_b, void* workspace, int64_t n,
                                           cudaStream_t stream);

namespace {

constexpr const char* kProblem = "conv2d_avgpool_sigmoid_sum";

struct Checked {
  at::Tensor x, w, b;
};

Checked check(const at::Tensor& x_in, const at::Tensor& w_in, const std::optional<at::Tensor>& b_in) {
  Checked c;
  c.x = kgen_glue::check_input(x_in, "input x", {-1, 8, 384, 384}, kProblem);
  c.w = kgen_glue::check_input(w_in, "conv weight", {64, 8, 3, 3}, kProblem);
  kgen_glue::check_same_device(c.x, c.w, "conv weight", kProblem);
  TORCH_CHECK(b_in.has_value() && b_in->defined(), "kgen ", kProblem, ": conv bias is missing but the model was generated with bias=True");
  c.b = kgen_glue::check_input(*b_in, "conv bias", {64}, kProblem);
  kgen_glue::check_same_device(c.x, c.b, "conv bias", kProblem);
  return c;
}

const float* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

at::Tensor workspace(const at::Tensor& like, int64_t n) {
  const int64_t bytes = static_cast<int64_t>(kgen_conv2d_avgpool_act_reduce_acccf95f_workspace_bytes(n));
  return at::empty({bytes > 0 ? bytes : 1}, like.options().dtype(at::kByte));
}

at::Tensor forward(const at::Tensor& x_in, const at::Tensor& w_in, const std::optional<at::Tensor>& b_in) {
  const Checked c = check(x_in, w_in, b_in);
  const c10::cuda::CUDAGuard guard(c.x.device());
  const int64_t n = c.x.size(0);
  at::Tensor out = at::empty({n}, c.x.options());
  at::Tensor ws = workspace(c.x, n);
  kgen_glue::check_launch(kgen_conv2d_avgpool_act_reduce_acccf95f_forward(c.x.data_ptr<float>(), c.w.data_ptr<float>(), ptr_or_null(c.b),
                                             out.data_ptr<float>(), ws.data_ptr(), n,
                                             c10::cuda::getCurrentCUDAStream().stream()), "fused forward", kProblem);
  return out;
}

// Gradients for (x, weight, bias) as requested by output_mask; an unrequested one is returned as an empty tensor
// and costs no work.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& grad_out_in, const at::Tensor& x_in,
                                                        const at::Tensor& w_in, const std::optional<at::Tensor>& b_in,
                                                        std::array<bool, 3> output_mask) {
  const Checked c = check(x_in, w_in, b_in);
  const int64_t n = c.x.size(0);
  const at::Tensor grad_out = kgen_glue::check_input(grad_out_in, "grad_out", {n}, kProblem);
  const c10::cuda::CUDAGuard guard(c.x.device());
  at::Tensor none = at::empty({0}, c.x.options());
  at::Tensor gx = output_mask[0] ? at::empty_like(c.x) : none;
  at::Tensor gw = output_mask[1] ? at::empty_like(c.w) : none;
  at::Tensor gb = (output_mask[2] && c.b.defined()) ? at::empty_like(c.b) : none;
  if (output_mask[0] || output_mask[1] || gb.numel()) {
    at::Tensor ws = workspace(c.x, n);
    kgen_glue::check_launch(kgen_conv2d_avgpool_act_reduce_acccf95f_backward(grad_out.data_ptr<float>(), c.x.data_ptr<float>(), c.w.data_ptr<float>(),
                                                ptr_or_null(c.b), output_mask[0] ? gx.data_ptr<float>() : nullptr,
                                                output_mask[1] ? gw.data_ptr<float>() : nullptr,
                                                gb.numel() ? gb.data_ptr<float>() : nullptr, ws.data_ptr(), n,
                                                c10::cuda::getCurrentCUDAStream().stream()), "fused backward", kProblem);
  }
  return {gx, gw, gb};
}

}  // namespace

TORCH_LIBRARY(kgen_conv2d_avgpool_act_reduce_acccf95f, m) {
  m.def("forward(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("backward(Tensor grad_out, Tensor x, Tensor weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

// CPU inputs reach the same functions, which reject them with a message saying what to do.
TORCH_LIBRARY_IMPL(kgen_conv2d_avgpool_act_reduce_acccf95f, CUDA, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
TORCH_LIBRARY_IMPL(kgen_conv2d_avgpool_act_reduce_acccf95f, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
