"""One device session for the pool family: build every test extension in parallel (CASES, a seeded random sweep and
the benchmark problems), then run the GPU tier of tests/test_pool.py, check the random sweep against PyTorch and
time the benchmark problems. Each stage has a time budget; a stage that runs out reports what it finished.

Usage (GPU): python tests/bench/device_pool_check.py [--sweep 60] [--jobs 16] [--bench-args "--quick --no-compile"]
             [--budget 440] [--stages build,pytest,sweep,bench]
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kgen import emit  # noqa: E402
from tests import helpers  # noqa: E402
from tests import test_pool  # noqa: E402
from tests.bench import bench_pool  # noqa: E402

T0 = time.time()


def left(budget: float) -> float:
    return budget - (time.time() - T0)


def sweep_sources(n: int) -> list[str]:
    return [test_pool.random_problem(random.Random(20261126 + i)) for i in range(n)]


def build(path: Path, timeout: float) -> tuple[str, float, int, str]:
    t = time.time()
    code = f"exec(open({str(path)!r}).read(), {{'__name__': 'prebuild'}})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=max(timeout, 1))
    return path.parent.name, time.time() - t, r.returncode, (r.stderr or "")[-2500:]


def run_for(cmd: list[str], seconds: float, tag: str, tail: int = 8000) -> None:
    """Run a command under coreutils timeout and print its output's tail."""
    r = subprocess.run(["timeout", str(int(max(seconds, 5))), *cmd], cwd=REPO, capture_output=True, text=True)
    print(f"[{tag}] rc={r.returncode}\n{r.stdout[-tail:]}\n{r.stderr[-2000:]}", flush=True)


def stage_build(sources: list[tuple[str, str | None]], jobs: int, budget: float) -> None:
    paths = [helpers.write_generated(emit.generate(helpers.write_problem(s, name))) for s, name in sources]
    print(f"[build] {len(paths)} extensions, {jobs} at a time", flush=True)
    bad = 0
    with ThreadPoolExecutor(jobs) as ex:
        futures = [ex.submit(build, p, left(budget)) for p in paths]
        for f in futures:
            try:  # a build that outlives the budget is reported, not fatal
                name, secs, rc, err = f.result()
            except subprocess.TimeoutExpired as exc:
                bad += 1
                print(f"[build] TIMEOUT {exc.cmd[-1][:60]}", flush=True)
                continue
            if rc:
                bad += 1
                print(f"[build] FAIL {name} ({secs:.0f} s)\n{err}", flush=True)
    print(f"[build] done in {time.time() - T0:.0f} s, {bad} failed", flush=True)


def stage_sweep(sources: list[str], budget: float) -> None:
    ok = fail = 0
    for i, src in enumerate(sources):
        if left(budget) < 5:
            print(f"[sweep] out of time after {i} cases", flush=True)
            break
        try:  # each case reports its own failure and the sweep goes on
            test_pool.check_against_pytorch(src)
            ok += 1
        except Exception as exc:  # noqa: BLE001 (a dev sweep reports any failure)
            fail += 1
            print(f"[sweep] FAIL case {i}: {type(exc).__name__}: {str(exc)[:800]}\n{src}", flush=True)
            traceback.print_exc(limit=3)
    print(f"[sweep] {ok} passed, {fail} failed of {len(sources)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--budget", type=float, default=440.0, help="seconds for all stages together")
    ap.add_argument("--stages", default="build,pytest,sweep,bench")
    ap.add_argument("--bench-args", default="--quick --no-compile")
    ap.add_argument("--pytest-args", default="")
    ap.add_argument("--bench2-args", default="--quick --only maxpool2d_k3s2p1 maxpool1d_k4s2")
    ap.add_argument("--reserve", type=float, default=110.0, help="seconds pytest and the sweep leave for later stages")
    a = ap.parse_args()
    stages = a.stages.split(",")
    sweep = sweep_sources(a.sweep)
    # the benchmark's problems under the names bench_pool.py gives them (the name is part of the sources' hash)
    bench_sources = [(bench_pool.problem_source(*v), k) for k, v in bench_pool.PROBLEMS.items()]
    if "build" in stages:
        stage_build([(s, None) for _, s in test_pool.CASES] + bench_sources + [(s, None) for s in sweep], a.jobs,
                    a.budget - 200)
    for stage in stages:  # the rest in the order given
        if stage == "pytest" and left(a.budget) > 30:
            run_for([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/test_pool.py",
                     *shlex.split(a.pytest_args)], left(a.budget) - a.reserve, "pytest", 6000)
        elif stage == "sweep":
            stage_sweep(sweep, a.budget - a.reserve)
        elif stage == "bench" and left(a.budget) > 40:
            run_for([sys.executable, "tests/bench/bench_pool.py", *shlex.split(a.bench_args)], left(a.budget) - 5, "bench")
        elif stage == "bench2" and left(a.budget) > 40:
            run_for([sys.executable, "tests/bench/bench_pool.py", *shlex.split(a.bench2_args)], left(a.budget) - 5,
                    "bench2")
    print(f"[done] {time.time() - T0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
