"""`kgen bench PROBLEM.py`: build, check correctness once, and time eager PyTorch, torch.compile and kgen.

Times are CUDA-event medians after warm-up, forward and forward+backward, with kgen's fraction of the memory floor
(the bytes the family must move over the device-to-device copy bandwidth measured in the same run).
"""

from __future__ import annotations

import argparse
import csv as csv_mod
import datetime
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from kgen import emit
from kgen.errors import KgenError
from kgen.problem import Problem, load_problem
from kgen.spec import match


def cuda_time_ms(fn, warmup: int, reps: int) -> float:
    """Median milliseconds per call. Calls run back to back between the two events (enough for ~10 ms), so the
    host's launch and autograd overhead overlaps the GPU work as in a real loop instead of adding idle gaps; the
    same for every provider."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    inner = max(1, min(100, round(10.0 / max(start.elapsed_time(end), 1e-3))))
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def per_call_ms(fn, warmup: int, reps: int) -> float:
    """Median milliseconds of one call timed alone between two events, synchronizing after each (how KernelBench
    and most harnesses time): the host's per-call cost shows whenever it exceeds the GPU work."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(max(reps, 50)):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def first(y):
    """The first output of a module that may return (values, indices)."""
    return y[0] if isinstance(y, (tuple, list)) else y


# atol = rtol by input dtype: KernelBench's tolerances (the tests read this table too).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
# float32 with cuDNN TF32 allowed: kgen and eager each round the conv operands to TF32 (10 mantissa bits), their own way
TF32_TOLERANCE = 1e-2


def forward_call(m, x):
    """One timed forward: no autograd."""
    def f():
        with torch.no_grad():
            m(x)
    return f


def harness_forward(m, x):
    """One forward as KernelBench's harness times it: autograd on (a module's parameters require grad), no backward
    following."""
    def f():
        m(x)
    return f


def reset_save_policy(ns: dict) -> None:
    """A generated module whose training forward can leave work to the backward (conv2d_epilogue's save policy)
    starts each process recomputing until it has run a backward; put it back in that state, as a harness's fresh
    process finds it."""
    policy = getattr(getattr(torch.ops, ns["KGEN_NAMESPACE"]), "save_policy", None)
    if policy is not None:
        policy("auto")


def training_step(m, xg):
    """One timed training step: gradients for xg and every parameter of m."""
    def f():
        m.zero_grad(set_to_none=True)
        xg.grad = None
        first(m(xg)).sum().backward()
    return f


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    a = torch.empty(nbytes // 4, device="cuda")
    b = torch.empty_like(a)
    ms = cuda_time_ms(lambda: b.copy_(a), 3, 20)
    return 2 * nbytes / ms / 1e6


def load_generated(problem: Problem):
    gen = emit.generate_problem(problem, str(problem.path))
    out = Path(tempfile.mkdtemp(prefix="kgen_bench_")) / gen.problem
    emit.write(gen, out, force=True)
    ns: dict = {"__name__": f"kgen_bench_{gen.problem}"}
    exec(compile(gen.files[emit.MODEL_FILE], str(out / emit.MODEL_FILE), "exec"), ns)
    return gen, ns


_BUILD_ONE = """
import sys
from kgen.bench import load_generated
from kgen.problem import load_problem
load_generated(load_problem(sys.argv[1]))
"""


def prebuild(problems: list[Path], jobs: int) -> None:
    """Builds the problems' extensions into the cache in `jobs` parallel processes, so that timing them one after
    another starts from loads (a 16-core machine builds 8 extensions in about the time of two)."""
    def one(path: Path) -> tuple[Path, subprocess.CompletedProcess]:
        return path, subprocess.run([sys.executable, "-c", _BUILD_ONE, str(path)], capture_output=True, text=True)
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        for path, r in ex.map(one, problems):
            if r.returncode:
                print(f"prebuild of {path.name} failed (the timing run will show the error):\n{r.stderr[-2000:]}",
                      flush=True)


def write_problems(prefix: str, sources: dict[str, str], jobs: int = 0) -> list[Path]:
    """Writes each problem source to a fresh temporary folder as <name>.py (a file's stem names the problem in the
    tables) and, with jobs > 0, builds their extensions first, jobs at a time (prebuild)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    paths = []
    for name, source in sources.items():
        paths.append(folder / f"{name}.py")
        paths[-1].write_text(source)
    if jobs:
        prebuild(paths, jobs)
    return paths


def run(problem: Path, warmup: int = 5, reps: int = 20, with_compile: bool = True, csv: Path | None = None,
        per_call: bool = False, tf32: bool = False) -> list[dict]:
    """Times eager, torch.compile and kgen on the problem, all with TF32 off (default) or all with cuDNN/matmul TF32
    allowed (PyTorch's default for convolutions); in TF32 mode kgen is checked against eager at 1e-2, since both
    round the operands to TF32 (each its own way)."""
    if not torch.cuda.is_available():
        raise KgenError("kgen bench needs a CUDA GPU; run it on a machine where torch.cuda.is_available() is True")
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    loaded = load_problem(problem)  # traced once; its namespace holds the user's Model and get_inputs
    family, spec = match(loaded)
    gen, ns = load_generated(loaded)
    user = loaded.namespace
    init = user["get_init_inputs"]()
    torch.manual_seed(0)
    model = user["Model"](*init).cuda()
    new = ns["ModelNew"](*init).cuda()
    new.load_state_dict(model.state_dict())
    with torch.device("cuda"):
        inputs = user["get_inputs"]()
    x = inputs[0]
    n = x.shape[0]

    with torch.no_grad():
        ref, out = first(model(x)), first(new(x))
        err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
        tol = TF32_TOLERANCE if tf32 else TOLERANCE.get(x.dtype, 1e-4)
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
        del ref, out
    bw = copy_bandwidth_gbs()
    fwd_bytes, train_bytes = family.traffic(spec, n)

    xg = x.detach().requires_grad_(True)
    providers = [("eager", model), ("kgen", new)]
    if with_compile:
        providers.insert(1, ("torch.compile", torch.compile(model)))
    rows = []
    for label, m in providers:
        row = {"provider": label, "fwd_ms": cuda_time_ms(forward_call(m, x), warmup, reps), "fwd_call_ms": float("nan"),
               "train_call_ms": float("nan"), "fwd_grad_call_ms": float("nan")}
        if per_call:
            row["fwd_call_ms"] = per_call_ms(forward_call(m, x), warmup, reps)
        if label == "kgen":
            reset_save_policy(ns)
        row["fwd_grad_ms"] = cuda_time_ms(harness_forward(m, x), warmup, reps)
        if per_call:
            row["fwd_grad_call_ms"] = per_call_ms(harness_forward(m, x), warmup, reps)
        try:
            row["train_ms"] = cuda_time_ms(training_step(m, xg), warmup, reps)
            if per_call:
                row["train_call_ms"] = per_call_ms(training_step(m, xg), warmup, reps)
        except (RuntimeError, torch.OutOfMemoryError) as exc:  # eager backward fails on the 4.3 G-element avg_pool2d
            row["train_ms"] = float("nan")
            row["note"] = str(exc).strip().splitlines()[0][:80]
        torch.cuda.empty_cache()
        rows.append(row)
    kg = rows[-1]
    floor_fwd, floor_train = fwd_bytes / bw / 1e6, train_bytes / bw / 1e6
    for r in rows:
        r["floor_fwd_ms"], r["floor_train_ms"] = floor_fwd, floor_train
    print(f"{gen.problem} ({family.NAME}{', TF32 allowed' if tf32 else ''}) on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{datetime.date.today()}: copy bandwidth {bw:.0f} GB/s; rel. error vs eager {err:.2e}")
    print(f"memory floor: forward {floor_fwd:.3f} ms ({fwd_bytes / 1e9:.2f} GB), forward+backward {floor_train:.3f} ms "
          f"({train_bytes / 1e9:.2f} GB)")
    print("fwd(grad): the forward with autograd on and no backward, as KernelBench's harness times it")
    print(f"{'provider':<14} {'fwd ms':>9} {'kgen x':>7} {'fwd+bwd ms':>11} {'kgen x':>7} {'fwd(grad)':>10} {'kgen x':>7}" +
          (f" {'fwd/call':>9} {'kgen x':>7} {'step/call':>10} {'kgen x':>7} {'fwd(grad)/call':>15} {'kgen x':>7}"
           if per_call else "") + "  note")
    for r in rows:
        sf = r["fwd_ms"] / kg["fwd_ms"]
        st = r["train_ms"] / kg["train_ms"]
        line = (f"{r['provider']:<14} {r['fwd_ms']:9.3f} {sf:7.2f} {r['train_ms']:11.3f} {st:7.2f}"
                f" {r['fwd_grad_ms']:10.3f} {r['fwd_grad_ms'] / kg['fwd_grad_ms']:7.2f}")
        if per_call:
            line += (f" {r['fwd_call_ms']:9.3f} {r['fwd_call_ms'] / kg['fwd_call_ms']:7.2f}"
                     f" {r['train_call_ms']:10.3f} {r['train_call_ms'] / kg['train_call_ms']:7.2f}"
                     f" {r['fwd_grad_call_ms']:15.3f} {r['fwd_grad_call_ms'] / kg['fwd_grad_call_ms']:7.2f}")
        print(f"{line}  {r.get('note', '')}")
    print(f"kgen at {floor_fwd / kg['fwd_ms']:.0%} of the forward floor, {floor_train / kg['train_ms']:.0%} of the "
          "forward+backward floor")
    if csv is not None:
        new_file = not Path(csv).exists()
        with open(csv, "a", newline="") as f:
            w = csv_mod.writer(f)
            if new_file:
                w.writerow(["date", "problem", "family", "device", "torch", "provider", "fwd_ms", "train_ms",
                            "copy_gbs", "floor_fwd_ms", "floor_train_ms", "fwd_call_ms", "train_call_ms", "fwd_grad_ms",
                            "fwd_grad_call_ms"])
            for r in rows:
                w.writerow([datetime.date.today(), gen.problem + ("[tf32]" if tf32 else ""), family.NAME, torch.cuda.get_device_name(),
                            torch.__version__, r["provider"], f"{r['fwd_ms']:.4f}", f"{r['train_ms']:.4f}",
                            f"{bw:.0f}", f"{floor_fwd:.4f}", f"{floor_train:.4f}", f"{r['fwd_call_ms']:.4f}",
                            f"{r['train_call_ms']:.4f}", f"{r['fwd_grad_ms']:.4f}", f"{r['fwd_grad_call_ms']:.4f}"])
    return rows


def script_parser(doc: str) -> argparse.ArgumentParser:
    """The options every benchmark script under tests/bench/ shares (--quick, --no-compile, --per-call, --only, --csv)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 warm-up calls and 5 samples per measurement")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--per-call", action="store_true",
                    help="also time one synchronized call per sample (how benchmark harnesses time)")
    ap.add_argument("--only", nargs="*", default=None,
                    help="problem names (default: all); with --random, draw names such as p2_17")
    ap.add_argument("--csv", type=Path, default=None, help="append rows to this CSV")
    ap.add_argument("--prebuild", type=int, default=0, metavar="JOBS",
                    help="build every problem's extension first, JOBS at a time (default 0: each when first timed)")
    return ap


def pick(sources: dict[str, str], only: list[str] | None, what: str = "problem", hint: str = "") -> dict[str, str]:
    """The --only selection of a benchmark script's problems (name -> source), in the order named; all without --only.
    An unknown name stops the script, listing the names there are."""
    if not only:
        return sources
    unknown = sorted(set(only) - set(sources))
    if unknown:
        raise SystemExit(f"--only: no {what} named {', '.join(unknown)} among {', '.join(sources)}; "
                         f"pass names from that list{hint}")
    return {n: sources[n] for n in dict.fromkeys(only)}


def draw_line(name: str, rows: list[dict] | str, what: str) -> tuple[float, str]:
    """(the smallest of kgen's ratios to eager, one line) for a random draw: forward and step back-to-back, the forward
    one call per sample with autograd on (as KernelBench's harness times it) where timed, torch.compile's ratios where
    it ran, and kgen's share of the forward and step memory floors; > 1: kgen faster. A failed draw: (0, its error)."""
    if isinstance(rows, str):
        return 0.0, f"  {name:<8} FAILED {rows}  | {what}"
    by = {r["provider"]: r for r in rows}
    k = by["kgen"]

    def ratios(r: dict) -> tuple[float, float, float]:
        return r["fwd_ms"] / k["fwd_ms"], r["fwd_grad_call_ms"] / k["fwd_grad_call_ms"], r["train_ms"] / k["train_ms"]

    e = ratios(by["eager"])
    line = (f"  {name:<8} fwd {k['fwd_ms']:7.3f} ms {e[0]:5.2f}x  fwd(grad)/call {e[1]:5.2f}x  "
            f"step {k['train_ms']:7.3f} ms {e[2]:5.2f}x")
    if "torch.compile" in by:
        c = ratios(by["torch.compile"])
        line += f"  compile {c[0]:5.2f}x / {c[1]:5.2f}x / {c[2]:5.2f}x"
    line += f"  floor {k['floor_fwd_ms'] / k['fwd_ms']:4.0%} / {k['floor_train_ms'] / k['train_ms']:4.0%}  | {what}"
    return min(x for x in e if x == x), line


def run_draws(sources: dict[str, str], a: argparse.Namespace, modes: list[bool], describe, prefix: str) -> int:
    """Times random draws (name -> problem text) as the named problems are timed, in each TF32 mode, then prints a
    draw_line each (describe(source): what the draw is) and the six slowest against eager. A draw kgen fails on
    (refused, or outside the check's tolerance) is reported and the rest still run. Exit status 1 if any failed."""
    warmup, reps = samples(a.quick)
    # the named draws of the same N (a draw's name and problem do not depend on which others run)
    sources = pick(sources, a.only, "draw", " (or a larger --random N)")
    paths = write_problems(prefix, sources, a.prebuild)
    failed = False
    for tf32 in modes:
        results = []
        for path in paths:
            try:
                rows = run(path, warmup=warmup, reps=reps, with_compile=not a.no_compile, per_call=a.per_call,
                           csv=a.csv, tf32=tf32)
            except Exception as exc:  # a benchmark sweep reports a failing draw and goes on
                rows = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
                failed = True
            results.append(draw_line(path.stem, rows, describe(sources[path.stem])) + (path.stem,))
            print(f"\n{results[-1][1]}\n", flush=True)
        print(f"random problems{', TF32 allowed' if tf32 else ''}: eager / kgen (> 1: kgen faster; compile: "
              "torch.compile / kgen, fwd / fwd(grad) per call / step; floor: kgen's share of the forward / step floor)")
        print("\n".join(line for _, line, _ in results))
        print("slowest (smallest ratio): " + ", ".join(f"{n} {x:.2f}x" for x, _, n in sorted(results)[:6]))
    return 1 if failed else 0


def samples(quick: bool) -> tuple[int, int]:
    """(warm-up calls, timed samples) for a benchmark script."""
    return (2, 5) if quick else (5, 20)
