// kgen_pool_10796d68: torch glue for the avg pooling kernels in kernel.cu (ops under torch.ops.kgen_pool_10796d68).
// forward(x) returns the pooled values;. Autograd is registered here, in C++ (the Autograd key).
// kgen fixed C++ glue helpers (pulled into each rendered binding by Jinja include).
// Light headers only: torch/library.h, ATen/core, the autograd Function header and torch's pybind casters, not
// torch/extension.h.
//
// Autograd lives here, in C++, so a training step costs no Python beyond the module's forward call. The pattern
// each family's binding follows (as torchvision's ops do):
//   TORCH_LIBRARY(ns, m)                 defines "forward(...)" and "backward(...)"
//   TORCH_LIBRARY_IMPL(ns, CUDA, m)      the kernels' launchers (also registered for CPU, to reject CPU tensors)
//   struct XFunction : torch::autograd::Function<XFunction>
//       forward():  at::AutoDispatchBelowADInplaceOrView guard; calls the "forward" op through the dispatcher
//                   (kgen_glue::typed_op), saves what backward needs
//       backward(): calls the "backward" op through the dispatcher (so torch.compile can trace it)
//   TORCH_LIBRARY_IMPL(ns, Autograd, m)  "forward" -> XFunction::apply
//   PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)  m.def("forward", ...): Python's fast path (no dispatcher argument
//                                        boxing): XFunction::apply when a gradient is needed
//                                        (kgen_glue::needs_grad), else the CUDA implementation directly;
//                                        torch.compile traces the op instead
// Python registers only fake (meta) kernels, for torch.compile.
#include <torch/library.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace kgen_glue {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

inline std::string shape_str(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

inline std::string want_str(std::initializer_list<int64_t> expected) {
  std::string want = "[";
  size_t i = 0;
  for (int64_t e : expected) want += (i++ ? ", " : "") + (e < 0 ? std::string("N") : std::to_string(e));
  return want + "]";
}

// PyTorch's name of a dtype ("float32", "float16", "bfloat16", ...), as users write it.
inline const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

// Does autograd have to record this call? (grad mode on and some input requires grad)
inline bool needs_grad(std::initializer_list<c10::optional<at::Tensor>> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const auto& t : inputs)
    if (t.has_value() && t->defined() && t->requires_grad()) return true;
  return false;
}

// The operator `qualified` ("ns::name") of signature Sig, looked up once per call site.
template <typename Sig>
inline c10::TypedOperatorHandle<Sig> typed_op(const char* qualified) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified, "").template typed<Sig>();
}

// Checks one CUDA input against the specialization: expected[i] < 0 means "any size" (the batch). Returns a
// contiguous tensor (non-contiguous and channels_last inputs are copied to contiguous). Messages are built only on
// failure, so the check costs nanoseconds per call.
inline at::Tensor check_input(const at::Tensor& t, const char* what, std::initializer_list<int64_t> expected,
                              at::ScalarType dtype, const char* problem) {
  TORCH_CHECK(t.defined(), "kgen ", problem, ": ", what, " is undefined; give a ", dtype_name(dtype),
              " CUDA tensor of shape ", want_str(expected));
  TORCH_CHECK(t.is_cuda(), "kgen ", problem, ": ", what, " must be a CUDA tensor, got device ", t.device().str(),
              "; move it with .cuda()");
  TORCH_CHECK(t.scalar_type() == dtype, "kgen ", problem, ": ", what, " must be ", dtype_name(dtype), ", got ",
              dtype_name(t.scalar_type()), "; convert it with .to(torch.", dtype_name(dtype),
              ") or regenerate from a problem file with this dtype");
  bool ok = t.dim() == static_cast<int64_t>(expected.size());
  int64_t i = 0;
  for (int64_t e : expected) {
    if (!ok) break;
    ok = e < 0 || t.size(i) == e;
    ++i;
  }
  TORCH_CHECK(ok, "kgen ", problem, ": ", what, " has shape ", shape_str(t.sizes()),
              " but this module was generated for ", want_str(expected),
              " (N: any batch size); regenerate with `kgen generate` for a problem file with this shape");
  return t.is_contiguous() ? t : t.contiguous();
}

inline at::Tensor check_input(const at::Tensor& t, const char* what, std::initializer_list<int64_t> expected,
                              const char* problem) {
  return check_input(t, what, expected, at::kFloat, problem);
}

// t, or a copy of it where its data does not start 16-byte aligned (kernels that read it in 16-byte vectors need that).
inline at::Tensor aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 != 0 ? t.clone() : t;
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

#include <cstdint>
#include <tuple>

extern "C" cudaError_t kgen_pool_10796d68_forward(const void* x, void* y, int64_t* indices, void* offsets, int64_t planes,
                                          cudaStream_t stream);
extern "C" cudaError_t kgen_pool_10796d68_backward(const void* grad_y, int grad_y_bcast, const void* offsets, void* grad_x,
                                           int64_t planes, cudaStream_t stream);

namespace {

constexpr const char* kProblem = "avg_pool2d";
constexpr at::ScalarType kDtype = at::kFloat;

struct Outputs {
  at::Tensor y, indices, offsets;
};

// Runs the forward kernel, writing the requested outputs.
Outputs run_forward(const at::Tensor& x_in, bool values, bool indices, bool offsets) {
  const at::Tensor x = kgen_glue::aligned16(kgen_glue::check_input(x_in, "input x", {-1, 64, 2048, 2048}, kDtype, kProblem));
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t n = x.size(0);
  const int64_t planes = n * 64;
  Outputs o;
  if (values) o.y = at::empty({n, 64, 186, 186}, x.options());
  if (indices) o.indices = at::empty({n, 64, 186, 186}, x.options().dtype(at::kLong));
  kgen_glue::check_launch(kgen_pool_10796d68_forward(x.const_data_ptr(), values ? o.y.data_ptr() : nullptr,
                                             indices ? o.indices.data_ptr<int64_t>() : nullptr,
                                             offsets ? o.offsets.data_ptr() : nullptr, planes,
                                             c10::cuda::getCurrentCUDAStream().stream()),
                          "pool forward", kProblem);
  return o;
}

at::Tensor forward(const at::Tensor& x) { return run_forward(x, true, false, false).y; }

// grad_y that is one value broadcast over the output (every stride 0, as the gradient of y.sum() is): read in
// place, never materialized.
bool broadcast_scalar(const at::Tensor& t) {
  if (!t.defined() || t.numel() <= 1) return false;
  for (int64_t s : t.strides()) {
    if (s != 0) return false;
  }
  return true;
}

// Checks a broadcast grad_y (device, dtype, shape) as check_input would, without the copy to contiguous.
void check_broadcast(const at::Tensor& t) {
  TORCH_CHECK(t.is_cuda(), "kgen ", kProblem, ": grad_y must be a CUDA tensor, got device ", t.device().str());
  TORCH_CHECK(t.scalar_type() == kDtype, "kgen ", kProblem, ": grad_y must be ", kgen_glue::dtype_name(kDtype), ", got ",
              kgen_glue::dtype_name(t.scalar_type()));
  const std::initializer_list<int64_t> want = {-1, 64, 186, 186};
  bool ok = t.dim() == static_cast<int64_t>(want.size());
  int64_t i = 0;
  for (int64_t e : want) {
    if (!ok) break;
    ok = e < 0 || t.size(i) == e;
    ++i;
  }
  TORCH_CHECK(ok, "kgen ", kProblem, ": grad_y has shape ", kgen_glue::shape_str(t.sizes()), " but the output is ",
              kgen_glue::want_str(want));
}

at::Tensor backward(const at::Tensor& grad_y_in) {
  const bool bcast = broadcast_scalar(grad_y_in);
  if (bcast) check_broadcast(grad_y_in);
  const at::Tensor grad_y = bcast ? grad_y_in : kgen_glue::check_input(grad_y_in, "grad_y", {-1, 64, 186, 186}, kDtype, kProblem);
  const c10::cuda::CUDAGuard guard(grad_y.device());
  const int64_t n = grad_y.size(0);
  const int64_t planes = n * 64;
  at::Tensor grad_x = at::empty({n, 64, 2048, 2048}, grad_y.options().memory_format(at::MemoryFormat::Contiguous));
  kgen_glue::check_launch(kgen_pool_10796d68_backward(grad_y.const_data_ptr(), bcast ? 1 : 0,
                                              nullptr, grad_x.data_ptr(),
                                              planes, c10::cuda::getCurrentCUDAStream().stream()),
                          "pool backward", kProblem);
  return grad_x;
}

// Autograd in C++: forward runs below the Autograd key and saves nothing (an average pool's gradient needs only grad_y); backward calls the
// backward op through the dispatcher (so torch.compile can trace it).
struct PoolFunction : public torch::autograd::Function<PoolFunction> {
  static at::Tensor forward(kgen_glue::AutogradContext* ctx, const at::Tensor& x) {
    static const auto op = kgen_glue::typed_op<at::Tensor(const at::Tensor&)>("kgen_pool_10796d68::forward");
    at::AutoDispatchBelowADInplaceOrView below;
    return op.call(x);
  }
  static kgen_glue::variable_list backward(kgen_glue::AutogradContext* ctx, kgen_glue::variable_list grads) {
    static const auto op = kgen_glue::typed_op<at::Tensor(const at::Tensor&)>("kgen_pool_10796d68::backward");
    return {op.call(grads[0])};
  }
};

at::Tensor forward_with_grad(const at::Tensor& x) {
  return PoolFunction::apply(x);
}

// The Autograd-key kernel of forward: the autograd Function when a gradient is wanted, else the plain op (no
// bookkeeping).
at::Tensor forward_autograd(const at::Tensor& x) {
  if (kgen_glue::needs_grad({x})) return forward_with_grad(x);
  static const auto op = kgen_glue::typed_op<at::Tensor(const at::Tensor&)>("kgen_pool_10796d68::forward");
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(x);
}

// Python's fast path (no dispatcher argument boxing): the same autograd Function, else the CUDA implementation.
at::Tensor forward_fast(const at::Tensor& x) {
  if (kgen_glue::needs_grad({x})) return forward_with_grad(x);
  return forward(x);
}

}  // namespace

TORCH_LIBRARY(kgen_pool_10796d68, m) {
  m.def("forward(Tensor x) -> Tensor");
  m.def("backward(Tensor grad_y) -> Tensor");
}

// CPU inputs reach the same functions, which reject them with a message saying what to do.
TORCH_LIBRARY_IMPL(kgen_pool_10796d68, CUDA, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
TORCH_LIBRARY_IMPL(kgen_pool_10796d68, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
}
TORCH_LIBRARY_IMPL(kgen_pool_10796d68, Autograd, m) {
  m.impl("forward", &forward_autograd);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward_fast, "avg pooling forward with autograd (the fast path from Python)");
}
