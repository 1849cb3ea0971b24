"""Host cost of the generated bindings' autograd glue, on the CPU (no GPU needed): how many microseconds a forward
with autograd on spends in the C++ `torch::autograd::Function` pattern every binding uses (ConvFunction in
templates/conv2d_epilogue/binding.cpp.j2: saved_data flags, save_for_backward, the inference op called through the
dispatcher) against a hand-written `torch::autograd::Node` (as PyTorch's generated autograd code: SavedVariable
members, edges collected and the output's history set by hand, the kernel function called directly), each around the
same trivial CPU "kernel" (an empty output), so only the glue is timed.

Usage: python tests/dev/autograd_overhead.py [--calls 20000]
Prints microseconds a call for: no grad (the fast path), the Function pattern, the Node pattern, and each one's
backward (autograd engine included). Not a test: a measurement for deciding whether to rewrite the glue."""

import argparse
import time

import torch
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/library.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool needs_grad(std::initializer_list<c10::optional<at::Tensor>> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const auto& t : inputs)
    if (t.has_value() && t->defined() && t->requires_grad()) return true;
  return false;
}

// the "kernel": checks as the bindings do, one output allocation
at::Tensor forward_impl(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  TORCH_CHECK(x.dim() == 4 && w.dim() == 4, "shapes");
  return at::empty({x.size(0), w.size(0), 1, 1}, x.options());
}
std::vector<at::Tensor> backward_impl(const at::Tensor& g, const at::Tensor& x, const at::Tensor& w,
                                      const std::optional<at::Tensor>& b, std::array<bool, 3> mask) {
  return {mask[0] ? at::zeros_like(x) : at::Tensor(), mask[1] ? at::zeros_like(w) : at::Tensor(),
          mask[2] && b ? at::zeros_like(*b) : at::Tensor()};
}

using ForwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&);

// The bindings' pattern
struct GlueFunction : public torch::autograd::Function<GlueFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b) {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("kgen_glue_bench::forward", "").typed<ForwardSig>();
    const bool has_bias = b.has_value() && b->defined();
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["stored"] = false;
    at::AutoDispatchBelowADInplaceOrView below;
    at::Tensor y = op.call(x, w, b);
    ctx->save_for_backward({x, w, has_bias ? *b : at::Tensor()});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), has_bias && ctx->needs_input_grad(2)};
    const std::optional<at::Tensor> bias = has_bias ? std::optional<at::Tensor>(s[2]) : std::nullopt;
    return backward_impl(grads[0], s[0], s[1], bias, mask);
  }
};

at::Tensor function_path(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  if (needs_grad({x, w, b})) return GlueFunction::apply(x, w, b);
  return forward_impl(x, w, b);
}

// The generated-code pattern: a Node with its saved variables as members
struct GlueBackward : public torch::autograd::Node {
  torch::autograd::SavedVariable x_, w_, b_;
  bool has_bias = false;
  variable_list apply(variable_list&& grads) override {
    const auto self = getptr();
    const at::Tensor x = x_.unpack(self), w = w_.unpack(self);
    const std::optional<at::Tensor> b = has_bias ? std::optional<at::Tensor>(b_.unpack(self)) : std::nullopt;
    std::array<bool, 3> mask = {task_should_compute_output(0), task_should_compute_output(1),
                                has_bias && task_should_compute_output(2)};
    return backward_impl(grads[0], x, w, b, mask);
  }
  std::string name() const override { return "GlueBackward"; }
  void release_variables() override { x_.reset_data(); w_.reset_data(); b_.reset_data(); }
};

// torch 2.11 holds autograd nodes in std::shared_ptr, newer torch in c10::intrusive_ptr (Edge::function's type)
using NodePtr = std::decay_t<decltype(std::declval<torch::autograd::Edge>().function)>;
template <class T, class P> struct MakeNode;
template <class T> struct MakeNode<T, std::shared_ptr<torch::autograd::Node>> {
  static std::shared_ptr<T> make() { return std::make_shared<T>(); }
};
template <class T> struct MakeNode<T, c10::intrusive_ptr<torch::autograd::Node>> {
  static c10::intrusive_ptr<T> make() { return c10::make_intrusive<T>(); }
};

at::Tensor node_path(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b) {
  const bool has_bias = b.has_value() && b->defined();
  if (!needs_grad({x, w, b})) return forward_impl(x, w, b);
  at::Tensor y;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    y = forward_impl(x, w, b);
  }
  auto node = MakeNode<GlueBackward, NodePtr>::make();
  node->set_next_edges(torch::autograd::collect_next_edges(x, w, has_bias ? *b : at::Tensor()));
  node->x_ = torch::autograd::SavedVariable(x, false);
  node->w_ = torch::autograd::SavedVariable(w, false);
  if (has_bias) node->b_ = torch::autograd::SavedVariable(*b, false);
  node->has_bias = has_bias;
  torch::autograd::set_history(y, node);
  return y;
}
}  // namespace

TORCH_LIBRARY(kgen_glue_bench, m) { m.def("forward(Tensor x, Tensor weight, Tensor? bias) -> Tensor"); }
TORCH_LIBRARY_IMPL(kgen_glue_bench, CPU, m) { m.impl("forward", &forward_impl); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("function_path", &function_path);
  m.def("node_path", &node_path);
}
"""


def us(fn, calls):
    for _ in range(calls // 10):
        fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    ext = load_inline("kgen_autograd_overhead", cpp_sources=SOURCE, extra_cflags=["-O2"], verbose=False)
    x = torch.rand(2, 3, 4, 4)
    w = torch.rand(5, 3, 3, 3, requires_grad=True)
    b = torch.rand(5, requires_grad=True)
    for path in ("function_path", "node_path"):  # the two give the same gradients' shapes
        y = getattr(ext, path)(x, w, b)
        y.sum().backward()
        assert w.grad is not None and b.grad is not None and w.grad.shape == w.shape, path
        w.grad = b.grad = None
    print(f"torch {torch.__version__}, {a.calls} calls each: microseconds a call (CPU host path, trivial kernel)")
    with torch.no_grad():
        print(f"  no grad (fast path)            {us(lambda: ext.function_path(x, w, b), a.calls):7.2f}")
    for path in ("function_path", "node_path"):
        f = getattr(ext, path)
        print(f"  {path:<14} forward         {us(lambda: f(x, w, b), a.calls):7.2f}")
        print(f"  {path:<14} forward+backward {us(lambda: f(x, w, b).sum().backward(), a.calls // 4):7.2f}")


if __name__ == "__main__":
    main()
