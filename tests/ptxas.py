"""nvcc / ptxas checks shared by the compile tier (tests/test_compile.py) and the random sweep's --compile
(tests/dev/sweep.py): a kernel's builds (the arch list, and its Hopper path where it has one), their ptxas -v reports
compiled at once, and what in a report fails a kernel: spills, a stack frame, or a wgmma note of ptxas."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

NVCC = shutil.which("nvcc")
ARCHS = ("80", "86", "89", "90")


def builds(source: str, archs: tuple[str, ...] = ARCHS) -> list[tuple[tuple[str, ...], int]]:
    """(archs, KGEN_SM90) builds of a kernel: `archs` with KGEN_SM90=0, and the Hopper path (KGEN_SM90=1) where the
    kernel has one: for sm_90a (an H100 / H200 build's target, compiled with KGEN_SM90A=1 as kgen builds it) where it
    has wgmma code, else for sm_90."""
    hopper = ("90a",) if "wgmma" in source else ("90",)
    return [(archs, 0)] + ([(hopper, 1)] if "KGEN_SM90" in source else [])


def reports(workdir: Path, source: str, plan: list[tuple[tuple[str, ...], int]]) -> list[str]:
    """ptxas's -v report of each build of `source`: the builds run at once, and each compiles its archs in parallel
    (nvcc --threads 0: one job per CPU; each arch's report stays in one piece)."""
    src = Path(workdir) / "kernel.cu"
    src.write_text(source)
    procs = []
    for i, (archs, sm90_path) in enumerate(plan):
        gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
        procs.append(subprocess.Popen([NVCC, "--threads", "0", *gencode, f"-DKGEN_SM90={sm90_path}",
                                       f"-DKGEN_SM90A={int(sm90_path == 1 and archs == ('90a',))}", "-O3", "-std=c++17",
                                       "-c", "-Xptxas", "-v", str(src), "-o", str(Path(workdir) / f"k{i}.o")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    out = []
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err[-4000:]
        out.append(err)
    return out


def findings(report: str) -> list[str]:
    """What fails a kernel in one ptxas report, each named by the entry function and arch above it: a spill, a stack
    frame, or a wgmma note (C7510-C7520: ptxas serialized the wgmmas, an operand defined or read while one is in
    flight, or injected its own waits and fences, silently costing the pipelining the template intends)."""
    bad, entry = [], "?"
    for ln in report.splitlines():
        m = re.search(r"Compiling entry function '(\w+)' for '(sm_\w+)'", ln)
        if m:
            entry = f"{m.group(1)} ({m.group(2)})"
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", ln)
        if m and m.groups() != ("0", "0", "0"):
            bad.append(f"{ln.strip()}  [{entry}]")
        m = re.search(r"\(C75[0-2]\d\)[^\n]*", ln)
        if m:
            bad.append(f"{m.group(0)}  [{entry}]")
    return bad
