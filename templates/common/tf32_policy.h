// When a float32 convolution runs in TF32 (kgen/cudnn_tf32.py): only where PyTorch allows it
// (torch.backends.cudnn.allow_tf32, read at each call) and cuDNN would pick a TF32 kernel for this shape and batch,
// per pass, as modelled from a survey of cuDNN's own choices; exact float32 (3xTF32) elsewhere, so results stay
// within float32 rounding of eager PyTorch's wherever eager is exact. KGEN_TF32=all in the environment: TF32 in every
// pass whenever PyTorch allows it.
#include <ATen/Context.h>

#include <cstdlib>
#include <cstring>

namespace kgen_tf32 {
inline bool every_pass() {
  const char* v = std::getenv("KGEN_TF32");
  return v != nullptr && std::strcmp(v, "all") == 0;
}
inline bool allowed() { return at::globalContext().allowTF32CuDNN(); }
inline bool forward(int64_t n) { (void)n; return allowed() && (every_pass() || {{ TF32_RULES.fwd }}); }
inline bool grad_x(int64_t n) { (void)n; return allowed() && (every_pass() || {{ TF32_RULES.dgrad }}); }
inline bool grad_w(int64_t n) { (void)n; return allowed() && (every_pass() || {{ TF32_RULES.wgrad }}); }
}  // namespace kgen_tf32
