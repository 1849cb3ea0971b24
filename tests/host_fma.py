"""Runs conv2d_epilogue's kernels on the CPU: those made of plain float32 FMAs (grad_x with FMAs (FMA_DX), the FMA
forward where a tree has it (FMA_FWD), the direct forward and grad_x of one input channel a group (DIRECT)) and the
convolutions from halo tiles (the forward, grad_x and grad_w) on an emulated mma.sync. Their text is cut from the rendered kernel.cu at its section
markers and compiled with g++ under a thin host shim (one std::thread a CUDA thread, a std::barrier for
__syncthreads, blocks one at a time, shared memory as function statics, dynamic shared memory one static buffer), so
their indexing is checked against PyTorch without a GPU (tests/test_host_fma.py). __syncwarp is a std::barrier a
warp, __shfl_xor_sync an exchange through a static array between two of them; mma.sync m16n8k8 TF32 likewise: each
lane posts its fragments, then computes its outputs from the warp's (operands' low 13 bits dropped as the tensor core
does, products summed in double, the result truncated to float32 as the tensor core does); cp.async is a plain copy.
`forward_fold` runs the FMA forward with a first reduction over (H, W) folded in (FUSED_REDUCE) and its finishing
kernel; the halo runs take the tile machinery's and the halo sections (cp.async helpers cut out, the shim's used
instead)."""

import re
import shutil
import subprocess
from pathlib import Path

import torch

GXX = shutil.which("g++")

PRELUDE = r"""
#include <algorithm>
#include <barrier>
#include <memory>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct HostIdx { unsigned x, y, z; };
thread_local HostIdx threadIdx, blockIdx, gridDim;
static std::barrier<>* g_bar = nullptr;
static std::vector<std::barrier<>*> g_warp_bars;  // one a warp of the running block
inline void __syncthreads() { g_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_warp_bars[threadIdx.x / 32]->arrive_and_wait(); }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float2 make_float2(float a, float b) { return float2{a, b}; }
template <class V> inline V __shfl_xor_sync(unsigned, V v, int s, int = 32) {  // float or int; width: lanes s < it
  static V slots[1024];  // the exchange slots, one a thread of the running block
  const unsigned t = threadIdx.x;
  slots[t] = v;
  __syncwarp();
  const V r = slots[t ^ static_cast<unsigned>(s)];
  __syncwarp();
  return r;
}
using std::isnan;
template <class T> inline T __ldg(const T* p) { return *p; }
using cudaError_t = int;
constexpr int cudaSuccess = 0, cudaErrorMisalignedAddress = 716;
alignas(16) static float g_dyn_smem[64 * 1024];  // a block's dynamic shared memory (extern __shared__), 256 KB
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
// cvt.rna.tf32.f32: to nearest, ties away from zero, on the magnitude's bits (Inf / NaN kept)
inline uint32_t tf32_rna(float v) {
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 for one warp: each lane posts its fragments, then computes its
// four outputs from the warp's (the operands' low 13 bits ignored, as the tensor core does; products summed in
// double, the result truncated to float32). a: (row g, k q), (g + 8, q), (g, q + 4), (g + 8, q + 4); b: (k q, col g), (q + 4, g); c: (g, 2q), (g, 2q + 1),
// (g + 8, 2q), (g + 8, 2q + 1); g = lane / 4, q = lane % 4.
static uint32_t g_mma_a[1024][4], g_mma_b[1024][2];
// the tensor core's float32 result: truncated (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021), so a
// long chain of mmas on one accumulator drifts toward zero as on the GPU
inline float round_toward_zero(double v) {
  float f = (float)v;
  return std::fabs((double)f) > std::fabs(v) ? std::nextafter(f, 0.0f) : f;
}
inline float tf32_operand(uint32_t u) { return __uint_as_float(u & 0xffffe000u); }
inline void kg_mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  const unsigned t = threadIdx.x, w0 = t & ~31u, lane = t & 31u, g = lane >> 2, q = lane & 3u;
  g_mma_a[t][0] = a0, g_mma_a[t][1] = a1, g_mma_a[t][2] = a2, g_mma_a[t][3] = a3;
  g_mma_b[t][0] = b0, g_mma_b[t][1] = b1;
  __syncwarp();
  auto A = [&](unsigned r, unsigned k) { return tf32_operand(g_mma_a[w0 + (r % 8) * 4 + k % 4][(r >= 8) + 2 * (k >= 4)]); };
  auto B = [&](unsigned k, unsigned n) { return tf32_operand(g_mma_b[w0 + n * 4 + k % 4][k >= 4]); };
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned r = g + 8 * (i >= 2), n = 2 * q + (i & 1);
    double s = 0.0;
    for (unsigned k = 0; k < 8; ++k) s += (double)A(r, k) * (double)B(k, n);
    c[i] = round_toward_zero((double)c[i] + s);
  }
  __syncwarp();
}
struct KgAFrag { uint32_t h[4], l[4]; };
struct KgBFrag { uint32_t h[2], l[2]; };
inline void kg_mma3(float (&c)[4], const KgAFrag& a, const KgBFrag& b) {
  kg_mma(c, a.l[0], a.l[1], a.l[2], a.l[3], b.h[0], b.h[1]);
  kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.l[0], b.l[1]);
  kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.h[0], b.h[1]);
}
template <bool X3>
inline void kg_mma_x(float (&c)[4], const KgAFrag& a, const KgBFrag& b) {
  if constexpr (X3) kg_mma3(c, a, b);
  else kg_mma(c, a.h[0], a.h[1], a.h[2], a.h[3], b.h[0], b.h[1]);
}
// cp.async as a plain copy (the shim's barriers order it as cp.async.wait_group and __syncthreads would)
template <int N>
inline void cp_async_n(float* smem, const float* src, bool valid) {
  for (int i = 0; i < N; ++i) smem[i] = valid ? src[i] : 0.0f;
}
inline void cp_async4(float* smem, const float* src, bool valid) { cp_async_n<1>(smem, src, valid); }
inline void cp_async16(float* smem, const float* src) { cp_async_n<4>(smem, src, true); }
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

// One launch: every block in turn, its `threads` threads concurrently.
template <class F>
void launch(unsigned gx, unsigned gy, unsigned gz, unsigned threads, F body) {
  for (unsigned bz = 0; bz < gz; ++bz)
    for (unsigned by = 0; by < gy; ++by)
      for (unsigned bx = 0; bx < gx; ++bx) {
        std::barrier<> bar(threads);
        g_bar = &bar;
        std::vector<std::unique_ptr<std::barrier<>>> warps;
        g_warp_bars.clear();
        for (unsigned w0 = 0; w0 < threads; w0 += 32) {
          warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - w0)));
          g_warp_bars.push_back(warps.back().get());
        }
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            threadIdx = HostIdx{t, 0, 0};
            blockIdx = HostIdx{bx, by, bz};
            gridDim = HostIdx{gx, gy, gz};
            body();
            bar.arrive_and_drop();  // a thread that left lets the others pass later barriers
            g_warp_bars[t / 32]->arrive_and_drop();
          });
        for (auto& th : ts) th.join();
      }
}
static std::vector<float> read_floats(const char* path) {
  FILE* f = std::fopen(path, "rb");
  std::fseek(f, 0, SEEK_END);
  const long bytes = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  std::vector<float> v(bytes / 4);
  if (std::fread(v.data(), 4, v.size(), f) != v.size()) std::exit(3);
  std::fclose(f);
  return v;
}
static void write_floats(const char* path, const std::vector<float>& v) {
  FILE* f = std::fopen(path, "wb");
  std::fwrite(v.data(), 4, v.size(), f);
  std::fclose(f);
}
"""


def section(src: str, start: str, end: str) -> str:
    """The rendered text from the line starting with `start` up to (not including) the next line starting with `end`."""
    i = src.index("\n" + start) + 1
    j = src.index("\n" + end, i) + 1
    return src[i:j]


def host_source(kernel_cu: str, which: str, d: dict, n: int, tf32: bool) -> str:
    """A host program that runs kernel `which` ("grad_x", "forward", "forward_fold", "forward_cfold", "halo_forward",
    "halo_fold", "halo_cfold", "halo_grad_x", "halo_grad_w", "pw_grad_w", "direct_forward" or "direct_grad_x") of the rendered kernel.cu on inputs
    read from in<k>.bin (grad_x: gz, w; grad_w: gz, x; the forwards: x, w, bias, the program's parameters) and writes
    out.bin (the forwards: y, and z to z.bin; forward_fold / halo_fold: the first stage's output, one value an (image, channel);
    forward_cfold / halo_cfold: the first stage's output with a reduction over channels folded in, one value an
    (image, position)); d is the family's derive() of the problem."""
    ns = re.search(r"^namespace (kgen_conv2d_epilogue_\w+_ns) \{", kernel_cu, re.M).group(1)
    pointwise = section(kernel_cu, "#ifndef KGEN_POINTWISE_CUH", "namespace " + ns)
    consts = section(kernel_cu, "// ---------------- compile-time problem description", "// ---------------- conv taps")
    # the forward on FMAs, after the folded reduction's constants and helpers where the problem folds one (its FOLD
    # instance uses them; kept by every body that includes the forward)
    fold = next((section(kernel_cu, head, "// ---------------- forward ----------------") for head in
                 ("// ---------------- folded reduction", "// ---------------- folded channel reduction")
                 if "\n" + head in kernel_cu), "")
    forward_only = section(kernel_cu, "// ---------------- forward ----------------", "// A[m][k] = x[n, g*CIG + ci")
    forward = fold + forward_only
    t = "true" if tf32 else "false"

    def grad_x(launch: str) -> str:
        return f"""
  auto gz = read_floats("in0.bin"); auto w = read_floats("in1.bin");
  std::vector<float> gx((size_t){n} * CI * XPLANE, NAN);
  {launch}
  write_floats("out.bin", gx);"""

    def fold_inputs() -> tuple[str, str]:
        """The folded forwards' input reads (x, w, bias, the conv program's parameters) and the parameters' launch
        arguments; their stages' own parameters are not passed (the folded runs take stages without any)."""
        assert not d["stages"][0]["params"], "the host fold runs pass no stage parameters"
        nparams = len(d["conv_params"])
        loads = "".join(f" auto p{i} = read_floats(\"in{3 + i}.bin\");" for i in range(nparams))
        reads = (f'\n  auto x = read_floats("in0.bin"); auto w = read_floats("in1.bin"); auto b = read_floats("in2.bin");{loads}'
                 '\n  const float* bias = b.empty() ? nullptr : b.data();')
        return reads, "".join(f"p{i}.data(), " for i in range(nparams))

    def forward_run(launch: str) -> str:
        nparams = len(d["conv_params"])
        loads = "".join(f" auto p{i} = read_floats(\"in{3 + i}.bin\");" for i in range(nparams))
        args = "".join(f"p{i}.data(), " for i in range(nparams))
        return f"""
  auto x = read_floats("in0.bin"); auto w = read_floats("in1.bin"); auto b = read_floats("in2.bin");{loads}
  const float* bias = b.empty() ? nullptr : b.data();
  std::vector<float> y((size_t){n} * CO * YPLANE, NAN), z(y.size(), NAN);
  {launch.replace("ARGS", args)}
  write_floats("out.bin", y);
  write_floats("z.bin", z);"""

    if which == "grad_x":  # (the forward section holds load_floats, which it uses)
        body = forward + section(kernel_cu, "// ---------------- backward: grad_x for few input channels",
                                 "// ---------------- backward: grad_w")
        # block b runs phase b % NPH, as the launcher's grid
        blocks = f"(({n}LL * {d['FMA_DX']['MAX_GROUPS']} + fdx::THREADS - 1) / fdx::THREADS)"
        run = grad_x(f"launch({blocks} * fdx::NPH, G, 1, fdx::THREADS, "
                     f"[&] {{ conv_grad_x_fma<{t}>(gz.data(), w.data(), gx.data(), {n}LL); }});")
    elif which in ("halo_forward", "halo_fold", "halo_cfold", "halo_grad_x", "halo_grad_w", "pw_grad_w"):  # on the emulated mma.sync
        tiles = section(kernel_cu, "// ---------------- tensor-core tile machinery", "// ---------------- forward ----------------")
        tiles, k = re.subn(r"// N = 1, 2 or 4 floats.*?cp\.async\.wait_group[^\n]*\n", "", tiles, flags=re.S)
        assert k == 1, "the tile section's cp.async helpers moved: update the host run's cut"
        marker = "\n// ---------------- convolutions from halo tiles"  # absent where no halo convolution runs
        halo = section(kernel_cu, marker[1:], "// ----------------") if marker in kernel_cu else ""
        wg = "\n// ---------------- wgmma (sm_90a)"  # its helpers (no-ops off sm_90a code), where a kernel has wgmma code
        halo = (section(kernel_cu, wg[1:], "// ----------------") if wg in kernel_cu else "") + halo
        if which == "halo_grad_w":
            halo += section(kernel_cu, "// ---------------- backward: grad_w from halo tiles", "}  // namespace " + ns)
        if which == "pw_grad_w":
            halo += section(kernel_cu, "// ---------------- backward: grad_w of a pointwise convolution", "}  // namespace " + ns)
        halo, k = re.subn(r"extern __shared__ __align__\(16\) float (\w+)\[\];", r"float* \1 = g_dyn_smem;", halo)
        assert k, "no dynamic shared memory in the halo kernels' text: update the host run's cut"
        body = tiles + forward_only + halo  # (the tile section runs up to the forward's: the fold's helpers are in it)
        x3 = "false" if tf32 else "true"
        if which == "halo_grad_x":  # HALO_DX: gz, w in
            run = grad_x(f"std::vector<float> wt(HaloD::WT_FLOATS, NAN);\n"
                         f"  launch((HaloD::WT_FLOATS + 255) / 256, 1, 1, 256, [&] {{ arrange_weights<HaloD>(w.data(), wt.data(), {int(tf32)}); }});\n"
                         f"  launch({n} * HaloD::GRID_X_PER_IMAGE, G, 1, TileD::THREADS, "
                         f"[&] {{ conv_grad_x_halo<HaloD, {x3}>(gz.data(), wt.data(), gx.data()); }});")
        elif which == "halo_grad_w":  # HALO_W: gz, x in; one position tile a split, then finish_grad_w
            run = f"""
  auto gz = read_floats("in0.bin"); auto x = read_floats("in1.bin");
  const long long tiles = {n}LL * hw::TILES_H * hw::TILES_W;
  const int splits = static_cast<int>(tiles);
  std::vector<float> part((size_t)splits * CO * KTOT, NAN), gw((size_t)CO * KTOT, NAN);
  launch(hw::COMBOS, splits, 1, hw::THREADS, [&] {{ conv_grad_w_halo<{x3}, hw::GZV>(gz.data(), x.data(), part.data(), tiles, 1); }});
  launch((CO * KTOT + 255) / 256, 1, 1, 256, [&] {{ finish_grad_w(part.data(), splits, gw.data()); }});
  write_floats("out.bin", gw);"""
        elif which == "pw_grad_w":  # PW_W: gz (PW_PRE_ROUNDED: rounded to TF32), x in; splits of PW_CHUNK slices, then finish_grad_w
            run = f"""
  auto gz = read_floats("in0.bin"); auto x = read_floats("in1.bin");
  const long long slices = {n}LL * pw::SPI;
  const int chunk = {d["PW_CHUNK"]}, splits = static_cast<int>((slices + chunk - 1) / chunk);
  std::vector<float> part((size_t)splits * CO * KTOT, NAN), gw((size_t)CO * KTOT, NAN);
  launch(pw::COMBOS, splits, 1, pw::THREADS, [&] {{ conv_grad_w_pw<{x3}, {"false" if d.get("PW_PRE_ROUNDED") else "true"}>(gz.data(), x.data(), part.data(), slices, chunk); }});
  launch((CO * KTOT + 255) / 256, 1, 1, 256, [&] {{ finish_grad_w(part.data(), splits, gw.data()); }});
  write_floats("out.bin", gw);"""
        elif which == "halo_fold":  # HALO with FUSED_REDUCE: the folded instance's (image, channel, tile) partials, then fold_finish
            reads, args = fold_inputs()
            run = f"""{reads}
  std::vector<float> wt(HaloF::WT_FLOATS, NAN), out((size_t){n} * CO, NAN), part((size_t){n} * CO * FOLD_TILES, NAN);
  launch((HaloF::WT_FLOATS + 255) / 256, 1, 1, 256, [&] {{ arrange_weights<HaloF>(w.data(), wt.data(), {int(tf32)}); }});
  launch({n} * HaloF::GRID_X_PER_IMAGE, G, 1, TileH::THREADS, [&] {{
    conv_forward_halo<{x3}, true, false>(x.data(), bias, {args}part.data(), wt.data(), nullptr, nullptr); }});
  launch(({n} * CO + 7) / 8, 1, 1, 256, [&] {{ fold_finish(part.data(), out.data(), {n}LL * CO); }});
  write_floats("out.bin", out);"""
        elif which == "halo_cfold":  # HALO with FUSED_CREDUCE: the folded instance, then cfold_finish where it runs
            cr = d["FUSED_CREDUCE"]
            reads, args = fold_inputs()
            finish = (f"  launch(({n} * YPLANE + 255) / 256, 1, 1, 256, [&] {{ cfold_finish(part.data(), out.data(), {n}LL * YPLANE); }});"
                      if cr["FINISH"] else "")
            run = f"""{reads}
  std::vector<float> wt(HaloF::WT_FLOATS, NAN), out((size_t){n} * YPLANE, NAN);
  std::vector<float> part((size_t){n} * CFOLD_PARTS * {2 if cr["PAIR"] else 1} * YPLANE, NAN);
  launch((HaloF::WT_FLOATS + 255) / 256, 1, 1, 256, [&] {{ arrange_weights<HaloF>(w.data(), wt.data(), {int(tf32)}); }});
  launch({n} * HaloF::GRID_X_PER_IMAGE, G, 1, TileH::THREADS, [&] {{
    conv_forward_halo<{x3}, true, false>(x.data(), bias, {args}{"part" if cr["FINISH"] else "out"}.data(), wt.data(), nullptr, nullptr); }});
{finish}
  write_floats("out.bin", out);"""
        else:  # halo_forward: HALO, inference's instance
            run = forward_run(
                f"std::vector<float> wt(HaloF::WT_FLOATS, NAN);\n"
                f"  launch((HaloF::WT_FLOATS + 255) / 256, 1, 1, 256, [&] {{ arrange_weights<HaloF>(w.data(), wt.data(), {int(tf32)}); }});\n"
                f"  launch({n} * HaloF::GRID_X_PER_IMAGE, G, 1, TileH::THREADS, [&] {{ "
                f"conv_forward_halo<{x3}, false, false>(x.data(), bias, ARGSwt.data(), y.data(), z.data()); }});")
    elif which in ("direct_forward", "direct_grad_x"):
        body = forward + section(kernel_cu, "// ---------------- one input channel per group", "// grad_w partials")
        if which == "direct_grad_x":
            run = grad_x(f"launch({n} * CI, (XPLANE + DW_THREADS - 1) / DW_THREADS, 1, DW_THREADS, "
                         "[&] { direct_grad_x(gz.data(), w.data(), gx.data()); });")
        else:
            run = forward_run(f"launch({n} * CO, (DSTRIPS * WO + DW_THREADS - 1) / DW_THREADS, 1, DW_THREADS, "
                              "[&] { direct_forward(x.data(), w.data(), bias, ARGSy.data(), z.data()); });")
    elif which == "forward_fold":
        body = forward
        reads, args = fold_inputs()
        run = f"""{reads}
  std::vector<float> part((size_t){n} * CO * FOLD_TILES, NAN), out((size_t){n} * CO, NAN);
  launch({n} * FOLD_TILES, G * ffw::CTILES, 1, ffw::THREADS,
         [&] {{ conv_forward_fma<{t}, true>(x.data(), w.data(), bias, {args}part.data(), nullptr, {n}LL); }});
  launch(({n} * CO + 7) / 8, 1, 1, 256, [&] {{ fold_finish(part.data(), out.data(), {n}LL * CO); }});
  write_floats("out.bin", out);"""
    elif which == "forward_cfold":
        body = forward
        cr = d["FUSED_CREDUCE"]
        reads, args = fold_inputs()
        run = f"""{reads}
  std::vector<float> part((size_t){n} * CFOLD_PARTS * {2 if cr["PAIR"] else 1} * YPLANE, NAN), out((size_t){n} * YPLANE, NAN);
  launch(({n}LL * HO * ffw::GW + ffw::THREADS - 1) / ffw::THREADS, G * ffw::CTILES, 1, ffw::THREADS,
         [&] {{ conv_forward_fma<{t}, true>(x.data(), w.data(), bias, {args}part.data(), nullptr, {n}LL); }});
  launch(({n} * YPLANE + 255) / 256, 1, 1, 256, [&] {{ cfold_finish(part.data(), out.data(), {n}LL * YPLANE); }});
  write_floats("out.bin", out);"""
    else:
        body = forward
        run = forward_run(f"launch(({n}LL * HO * ffw::GW + ffw::THREADS - 1) / ffw::THREADS, G * ffw::CTILES, 1, "
                          f"ffw::THREADS, [&] {{ conv_forward_fma<{t}, false>(x.data(), w.data(), bias, ARGSy.data(), z.data(), {n}LL); }});")
    return (PRELUDE + pointwise + f"namespace {ns} {{\nusing ::tf32_rna;\n" + consts + body + "}\n" +
            f"int main() {{\n  using namespace {ns};{run}\n  return 0;\n}}\n")


def run_host(kernel_cu: str, which: str, d: dict, inputs: list[torch.Tensor], n: int, tf32: bool, work: Path) -> torch.Tensor:
    """Compiles and runs host_source; returns the kernel's output as a flat float32 tensor (the forward also leaves z,
    the conv output plus bias that training writes, in work/z.bin: read_floats(work / "z.bin"))."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "host.cpp").write_text(host_source(kernel_cu, which, d, n, tf32))
    for k, t in enumerate(inputs):
        t.detach().to(torch.float32).contiguous().numpy().tofile(work / f"in{k}.bin")
    r = subprocess.run([GXX, "-std=c++20", "-O1", "-pthread", "host.cpp", "-o", "host"], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(["./host"], cwd=work, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return read_floats(work / "out.bin")


def read_floats(path: Path) -> torch.Tensor:
    return torch.from_file(str(path), size=path.stat().st_size // 4, dtype=torch.float32)
