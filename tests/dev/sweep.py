"""Random in-scope problems for every registered family: render, check the generated module against KernelBench's
static checker's rules (and nvcc-compile with --compile) here; on a GPU, also check forward and every gradient
against PyTorch (tests/test_numerics.py's comparison; the conv families' outputs again with TF32 allowed, at 1e-2; a
draw whose forward runs from halo tiles also in TF32 against float64 of TF32-rounded operands, at 1e-4, and one whose
grad_w runs on wgmma its weight gradient in TF32 against float64 of TF32-rounded operands, at 1e-3).
Pool draws are generated with the walk's size threshold lifted (walk_lifted), so their small 3-d windows that share a
slice take the walking forward; the GPU summary counts them.
--path KEY keeps only the draws whose family's derive() has a truthy KEY (a kernel path, e.g. FMA_DX or HALO_DX;
HALO.REG: a key of the HALO plan).
--files A.py B.py checks those problem files (e.g. tests/dev/cases/*.py) in place of random draws.
Usage: python tests/dev/sweep.py [--n 12] [--seed 1] [--family NAME] [--path KEY] [--files F ...] [--compile] [--gpu]
[--jobs 12]"""

import argparse
import contextlib
import sys
import tempfile
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import emit  # noqa: E402
from kgen.families import pool as pool_family  # noqa: E402
from tests import ptxas  # noqa: E402
from tests.families import random_problems  # noqa: E402
from tests.helpers import write_problem  # noqa: E402
from tests.test_static_rules import computes_in_float32, violations  # noqa: E402


def compile_ok(gen):
    """The compile tier's check of one kernel (tests/ptxas.py): sm_80 and sm_90, and its Hopper path where it has one
    (sm_90a with wgmma), with no spill, stack frame or wgmma note of ptxas."""
    with tempfile.TemporaryDirectory() as d:
        source = gen.files["kernel.cu"]
        try:
            reps = ptxas.reports(Path(d), source, ptxas.builds(source, ("80", "90")))
        except AssertionError as e:  # nvcc failed: its message
            return False, str(e)[-1500:]
        bad = [f for r in reps for f in ptxas.findings(r)]
        return not bad, "\n".join(bad)


def pool_designs(gen) -> str:
    """A pool kernel's forward and backward designs, from the header line kernel.cu.j2 writes."""
    head = next((ln for ln in gen.files["kernel.cu"].splitlines()[:6] if "forward design: " in ln), "")
    return head.split("forward design: ")[-1].rstrip(".").replace(", backward: ", " / ") if head else "?"


@contextlib.contextmanager
def walk_lifted(on: bool):
    """The pool family's walk (3-d windows sharing one input slice) without its size threshold, which only guards
    occupancy at large sizes: random draws are small, so the sweep generates every pool draw this way to reach it
    (the one-slice path of such windows stays covered by the small CASES)."""
    saved = pool_family.WALK_MIN_ITEMS
    pool_family.WALK_MIN_ITEMS = 0 if on else saved
    try:
        yield
    finally:
        pool_family.WALK_MIN_ITEMS = saved


def other_seeds(src: str, lift: bool, seeds=(1, 2)) -> str:
    """compare() of a failed problem again on the inputs of other seeds: which pass."""
    from tests.test_numerics import compare
    out = []
    for seed in seeds:
        try:
            with walk_lifted(lift):
                compare(src, seed=seed)
            out.append(f"seed {seed} passes")
        except Exception as exc:  # a dev sweep reports and goes on
            out.append(f"seed {seed} fails ({type(exc).__name__})")
    return ", ".join(out)


def matched(src: str):
    """(family, spec) of a problem's source, as kgen generate matches it."""
    from kgen.problem import load_problem
    from kgen.spec import match

    return match(load_problem(write_problem(src)))


def takes(src: str, key: str):
    """The draw's derive()[key] (a kernel path such as FMA_DX or HALO; a dotted key looks inside a plan, e.g.
    HALO.REG), None where its family has no derive() or the draw has no such plan."""
    fam, spec = matched(src)
    v = getattr(fam, "derive", lambda s: {})(spec)
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v


def family_of(src: str) -> str:
    """The name of the family that serves a problem's source."""
    return matched(src)[0].NAME


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12, help="problems per family")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--family", default=None, help="only this family")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--jobs", type=int, default=12, help="parallel extension builds before the GPU checks")
    ap.add_argument("--path", default=None, help="only the draws whose derive() has this key truthy (e.g. FMA_DX)")
    ap.add_argument("--files", nargs="+", default=None, help="these problem files in place of random draws")
    a = ap.parse_args()
    if a.files:
        cases = [(family_of(s), s) for s in (Path(f).read_text() for f in a.files)]
    else:
        cases = [(f, s) for f, s in random_problems(a.n, a.seed) if a.family in (None, f)]
    if a.path:
        cases = [(f, s) for f, s in cases if takes(s, a.path)]
        print(f"--path {a.path}: {len(cases)} draws", flush=True)
    gens, bad = [], 0
    for fam, src in cases:
        lift = fam == pool_family.NAME
        try:
            path = write_problem(src)
            with walk_lifted(lift):
                gen = emit.generate(path)
        except Exception as exc:  # a dev sweep reports and goes on
            bad += 1
            print(f"RENDER FAIL {fam}: {type(exc).__name__}: {exc}\n{src}")
            continue
        gens.append((fam, src, gen, lift))
        static = violations(gen.files["model_new.py"], computes_in_float32(path))
        if static:  # KernelBench's static checker would reject it (tests/test_static_rules.py)
            bad += 1
            print(f"STATIC FAIL {fam} {gen.name}: {static}\n{src}")
    if a.compile:
        with ThreadPoolExecutor(2) as ex:
            for (fam, src, gen, _), (ok, msg) in zip(gens, ex.map(lambda t: compile_ok(t[2]), gens)):
                if not ok:
                    bad += 1
                    print(f"COMPILE FAIL {fam} {gen.name}: {msg}\n{src}")
    if a.gpu:
        from tests import helpers
        from tests.device.prebuild import build
        from tests.test_conv2d_epilogue import tf32_grad_w_check, tf32_inference_check
        from tests.test_numerics import compare

        # build every extension in parallel first; the checks then load from the cache
        paths = [helpers.write_generated(gen) for fam, src, gen, _ in gens]
        with ThreadPoolExecutor(a.jobs) as ex:
            for name, secs, rc, err in ex.map(build, paths):
                if rc:
                    print(f"BUILD FAIL {name}: {err[-1500:]}")
        walks, designs, halo_tf32, wg_tf32 = 0, Counter(), Counter(), 0
        for fam, src, gen, lift in gens:
            try:
                with walk_lifted(lift):
                    compare(src)
                if fam.startswith("conv2d"):  # also PyTorch's default flags (TF32 allowed), as a benchmark harness runs it
                    compare(src, tf32=True)
                halo = takes(src, "HALO") if fam == "conv2d_epilogue" else None
                if halo:  # the halo forward in TF32 (wgmma where it takes it) against TF32's own error model, at 1e-4
                    tf32_inference_check(src)
                    halo_tf32["wgmma" if halo["WGMMA"] else "mma.sync"] += 1
                if fam == "conv2d_epilogue" and takes(src, "HALO_WG"):  # grad_w on wgmma in TF32, against float64
                    tf32_grad_w_check(src)
                    wg_tf32 += 1
                walked = "WALK = 0," not in gen.files["kernel.cu"] and "constexpr int WALK =" in gen.files["kernel.cu"]
                walks += walked
                design = pool_designs(gen) if fam == pool_family.NAME else ""
                designs[design] += bool(design)
                print(f"ok {fam} {gen.name}{' (walk)' if walked else ''}{f' [{design}]' if design else ''}")
            except Exception:
                bad += 1
                print(f"GPU FAIL {fam} {gen.name}\n{traceback.format_exc()[-2500:]}\n{src}")
                print(f"GPU FAIL {fam} {gen.name}: the same problem on other inputs: {other_seeds(src, lift)} (a failure on one "
                      "seed only is often a near-tie of a max: tests/dev/argmax_margin.py measures it; still counted)")
        print(f"sweep: {walks} of the GPU cases walk (pool 3-d windows sharing a slice)")
        print(f"sweep: halo forwards checked in TF32 against float64 of TF32-rounded operands: {halo_tf32['wgmma']} on wgmma "
              f"(in an sm_90a build), {halo_tf32['mma.sync']} on mma.sync; grad_w on wgmma (HALO_WG) checked so: {wg_tf32}")
        if designs:
            print("sweep: passing pool cases by (forward, backward) design: "
                  + ", ".join(f"{d} {n}" for d, n in sorted(designs.items()) if n))
    print(f"sweep: {len(cases)} cases, {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
