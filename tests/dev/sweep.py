"""Random in-scope problems for every family: render (and nvcc-compile with --compile) here; on a GPU, also check
forward and every gradient against PyTorch. Usage: python tests/dev/sweep.py [--n 12] [--seed 1] [--compile] [--gpu]"""

import argparse
import random
import subprocess
import sys
import tempfile
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import emit  # noqa: E402
from tests.helpers import avg_pool_problem, conv_problem, write_problem  # noqa: E402


def avg_cases(rng, n):
    out = []
    while len(out) < n:
        kh, kw = rng.randint(1, 7), rng.randint(1, 7)
        sh, sw = rng.randint(1, 4), rng.randint(1, 4)
        ph, pw = rng.randint(0, kh // 2), rng.randint(0, kw // 2)
        h, w = rng.randint(kh, 70), rng.randint(kw, 300)
        kw_ = dict(kernel_size=(kh, kw), stride=(sh, sw), padding=(ph, pw), ceil_mode=rng.random() < 0.4,
                   count_include_pad=rng.random() < 0.5)
        if rng.random() < 0.2:
            kw_["divisor_override"] = rng.randint(1, 9)
        out.append(avg_pool_problem((rng.randint(1, 3), rng.randint(1, 5), h, w), kw_, functional=rng.random() < 0.3))
    return out


def conv_cases(rng, n):
    out = []
    acts = ["sigmoid", "tanh", "relu", "gelu", "gelu_tanh", "none"]
    while len(out) < n:
        k = (rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 3, 4, 5]))
        s, d = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2])
        p = (rng.randint(0, k[0] // 2 + 1), rng.randint(0, k[1] // 2 + 1))
        pk = (rng.randint(1, 5), rng.randint(1, 5))
        ps = (rng.randint(1, pk[0] + 1), rng.randint(1, pk[1] + 1))
        ci, co = rng.choice([1, 3, 4, 8, 16, 33]), rng.choice([1, 5, 16, 64, 80, 130])
        h, w = rng.randint(12, 90), rng.randint(12, 130)
        ho = (h + 2 * p[0] - d * (k[0] - 1) - 1) // s + 1
        wo = (w + 2 * p[1] - d * (k[1] - 1) - 1) // s + 1
        if ho < pk[0] or wo < pk[1]:
            continue
        conv = dict(in_channels=ci, out_channels=co, kernel_size=k, stride=s, padding=p, dilation=d, bias=rng.random() < 0.8)
        pool = dict(kernel_size=pk, stride=ps)
        out.append(conv_problem((rng.randint(1, 3), ci, h, w), conv, pool, rng.choice(acts), rng.choice(["sum", "mean"])))
    return out


def compile_ok(gen):
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.cu"
        src.write_text(gen.files["kernel.cu"])
        r = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-c", "-Xptxas", "-v", str(src), "-o", str(Path(d) / "k.o")],
                           capture_output=True, text=True)
        spills = [ln for ln in r.stderr.splitlines() if "spill" in ln and not ln.strip().startswith("0 bytes stack frame, 0 bytes spill")]
        return r.returncode == 0 and not spills, (r.stderr[-1500:] if r.returncode else "\n".join(spills))


def gpu_check(src):
    import torch

    from tests.helpers import reference_and_new
    torch.backends.cudnn.allow_tf32 = False
    model, new, ns, user = reference_and_new(src)
    with torch.device("meta"):
        shape = tuple(user["get_inputs"]()[0].shape)
    x = torch.rand(shape, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    ref, out = model(xr), new(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    for p, pr in zip(new.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cases = [("avg_pool2d", s) for s in avg_cases(rng, a.n)] + [("conv", s) for s in conv_cases(rng, a.n)]
    gens, bad = [], 0
    for fam, src in cases:
        try:
            gens.append((fam, src, emit.generate(write_problem(src))))
        except Exception as exc:  # a dev sweep reports and goes on
            bad += 1
            print(f"RENDER FAIL {fam}: {type(exc).__name__}: {exc}\n{src}")
    if a.compile:
        with ThreadPoolExecutor(2) as ex:
            for (fam, src, gen), (ok, msg) in zip(gens, ex.map(lambda t: compile_ok(t[2]), gens)):
                if not ok:
                    bad += 1
                    print(f"COMPILE FAIL {fam} {gen.name}: {msg}\n{src}")
    if a.gpu:
        from tests import helpers
        from tests.device.prebuild import build

        # build every extension in parallel first; the checks then load from the cache
        paths = [helpers.write_generated(gen) for fam, src, gen in gens]
        with ThreadPoolExecutor(12) as ex:
            for name, secs, rc, err in ex.map(build, paths):
                if rc:
                    print(f"BUILD FAIL {name}: {err[-1500:]}")
        for fam, src, gen in gens:
            try:
                gpu_check(src)
                print(f"ok {fam} {gen.name}")
            except Exception:
                bad += 1
                print(f"GPU FAIL {fam} {gen.name}\n{traceback.format_exc()[-2500:]}\n{src}")
    print(f"sweep: {len(cases)} cases, {bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
