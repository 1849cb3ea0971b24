"""GPU-free compile checks: every rendered kernel builds with nvcc for sm_90 with no register spills or stack
frame, and every rendered C++ binding parses against torch's headers (light glue: no torch/extension.h)."""

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from kgen import emit
from tests.helpers import REPO, avg_pool_problem, write_problem

NVCC = shutil.which("nvcc")
CXX = shutil.which("g++")
CUDA_INCLUDE = next((d / "include" for d in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), Path("/usr/local/cuda"),
                                             Path(NVCC or "/").resolve().parent.parent]
                     if (d / "include" / "cuda_runtime.h").exists()), None)


def rendered():
    out = [(p.stem, emit.generate(p)) for p in sorted((REPO / "kgen" / "problems").glob("[!_]*.py"))]
    out.append(("avg_pool_ceil_pad", emit.generate(write_problem(avg_pool_problem(
        (2, 3, 37, 41), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False))))))
    out.append(("avg_pool_overlap_wide", emit.generate(write_problem(avg_pool_problem(
        (1, 2, 12, 5000), dict(kernel_size=5, stride=1, padding=2))))))
    return out


CASES = rendered()


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("label,gen", CASES, ids=[c[0] for c in CASES])
def test_kernel_compiles_for_sm90_without_spills(tmp_path, label, gen):
    src = tmp_path / "kernel.cu"
    src.write_text(gen.files["kernel.cu"])
    r = subprocess.run([NVCC, "-arch=sm_90", "-O3", "-std=c++17", "-c", "-Xptxas", "-v", str(src), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    report = r.stderr
    kernels = re.findall(r"Compiling entry function '(\w+)'", report)
    assert any(gen.name in k for k in kernels), report[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    stacks = re.findall(r"(\d+) bytes stack frame", report)
    assert spills and all(s == ("0", "0") for s in spills), report
    assert all(s == "0" for s in stacks), report


def torch_include_flags(stub: Path) -> list[str]:
    import torch.utils.cpp_extension as cpp_ext

    # torch's CPU wheel ships c10/cuda headers without their generated cmake macros file: stub it for parsing.
    (stub / "c10" / "cuda" / "impl").mkdir(parents=True)
    (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text("#pragma once\n")
    flags = [f"-I{stub}"] + [f"-I{p}" for p in cpp_ext.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    return flags + [f"-I{CUDA_INCLUDE}"]


@pytest.mark.skipif(CXX is None or CUDA_INCLUDE is None, reason="g++ and the CUDA headers are needed")
@pytest.mark.parametrize("label,gen", CASES[:2], ids=[c[0] for c in CASES[:2]])
def test_binding_parses_against_torch_headers(tmp_path, label, gen):
    src = tmp_path / "binding.cpp"
    src.write_text(gen.files["binding.cpp"])
    assert "#include <torch/extension.h>" not in gen.files["binding.cpp"]
    r = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", "-w", *torch_include_flags(tmp_path / "stub"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
