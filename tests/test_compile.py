"""GPU-free compile checks over every registered family: every rendered kernel (each family's CASES and the bundled
problems) builds with nvcc for sm_80, sm_86, sm_89 and sm_90 with no register spills or stack frame (the
Hopper path, KGEN_SM90=1, too, where a kernel has one: for sm_90a where it has wgmma code, else sm_90), and rendered
C++ bindings parse against torch's headers (light glue: no torch/extension.h)."""

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from kgen import emit
from tests import ptxas
from tests.families import all_cases
from tests.helpers import REPO, write_problem

NVCC = ptxas.NVCC
CXX = shutil.which("g++")
CUDA_INCLUDE = next((d / "include" for d in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), Path("/usr/local/cuda"),
                                             Path(NVCC or "/").resolve().parent.parent]
                     if (d / "include" / "cuda_runtime.h").exists()), None)


def rendered():
    out = [(p.stem, emit.generate(p)) for p in sorted((REPO / "kgen" / "problems").glob("[!_]*.py"))]
    out += [(f"{fam}-{cid}", emit.generate(write_problem(src))) for fam, cid, src in all_cases()]
    return out


CASES = rendered()


def ptxas_report(tmp_path: Path, source: str, archs: tuple[str, ...], sm90_path: int) -> str:
    return ptxas.reports(tmp_path, source, [(archs, sm90_path)])[0]


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("label,gen", CASES, ids=[c[0] for c in CASES])
def test_kernel_compiles_for_every_arch_without_spills(tmp_path, label, gen):
    source = gen.files["kernel.cu"]
    plan = ptxas.builds(source)
    for (archs, sm90_path), report in zip(plan, ptxas.reports(tmp_path, source, plan)):
        for arch in archs:
            assert f"for 'sm_{arch}'" in report, f"no ptxas report for sm_{arch}:\n{report[-2000:]}"
        kernels = re.findall(r"Compiling entry function '(\w+)'", report)
        assert any(gen.name in k for k in kernels), report[-2000:]
        assert re.findall(r"bytes spill stores", report), report[-2000:]
        bad = ptxas.findings(report)
        assert not bad, f"KGEN_SM90={sm90_path}:\n" + "\n".join(bad)


# Max pools with large windows, whose forward that saves offsets spilled at its 128-register cap before the window
# design kept a thread's words within WINDOW_WORDS_MAX (8-128 bytes on sm_80 and sm_90).
BIG_WINDOWS = [((2, 3, 40, 64), dict(kernel_size=5, stride=1, padding=2)),
               ((2, 3, 40, 64), dict(kernel_size=5, stride=2, padding=2)),
               ((2, 3, 40, 64), dict(kernel_size=4, stride=2, padding=1)),
               ((2, 3, 33, 64), dict(kernel_size=7, stride=4, padding=3))]


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("shape,kw", BIG_WINDOWS, ids=[str(tuple(kw.values())) for _, kw in BIG_WINDOWS])
def test_large_max_windows_compile_without_spills(tmp_path, shape, kw):
    from tests.test_pool import pool_problem

    gen = emit.generate(write_problem(pool_problem("max", 2, shape, kw)))
    report = ptxas_report(tmp_path, gen.files["kernel.cu"], ("80", "90"), 0)
    assert re.findall(r"Compiling entry function '\w+_fwdILb1ELb0ELb1EE", report), report[-2000:]  # the one saving offsets
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert spills and all(s == ("0", "0") for s in spills), report


# Forwards from halo tiles whose one buffer is staged through registers (REG) in 1- and 2-float groups: stride-2
# convolutions on inputs of odd or 2-mod-4 width, on 2 x 4 warp tiles (128 registers). Counted at HV + 2 registers a
# group they spilled 32-88 bytes on sm_80-90a (a compile sweep's draw, then a grid): REG_GROUP_REGS.
REG_HALOS = [(8, 128, 4, 2, 25, 29), (16, 128, 5, 2, 40, 41), (16, 128, 5, 2, 40, 42), (8, 32, 5, 0, 97, 99)]


def conv_relu_problem(ci: int, co: int, k: int, pad: int, h: int, w: int, stride: int = 2) -> str:
    return f"""import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d({ci}, {co}, {k}, stride={stride}, padding={pad})

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, {ci}, {h}, {w})]


def get_init_inputs():
    return []
"""


def conv_plan(path: Path) -> dict:
    from kgen.families import conv2d_epilogue as fam
    from kgen.problem import load_problem
    from kgen.spec import match

    return fam.derive(match(load_problem(path))[1])


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("shape", REG_HALOS, ids=["ci%d_co%d_k%d_p%d_%dx%d" % s for s in REG_HALOS])
def test_register_staged_halo_forwards_compile_without_spills(tmp_path, shape):
    path = write_problem(conv_relu_problem(*shape))
    halo = conv_plan(path)["HALO"]
    assert halo["REG"] and halo["HV"] in (1, 2), halo
    report = ptxas_report(tmp_path, emit.generate(path).files["kernel.cu"], ("80", "90"), 0)
    assert re.findall(r"Compiling entry function '\w+conv_forward_haloILb0ELb0", report), report[-2000:]  # TF32's
    bad = ptxas.findings(report)
    assert not bad, "\n".join(bad)


# The channel reduction folded into the halo forward (FUSED_CREDUCE) on a kernel of more than 9 taps: its mma.sync
# instances unroll a kernel row at a time (all 20 taps of this one, a compile sweep's draw, seed 5004, spilled 76 bytes
# on sm_80 and sm_90 in the TF32 instance)
CREDUCE_WIDE_KERNEL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 40, (4, 5), stride=(1, 2), dilation=2)

    def forward(self, x):
        return torch.clamp(torch.logsumexp(self.conv(x) * 0.15, 1, True), -1.0, 1.0)


def get_inputs():
    return [torch.randn(2, 8, 26, 34)]


def get_init_inputs():
    return []
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_channel_fold_on_a_20_tap_kernel_compiles_without_spills(tmp_path):
    path = write_problem(CREDUCE_WIDE_KERNEL)
    d = conv_plan(path)
    assert d["FUSED_CREDUCE"] is not None and d["FUSED_CREDUCE"]["TAP_UNROLL"] == 5 and d["HALO"]["TAP_UNROLL"] == 20
    report = ptxas_report(tmp_path, emit.generate(path).files["kernel.cu"], ("80", "90"), 0)
    assert re.findall(r"Compiling entry function '\w+conv_forward_haloILb0ELb1ELb0E", report), report[-2000:]
    bad = ptxas.findings(report)
    assert not bad, "\n".join(bad)


# The bundled problem's backward writes grad_x in 16-byte stores (its cell gather's float4s): a plain float4 store there
# compiled to four scalar ones (no st.global.v4 in the PTX), and the gather ran at a quarter of the write bandwidth
# (forty-seventh session, H100: 0.86 ms for 604 MB); it now stores through __stcs, which keeps the vector form.
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("arch", ["80", "90"])
def test_bundled_backward_gather_stores_16_bytes_at_once(tmp_path, arch):
    source = dict(CASES)["conv2d_avgpool_sigmoid_sum"].files["kernel.cu"]
    (tmp_path / "kernel.cu").write_text(source)
    subprocess.run([NVCC, f"-arch=sm_{arch}", "-O3", "-std=c++17", "-ptx", str(tmp_path / "kernel.cu"), "-o",
                    str(tmp_path / "kernel.ptx")], check=True, capture_output=True)
    ptx = (tmp_path / "kernel.ptx").read_text()
    bodies = re.split(r"\n(?=\.visible \.entry|\.entry)", ptx)
    bwd = [b for b in bodies if re.match(r"(\.visible )?\.entry \w+_ns10bwd_kernel", b)]
    assert len(bwd) == 2, [b[:120] for b in bodies]   # the 3xTF32 and the TF32 instances
    for body in bwd:
        assert len(re.findall(r"st\.global\.cs\.v4\.f32", body)) >= 4, body[:400]


# A 1x1 convolution whose halo chunks are wider than 8 channels, at 4 CTAs an SM on sm_90: its TF32 inference instance
# runs on wgmma in sm_90a images, on mma.sync in plain sm_90 ones, where it spilled 32 bytes at 128 registers; 4 CTAs
# are asked for in sm_90a images of Hopper-path builds only (HALO_TF32_CTAS_WGMMA_ONLY)
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_wide_chunk_halo_forward_at_4_ctas_compiles_without_spills(tmp_path):
    from kgen.families import conv2d_epilogue as fam

    path = write_problem(conv_relu_problem(128, 256, 1, 0, 96, 96, stride=1))
    d = conv_plan(path)
    assert d["HALO"]["CC"] > fam.HALO_CC and d["HALO_TF32_CTAS"] == 4 and d["HALO_TF32_CTAS_WGMMA_ONLY"]
    source = emit.generate(path).files["kernel.cu"]
    assert "__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL) && KGEN_SM90\n" in source
    plan = ptxas.builds(source, ("90",)) + [(("90",), 1)]  # plain sm_90 on both paths, and the sm_90a image
    reports = ptxas.reports(tmp_path, source, plan)

    def registers(report: str) -> int:  # the TF32 inference instance's (conv_forward_halo<false, false, false>)
        m = re.search(r"Compiling entry function '\w+conv_forward_haloILb0ELb0ELb0E\w*' for 'sm_90a?'\n(?:.*\n)*?.*Used (\d+) registers",
                      report)
        assert m, report[-2000:]
        return int(m.group(1))

    assert registers(reports[1]) <= 128  # the sm_90a image: 4 CTAs an SM
    assert registers(reports[0]) > 128 and registers(reports[2]) > 128  # plain sm_90: 2
    bad = [f for r in reports for f in ptxas.findings(r)]
    assert not bad, "\n".join(bad)


def torch_include_flags(stub: Path) -> list[str]:
    import torch.utils.cpp_extension as cpp_ext

    # torch's CPU wheel ships c10/cuda headers without their generated cmake macros file: stub it for parsing.
    (stub / "c10" / "cuda" / "impl").mkdir(parents=True)
    (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n")
    flags = [f"-I{stub}"] + [f"-I{p}" for p in cpp_ext.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    return flags + [f"-I{CUDA_INCLUDE}"]


def binding_forms():
    """One case per family and per form of its binding: which launchers it declares (stage numbers aside) and whether
    a folded forward is inference-only, so that every branch of a binding template is parsed, not only the first
    case's."""
    seen, out = set(), []
    for label, gen in CASES:
        text = gen.files["binding.cpp"]
        launchers = re.findall(r'extern "C" cudaError_t ' + gen.name + r'_(\w+)\(', text)
        form = (gen.family, frozenset(re.sub(r"^s\d+_", "s_", f) for f in launchers), "if (!save)" in text)
        if form not in seen:
            seen.add(form)
            out.append((label, gen))
    return out


@pytest.mark.skipif(CXX is None or CUDA_INCLUDE is None, reason="g++ and the CUDA headers are needed")
@pytest.mark.parametrize("label,gen", binding_forms(), ids=[c[0] for c in binding_forms()])
def test_binding_parses_against_torch_headers(tmp_path, label, gen):
    src = tmp_path / "binding.cpp"
    src.write_text(gen.files["binding.cpp"])
    assert "#include <torch/extension.h>" not in gen.files["binding.cpp"]
    r = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", "-w", *torch_include_flags(tmp_path / "stub"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
