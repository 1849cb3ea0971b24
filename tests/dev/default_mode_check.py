"""kgen against eager PyTorch at KernelBench's float32 tolerance (atol = rtol = 1e-4) under PyTorch's default flags
(cuDNN TF32 allowed), for the conv families' CASES and random problems.

For each problem and each checked tensor (outputs, grad x, every parameter's gradient) it prints whether eager
itself changed with the TF32 flag (cuDNN picked a TF32 kernel: 'T', or an exact float32 one: '.'), and whether kgen
as shipped (TF32 where its model of cuDNN's choice says so, kgen/cudnn_tf32.py), kgen with every pass in TF32
(KGEN_TF32=all) and kgen's exact 3xTF32 kernels each pass allclose(1e-4) against default eager; 'mirror' counts the
passes of a policy that knew cuDNN's actual choice.

Usage (GPU): python tests/dev/default_mode_check.py [--random N] [--seed S] [--only WORD ...]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen import emit  # noqa: E402
from kgen.cudnn_tf32 import TF32_REL  # noqa: E402
from tests import helpers  # noqa: E402
from tests.bench.bench_conv2d_epilogue import PROBLEMS, problem_source  # noqa: E402
from tests.device.prebuild import build  # noqa: E402
from tests.families import all_cases, random_problems  # noqa: E402
from tests.helpers import reference_and_new, tf32_mode  # noqa: E402

CONV = ("conv2d_epilogue", "conv2d_avgpool_act_reduce")


def run(m, x, gys, tf32: bool, every_pass: bool = False):
    with tf32_mode(tf32, every_pass):
        return _run(m, x, gys)


def _run(m, x, gys):
    for p in m.parameters():
        p.grad = None
    xr = x.detach().clone().requires_grad_(True)
    out = m(xr)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    out = [o for o in out if o.is_floating_point()]
    if gys is None:
        gys = [torch.randn_like(o) for o in out]
    torch.autograd.backward([o for o in out if o.requires_grad], [g for o, g in zip(out, gys) if o.requires_grad])
    ts = [o.detach().clone() for o in out] + [xr.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    names = [f"out{i}" for i in range(len(out))] + ["grad_x"] + [f"grad_{n}" for n, _ in m.named_parameters()]
    return names, ts, gys


def err(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).abs() / (1e-4 + 1e-4 * b.abs())).max().item()  # <= 1: allclose(1e-4, 1e-4) holds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1601)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--prebuild", type=int, default=16, help="build every extension first, this many at a time")
    ap.add_argument("--bench-batch", type=int, default=2, help="batch of issue 9's benchmark problems (0: skip them)")
    a = ap.parse_args()
    probs = [(f, c, s) for f, c, s in all_cases() if f in CONV]
    if a.bench_batch:
        for name, (conv, body, init, shape) in PROBLEMS.items():
            probs.append(("conv2d_epilogue", name, problem_source(conv, body, init, (a.bench_batch,) + tuple(shape[1:]))))
        bundled = (Path(__file__).resolve().parents[2] / "kgen" / "problems" / "conv2d_avgpool_sigmoid_sum.py").read_text()
        probs.append(("conv2d_avgpool_act_reduce", "bundled", bundled))
    probs += [(f, f"random{i}", s) for i, (f, s) in enumerate(random_problems(a.random, a.seed)) if f in CONV]
    if a.only:
        probs = [p for p in probs if any(w in p[1] for w in a.only)]
    if a.prebuild:
        paths = [helpers.write_generated(emit.generate(helpers.write_problem(src))) for _, _, src in probs]
        with ThreadPoolExecutor(a.prebuild) as ex:
            bad = [r for r in ex.map(build, paths) if r[2]]
        print(f"prebuilt {len(paths)} extensions, {len(bad)} failed", flush=True)
    totals = {"n": 0, "policy_pass": 0, "tf32_pass": 0, "x3_pass": 0, "mirror_pass": 0, "eager_T": 0}
    for fam, cid, src in probs:
        model, new, _, user = reference_and_new(src, seed=0)
        torch.manual_seed(1)
        x = user["get_inputs"]()[0].cuda()  # the problem's own inputs, as a harness makes them
        names, e_on, gys = run(model, x, None, True)
        _, e_off, _ = run(model, x, gys, False)
        _, k_pol, _ = run(new, x, gys, True)
        _, k_on, _ = run(new, x, gys, True, every_pass=True)
        _, k_off, _ = run(new, x, gys, False)
        cells = []
        for nm, eo, ef, kp, ko, kf in zip(names, e_on, e_off, k_pol, k_on, k_off):
            t = (eo - ef).abs().max().item() > TF32_REL * max(ef.abs().max().item(), 1e-30)
            p_pol, p_on, p_off = err(kp, eo) <= 1, err(ko, eo) <= 1, err(kf, eo) <= 1
            totals["n"] += 1
            totals["eager_T"] += t
            totals["policy_pass"] += p_pol
            totals["tf32_pass"] += p_on
            totals["x3_pass"] += p_off
            totals["mirror_pass"] += p_on if t else p_off
            cells.append(f"{nm}:{'T' if t else '.'}{'+' if p_pol else '-'}{'+' if p_on else '-'}{'+' if p_off else '-'}")
        print(f"{fam[:12]:12s} {cid[:44]:44s} {tuple(x.shape)}  " + " ".join(cells), flush=True)
    print("tensors {n}; eager used TF32 on {eager_T}; pass at 1e-4 against default eager: kgen as shipped {policy_pass}, "
          "kgen TF32 in every pass {tf32_pass}, kgen 3xTF32 {x3_pass}, mirroring cuDNN's actual choice {mirror_pass}"
          .format(**totals))
    print("cell = tensor:[eager TF32?][kgen passes?][kgen TF32 everywhere passes?][kgen 3xTF32 passes?]")


if __name__ == "__main__":
    main()
