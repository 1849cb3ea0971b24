"""A/B timing of pool-family design variants at issue 8's sizes (device only; a development harness, not shipped
code): each variant overrides planning constants or functions of kgen.families.pool while its module is generated
(the extension name is a hash of the rendered sources, so variants build side by side), is checked against
PyTorch (values and grad_x), then timed with every other variant and eager in turns, in the same run.

Usage: python tests/dev/pool_variants.py [--only NAME ...] [--variants LABEL ...] [--reps N] [--compile]
[--random N --seed S] [--extra] [--per-call]
(--compile adds a torch.compile row of the reference model, timed in the same turns)
Names are tests/bench/bench_pool.py's PROBLEMS, or with --random its random draws' names (p2_17: bench_pool.py --random
N --seed 2's draw 17); variants are VARIANTS' labels below. Problems that return int64 indices compare them exactly;
those that return only indices time no step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen import emit  # noqa: E402
from kgen.bench import TOLERANCE, copy_bandwidth_gbs, cuda_time_ms, per_call_ms  # noqa: E402
from kgen.families import pool  # noqa: E402
from kgen.problem import load_problem  # noqa: E402
from kgen.spec import match  # noqa: E402
from tests.bench.bench_pool import PROBLEMS, problem_source, random_benchmark_sources  # noqa: E402
from tests.dev.variants import EDITS, template_edits  # noqa: E402
from tests.device.prebuild import build  # noqa: E402


def _window_rh(rh: int):
    orig = pool.window_tiling

    def f(g, isz, *rest):
        t = orig(g, isz, *rest)
        if t is None:
            return None
        nj = (rh - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dilation[1] + 1
        return {**t, "rh": rh, "nj": nj, "groups": pool.ceil_div(g.out[1], rh)}
    return {"window_tiling": f}


def _window_vo(vo: int):
    """vo outputs along W per window-design thread (seg and chunks follow), where the tiling is not walking."""
    orig = pool.window_tiling

    def f(g, isz, *rest):
        t = orig(g, isz, *rest)
        if t is None or t["walk"]:
            return t
        ekw = (g.kernel[2] - 1) * g.dilation[2] + 1
        seg = pool.ceil_div(t["al"] - g.padding[2] + (vo - 1) * g.stride[2] + ekw, t["vec"]) * t["vec"]
        return {**t, "vo": vo, "seg": seg, "chunks": pool.ceil_div(g.out[2], vo), "packed": t["packed"] and vo % 2 == 0}
    return {"window_tiling": f}


def _unpacked():
    orig = pool.window_tiling

    def f(g, isz, *rest):
        t = orig(g, isz, *rest)
        return None if t is None else {**t, "packed": False}
    return {"window_tiling": f}


def _ungrouped():
    orig = pool.gather_tiling

    def f(g, isz, osz):
        return {**orig(g, isz, osz), "b_gq": 0}
    return {"gather_tiling": f}


def _simple_disjoint_1d():
    """The simple forward (one output a lane group, coalesced stores) for 1-d windows that do not overlap (effective
    width <= stride): the rule to try for MaxPool1d(2, 3, 1, return_indices) float16, whose window design stores each
    thread's 8 int64 indices at a 64-byte stride (docs/notes/pool_plan.md)."""
    window, lanes = pool.window_tiling, pool.lanes_tiling

    def disjoint(g) -> bool:
        return g.kernel[:2] == (1, 1) and (g.kernel[2] - 1) * g.dilation[2] + 1 <= g.stride[2]
    return {"window_tiling": lambda g, *a: None if disjoint(g) else window(g, *a),
            "lanes_tiling": lambda g, *a: None if disjoint(g) else lanes(g, *a)}


# --extra: windows that do not overlap and int64 index outputs, for pool.disjoint_row_windows (docs/notes/pool_plan.md);
# the 2-d / 3-d ones (not measured yet) for variant simple_indices
EXTRA = {
    "maxpool2d_k3s2p1_idx": ("nn.MaxPool2d(3, 2, 1, return_indices=True)", (32, 96, 192, 192), "float32"),
    "maxpool2d_k2_idx_fp16": ("nn.MaxPool2d(2, return_indices=True)", (32, 96, 192, 192), "float16"),
    "maxpool3d_k2_idx": ("nn.MaxPool3d(2, return_indices=True)", (8, 32, 32, 64, 64), "float32"),
    "maxpool2d_k2_idx": ("nn.MaxPool2d(2, return_indices=True)", (32, 96, 192, 192), "float32"),
    "maxpool2d_k3s1p1_idx_bf16": ("nn.MaxPool2d(3, 1, 1, return_indices=True)", (16, 64, 224, 224), "bfloat16"),
    "maxpool2d_k5s3d2_idx": ("nn.MaxPool2d(5, 3, 2, dilation=2, return_indices=True)", (16, 64, 225, 227), "float32"),
    "maxpool3d_k133_idx": ("nn.MaxPool3d((1, 3, 3), 2, (0, 1, 1), return_indices=True)", (8, 32, 16, 96, 96), "float32"),
    "maxpool1d_k2s3p1_idx_fp16": ("nn.MaxPool1d(2, 3, 1, return_indices=True)", (121, 256, 4096), "float16"),
    "maxpool1d_k2s3p1": ("nn.MaxPool1d(2, 3, 1)", (32, 256, 100000), "float32"),
    "maxpool1d_k2s3p1_bf16": ("nn.MaxPool1d(2, 3, 1)", (32, 256, 100000), "bfloat16"),
    "maxpool1d_k2": ("nn.MaxPool1d(2)", (32, 256, 100000), "float32"),
    "maxpool1d_k2_idx_fp16": ("nn.MaxPool1d(2, return_indices=True)", (121, 256, 4096), "float16"),
    "avgpool1d_k3s5": ("nn.AvgPool1d(3, 5)", (32, 256, 100000), "float32"),
    "avgpool1d_k4s4_bf16": ("nn.AvgPool1d(4)", (32, 256, 100000), "bfloat16"),
    # the pooling arguments of KernelBench's level-1 pool problems (public versions differ in batch and dtype; batches
    # cut to 0.5-2 GB inputs here)
    "kb_maxpool1d_k8s1p4d3": ("nn.MaxPool1d(8, 1, 4, dilation=3)", (32, 192, 65536), "float32"),
    "kb_maxpool2d_k4s1p1": ("nn.MaxPool2d(4, 1, 1)", (32, 64, 512, 512), "float32"),
    "kb_maxpool2d_k4s1p1_bf16": ("nn.MaxPool2d(4, 1, 1)", (32, 64, 512, 512), "bfloat16"),
    "kb_avgpool1d_k8s1p4": ("nn.AvgPool1d(8, 1, 4)", (32, 128, 65536), "float32"),
    "kb_maxpool3d_k3s2p1d3": ("nn.MaxPool3d(3, 2, 1, dilation=3)", (16, 32, 64, 64, 64), "float32"),
    "kb_avgpool3d_k3s2p1": ("nn.AvgPool3d(3, 2, 1)", (16, 32, 64, 64, 128), "float32"),
}


# label -> attribute overrides of kgen.families.pool (constants or functions)
VARIANTS = {
    "default": {},
    "simple": {"window_tiling": lambda *a: None, "lanes_tiling": lambda *a: None},  # one output a lane group
    "simple_disjoint_1d": _simple_disjoint_1d(),
    "window_disjoint_1d": {"disjoint_row_windows": lambda *a: False},  # before the rule: the window design
    # every window with int64 index outputs on the simple forward (2-d / 3-d too)
    "simple_indices": {"disjoint_row_windows": lambda g, lanes, indices, rule=pool.disjoint_row_windows:
                       indices or rule(g, lanes, indices)},
    "window_indices_2d": {"indexed_plane_windows": lambda *a: False},  # before that rule: the window design
    "no_unroll": {"UNROLL_WINDOW_MAX": 0},  # the rolled one-lane scan (before the unrolled window)
    "col_batch4": {"COL_BATCH": 4},  # the simple forward keeps 4 column loads of a row in flight a lane
    "row_split_fill2": {"ROW_SPLIT_FILL": 2},  # rows split where outputs fill under half the GPU (default: a quarter)
    "gather": {"tile_tiling": lambda g, isz, osz: None, "scatter_tiling": lambda g, isz, osz: None},
    "no_tile": {"tile_tiling": lambda g, isz, osz: None},  # the scatter or gather the tile backward replaced
    "tile_minblk3": {"MIN_BLOCKS": {**pool.MIN_BLOCKS, "tile": 3}},
    "tile_minblk2": {"MIN_BLOCKS": {**pool.MIN_BLOCKS, "tile": 2}},
    "tile_small": {"TILE_ELEMS_MAX": {4: 8, 2: 16}},
    "tile_big": {"TILE_ELEMS_MAX": {4: 32, 2: 64}, "TILE_REGS_MAX": 100, "MIN_BLOCKS": {**pool.MIN_BLOCKS, "tile": 2}},
    "scatter4k": {"SCATTER_SMEM_FLOATS": 4096},
    "scatter8k": {"SCATTER_SMEM_FLOATS": 8192},
    "scatter_hold4": {"SCATTER_HOLD": 4},
    "scatter_hold16": {"SCATTER_HOLD": 16},
    "scatter_hold8": {"SCATTER_HOLD": 8},
    "scatter128": {"SCATTER_THREADS": 128, "MIN_BLOCKS": {**pool.MIN_BLOCKS, "scatter": 8}},  # 8 blocks of 128 an SM
    "scatter128_hold8": {"SCATTER_THREADS": 128, "SCATTER_HOLD": 8, "MIN_BLOCKS": {**pool.MIN_BLOCKS, "scatter": 8}},
    "fwd_half16": {"OUT_MAX_HALF": 16},
    "gather16": {"GATHER_BYTES_HALF": 16},
    "gather_ungrouped": _ungrouped(),  # one grad_y / offset load per candidate (before b_gq)
    **{label: {"TEMPLATES": edits} for label, edits in EDITS.items() if label.startswith("pool_")},  # tests/dev/variants.py
    "fwd_minblk1": {"MIN_BLOCKS": {**pool.MIN_BLOCKS, "window": 1, "lanes": 1}},
    "fwd_minblk3": {"MIN_BLOCKS": {**pool.MIN_BLOCKS, "window": 3, "lanes": 3}},
    "fwd_minblk4": {"MIN_BLOCKS": {**pool.MIN_BLOCKS, "window": 4, "lanes": 4}},
    "fwd_out8": {"OUT_MAX": 8},
    "fwd_out32": {"OUT_MAX": 32, "SEG_MAX": 80},
    "fwd_loads64": {"LOADS_MAX": 64},
    "fwd_vo8": _window_vo(8),
    # AdaptiveAvgPool2d(7) on 28 x 28 (4 x 4 windows) took VO 4 for 16 bytes of output a thread (90% of the floor on
    # an H200); one or two outputs a thread read 99% (thirty-ninth session). The tiling now takes VO 2 there
    # (MIN_OUTPUTS_SEG_BYTES), so fwd_vo2 renders as default for it
    "fwd_vo1": _window_vo(1),
    "fwd_vo2": _window_vo(2),
    "fwd_rh1": _window_rh(1),
    "fwd_rh4": _window_rh(4),
    "lanes_out16": {"LANES_OUTPUTS": 16},
    "lanes_out8": {"LANES_OUTPUTS": 8},
    "no_lanes": {"lanes_tiling": lambda g, isz: None},
    "no_walk": {"walk_slices": lambda g, isz, c: 0},  # one output slice per window-design work item
    "walk4": {"WALK_SLICES": 4},
    "walk16": {"WALK_SLICES": 16},
}


def generate(path: Path, overrides: dict):
    """Generates the problem with `overrides` applied: attributes of kgen.families.pool, and under the key TEMPLATES
    template edits (tests/dev/variants.py), so template-level changes are timed without copies of the templates."""
    overrides = dict(overrides)
    edits = overrides.pop("TEMPLATES", {})
    saved = {k: getattr(pool, k) for k in overrides}
    for k, v in overrides.items():
        setattr(pool, k, v)
    try:
        with template_edits(edits):
            problem = load_problem(path)
            gen = emit.generate_problem(problem, str(path))
    finally:
        for k, v in saved.items():
            setattr(pool, k, v)
    head = [ln for ln in gen.files["kernel.cu"].splitlines()[:5] if "forward design" in ln]
    return gen, problem, (head[0].split("forward design: ")[-1] if head else "?")


def prebuild(files: list[Path], jobs: int) -> None:
    """Builds the variants' extensions in parallel processes (the timing loop then loads them from the cache)."""
    with ThreadPoolExecutor(jobs) as ex:
        for name, _, rc, err in ex.map(build, files):
            if rc:
                print(f"build failed: {name}\n{err}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--random", type=int, default=0, metavar="N", help="bench_pool.py --random N's draws")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--variants", nargs="*", default=["default", "gather"])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--compile", action="store_true", help="time torch.compile of Model in the same turns")
    ap.add_argument("--extra", action="store_true", help="EXTRA's problems (windows that do not overlap, index outputs)")
    ap.add_argument("--per-call", action="store_true", help="also time the forward one call per sample, autograd on "
                    "(as KernelBench's harness times it)")
    a = ap.parse_args()
    bw = copy_bandwidth_gbs()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} copy {bw:.0f} GB/s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="kgen_pool_variants_"))
    gens = {}
    sources = (random_benchmark_sources(a.random, a.seed) if a.random
               else {n: problem_source(*EXTRA[n]) for n in EXTRA} if a.extra
               else {n: problem_source(*PROBLEMS[n]) for n in PROBLEMS})
    a.only = a.only or list(sources)
    for name in a.only:
        path = folder / f"{name}.py"
        path.write_text(sources[name])
        for label in a.variants:
            gen, problem, design = generate(path, VARIANTS[label])
            f = folder / f"{name}__{label}.py"
            f.write_text(gen.files[emit.MODEL_FILE])
            gens[name, label] = (f, problem, design)
    unique = {f.read_text(): f for f, _, _ in gens.values()}  # variants that render the same build once
    prebuild(sorted(unique.values()), a.jobs)
    for name in a.only:
        mods = {}
        for label in a.variants:
            f, problem, design = gens[name, label]
            ns: dict = {"__name__": f"variant_{name}_{label}"}
            try:  # a variant whose constants break a kernel's static_assert (fwd_vo2 on 2-byte vectors) is left out
                exec(compile(f.read_text(), str(f), "exec"), ns)
            except RuntimeError as e:
                print(f"{name} {label}: build failed, left out ({str(e).splitlines()[0][:120]})")
                continue
            mods[label] = (ns["ModelNew"](*problem.namespace["get_init_inputs"]()).cuda(), design)
        user = problem.namespace
        ref = user["Model"](*user["get_init_inputs"]()).cuda()
        with torch.device("cuda"):
            x = user["get_inputs"]()[0]
        _, spec = match(problem)
        fwd_bytes, step_bytes = pool.traffic(spec, x.shape[0])
        xg = x.detach().clone().requires_grad_(True)
        y_all = ref(xg)
        y_all = list(y_all) if isinstance(y_all, (tuple, list)) else [y_all]
        y = next((t for t in y_all if t.is_floating_point()), None)  # None: indices only (no step)
        want = [t.detach() for t in y_all]
        if y is not None:
            gy = torch.rand_like(y)
            y.backward(gy)
            want_gx = xg.grad
        tol = TOLERANCE[x.dtype]
        for label, (m, _) in mods.items():
            xg.grad = None
            got = m(xg)
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            for g_, w_ in zip(got, want, strict=True):
                if w_.is_floating_point():
                    torch.testing.assert_close(g_.detach(), w_, atol=tol, rtol=tol)
                else:
                    assert g_.dtype == w_.dtype and torch.equal(g_, w_), f"{name} {label}: indices differ"
            if y is not None:
                next(t for t in got if t.is_floating_point()).backward(gy)
                torch.testing.assert_close(xg.grad, want_gx, atol=tol, rtol=tol)
        others = {"eager": ref, **({"compile": torch.compile(ref)} if a.compile else {})}
        rows = {label: [[], [], []] for label in list(mods) + list(others)}
        for _ in range(2):  # two rounds, variants in turn
            for label in rows:
                m = others[label] if label in others else mods[label][0]

                def fwd():
                    with torch.no_grad():
                        m(x)

                def step():
                    xg.grad = None
                    out = m(xg)
                    (out[0] if isinstance(out, (tuple, list)) else out).backward(gy)
                rows[label][0].append(cuda_time_ms(fwd, 2, a.reps))
                rows[label][1].append(cuda_time_ms(step, 2, a.reps) if y is not None else float("nan"))
                rows[label][2].append(per_call_ms(lambda: m(xg), 2, a.reps) if a.per_call else float("nan"))
        print(f"\n{name} {tuple(x.shape)} {x.dtype}: floor fwd {fwd_bytes / bw / 1e6:.3f} ms, step {step_bytes / bw / 1e6:.3f} ms")
        for label, (f, s, c) in rows.items():
            f_ms, s_ms = min(f), min(s)
            design = mods[label][1] if label in mods else ""
            call = f"  fwd one call a sample {min(c):8.3f} ms" if a.per_call else ""
            print(f"  {label:<14} fwd {f_ms:8.3f} ms ({fwd_bytes / bw / 1e6 / f_ms:5.1%} of floor)  step {s_ms:8.3f} ms "
                  f"({step_bytes / bw / 1e6 / s_ms:5.1%}){call}  {design}", flush=True)
        del mods, rows, x, xg, y, y_all, want
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
