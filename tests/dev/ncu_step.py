"""Hardware counters of kgen's kernels for one training step (and one no-grad forward) of a bench problem, read by
Nsight Compute (device only; a development harness). Without --child it builds the generated module, then runs
itself under `ncu` with the profiler range around one forward and one step, printing ncu's per-kernel sections.

Usage (GPU): python tests/dev/ncu_step.py pool|conv|bundled|blocks NAME [NAME ...] [--tf32] [--sections S ...]
Names are tests/bench/bench_pool.py's or tests/bench/bench_conv2d_epilogue.py's PROBLEMS, or (bundled) the stems of
kgen/problems/*.py, e.g. conv2d_avgpool_sigmoid_sum, or (blocks) the KernelBench-style conv blocks of
`bench_conv2d_epilogue.py --blocks`, e.g. scaling_min_c; a name ending in .py is a problem file's path.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen import emit  # noqa: E402
from tests.dev.profile_pool import training_step  # noqa: E402
from tests.device.prebuild import build  # noqa: E402
from tests.helpers import write_generated, write_problem  # noqa: E402

SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "InstructionStats", "SchedulerStats",
            "MemoryWorkloadAnalysis"]


# warp stall reasons (ncu's smsp__average_warps_issue_stalled_*): warps stalled for each, per issued instruction
STALLS = ["barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "math_pipe_throttle", "wait",
          "not_selected", "selected", "dispatch_stall", "no_instruction", "tex_throttle", "membar", "drain",
          "branch_resolving", "imc_miss", "sleeping", "misc"]


def problems(family: str, names: list[str] = ()) -> dict:
    """name -> problem text: the family's table, and any name that is a problem file's path (ending in .py)."""
    files = {n: Path(n).read_text() for n in names if n.endswith(".py")}
    return {**_table(family), **files}


def _table(family: str) -> dict:
    if family == "bundled":
        return {p.stem: p.read_text() for p in (Path(__file__).resolve().parents[2] / "kgen" / "problems").glob("*.py")}
    if family == "blocks":
        from tests.bench.bench_conv2d_epilogue import problem_sources
        return problem_sources(blocks=True)
    if family == "pool":
        from tests.bench.bench_pool import PROBLEMS, problem_source
    else:
        from tests.bench.bench_conv2d_epilogue import problem_source
        from tests.dev.save_policy_ab import PROBLEMS
    return {k: problem_source(*v) for k, v in PROBLEMS.items()}


def child(family: str, name: str, tf32: bool) -> None:
    torch.backends.cudnn.allow_tf32 = tf32
    model, x, step = training_step(problems(family, [name])[name], Path(name).stem)
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    with torch.no_grad():
        model(x)
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


SUMMARY = ["Duration", "Registers Per Thread", "Achieved Occupancy", "DRAM Throughput", "L2 Cache Throughput",
           "L1/TEX Cache Throughput", "Compute (SM) Throughput", "Issued Warp Per Scheduler", "Executed Instructions"]


def summary(report: str) -> str:
    """One line per profiled kernel of ncu's text report: its name and the SUMMARY metrics (value and unit)."""
    lines = []
    for block in re.split(r"\n  (?=\S)", report):
        head = block.splitlines()[0] if block else ""
        if "Section:" not in block or "(" not in head:
            continue
        name = re.sub(r"\(.*", "", head).strip().split("::")[-1]
        values = []
        for key in SUMMARY:
            m = re.search(r"\n\s+" + re.escape(key) + r"\s+(\S+)\s+([\d,.]+)", block)
            if m:
                values.append(f"{key.split(' Per ')[0].split(' Throughput')[0]} {m.group(2)} {m.group(1)}")
        lines.append(f"{name}: " + "; ".join(values))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("family", choices=["pool", "conv", "bundled", "blocks"])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--sections", nargs="*", default=SECTIONS)
    ap.add_argument("--stalls", action="store_true", help="also each stall reason's warps per issued instruction")
    ap.add_argument("--metrics", nargs="*", default=[], help="more ncu metrics, e.g. dram__bytes_read.sum")
    a = ap.parse_args()
    if a.child:
        child(a.family, a.names[0], a.tf32)
        return 0

    # build and warm the extension cache outside ncu (nvcc under ncu is slow), where the child's generate_module
    # writes and loads the same module
    table = problems(a.family, a.names)
    paths = [write_generated(emit.generate(write_problem(table[name], Path(name).stem))) for name in a.names]
    with ThreadPoolExecutor(len(paths)) as ex:
        built = {name: (rc, err) for name, (_, _, rc, err) in zip(a.names, ex.map(build, paths))}
    for name in a.names:
        if built[name][0]:
            print(f"build failed for {name}:\n{built[name][1]}", flush=True)
            continue
        cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
               "--print-summary", "none"]
        for s in a.sections:
            cmd += ["--section", s]
        metrics = list(a.metrics) + ([f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALLS]
                                     if a.stalls else [])
        if metrics:
            cmd += ["--metrics", ",".join(metrics)]
        cmd += [sys.executable, __file__, a.family, name, "--child"] + (["--tf32"] if a.tf32 else [])
        print(f"==== {a.family} {name} tf32={a.tf32}", flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(r.stdout, r.stderr[-3000:], flush=True)
        print(f"==== summary: {a.family} {name} tf32={a.tf32}\n{summary(r.stdout)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
