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
