"""Runs the pool family's simple forward (templates/pool/forward_simple.cu.j2, float32) on the CPU under
tests/host_fma.py's host shim (one std::thread a CUDA thread, a warp barrier for shuffles), so both of its launches
(RS = 1 and RS = ROW_SPLIT lanes across the rows) are checked against PyTorch without a GPU: values and int64
indices. The kernel's text is cut from the rendered kernel.cu (its constants through the simple forward)."""

import subprocess
from pathlib import Path

import torch

from tests.host_fma import GXX, PRELUDE, section

SHIM = r"""
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
namespace kgen {
constexpr int imin(int a, int b) { return a < b ? a : b; }
constexpr int imax(int a, int b) { return a > b ? a : b; }
}
namespace pool {
inline float to_float(float v) { return v; }
template <typename T> T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
}
"""


def host_source(kernel_cu: str, name: str, rs: int, indices: bool, items: int) -> str:
    body = section(kernel_cu, "using T = ", "constexpr int64_t FORWARD_ITEMS_PER_PLANE")
    wi = "true" if indices else "false"
    return (PRELUDE + SHIM + "namespace {\n" + body + "}\n" + f"""
int main() {{
  auto x = read_floats("x.bin");
  std::vector<float> y({items}, NAN);
  std::vector<int64_t> idx({items}, -7);
  const unsigned per_block = THREADS / (SPLIT * {rs});
  launch(({items} + per_block - 1) / per_block, 1, 1, THREADS,
         [&] {{ {name}_fwd<{rs}, true, {wi}, false>(x.data(), y.data(), idx.data(), nullptr, {items}LL); }});
  write_floats("y.bin", y);
  FILE* f = std::fopen("idx.bin", "wb");
  std::fwrite(idx.data(), 8, idx.size(), f);
  std::fclose(f);
  return 0;
}}
""")


def run_simple_forward(kernel_cu: str, name: str, rs: int, indices: bool, x: torch.Tensor, out_shape: tuple,
                       work: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, int64 indices) of the simple forward launched with RS lanes across the rows, on x (float32, contiguous)."""
    work.mkdir(parents=True, exist_ok=True)
    items = int(torch.Size(out_shape).numel())
    (work / "host.cpp").write_text(host_source(kernel_cu, name, rs, indices, items))
    x.detach().to(torch.float32).contiguous().numpy().tofile(work / "x.bin")
    r = subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "-w", "host.cpp", "-o", "host"], cwd=work,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(["./host"], cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    y = torch.from_file(str(work / "y.bin"), size=items, dtype=torch.float32).view(out_shape)
    idx = torch.from_file(str(work / "idx.bin"), size=items, dtype=torch.int64).view(out_shape)
    return y, idx
