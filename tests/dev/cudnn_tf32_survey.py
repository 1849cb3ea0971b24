"""Which float32 convolutions does cuDNN run in TF32 when PyTorch allows it (its default)?

For each drawn Conv2d shape, each pass (forward, grad of the input, grad of the weight) runs twice with the same
data: cuDNN's TF32 flag on (PyTorch's default) and off. A pass counts as TF32 when the two results differ by more
than an exact float32 algorithm could (max |on - off| / max |off| > 1e-5; TF32 differs by ~1e-4..1e-3, two float32
algorithms by ~1e-7; kgen.cudnn_tf32.TF32_REL). The kernel names under the default flag are recorded too
(torch.profiler). docs/cudnn_tf32_survey.csv is two such runs; kgen/cudnn_tf32.py's trees are fitted to it
(tests/dev/fit_cudnn_tf32.py).

Usage (GPU): python tests/dev/cudnn_tf32_survey.py --n 300 --seed 1 --csv OUT.csv
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen.cudnn_tf32 import PASSES, TF32_REL  # noqa: E402
from kgen.geometry import conv_out_size  # noqa: E402


def draw(rng: random.Random) -> dict:
    """A Conv2d shape, log-uniform over sizes from tiny to a few tens of GFLOP."""
    while True:
        k = rng.choice([1, 2, 3, 3, 3, 4, 5, 5, 7])
        kh, kw = (k, k) if rng.random() < 0.85 else (k, rng.choice([1, 3, 5]))
        s = rng.choice([1, 1, 1, 2, 2, 3])
        d = rng.choice([1, 1, 1, 1, 2, 3])
        g_kind = rng.choice(["one", "one", "one", "one", "two", "depthwise", "general"])
        ci = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
        co = rng.choice([1, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
        g = 1
        if g_kind == "two" and ci % 2 == 0 and co % 2 == 0:
            g = 2
        elif g_kind == "depthwise":
            g = ci
            co = ci * rng.choice([1, 1, 2])
        elif g_kind == "general":
            for cand in (4, 8, 3, 16):
                if ci % cand == 0 and co % cand == 0 and ci > cand:
                    g = cand
                    break
        h = int(round(2 ** rng.uniform(2.5, 9)))
        w = h if rng.random() < 0.7 else int(round(2 ** rng.uniform(2.5, 9)))
        n = rng.choice([1, 1, 2, 4, 8, 16, 32, 64, 128, 256])
        p = rng.choice([0, (kh // 2) * d])
        ho, wo = conv_out_size(h, kh, s, p, d), conv_out_size(w, kw, s, p, d)
        if ho < 1 or wo < 1:
            continue
        flops = 2.0 * n * ho * wo * co * (ci // g) * kh * kw
        elems = max(n * ci * h * w, n * co * ho * wo)
        if flops > 6e10 or elems > 3e8:
            continue
        return dict(n=n, ci=ci, co=co, h=h, w=w, kh=kh, kw=kw, s=s, p=p, d=d, g=g, ho=ho, wo=wo, flops=flops)


FIXED = [  # the benchmark convolutions, the bundled problem and KernelBench-style sizes
    dict(n=64, ci=32, co=64, h=192, w=192, kh=3, kw=3, s=1, p=1, d=1, g=1),
    dict(n=64, ci=16, co=64, h=256, w=256, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=128, ci=8, co=32, h=320, w=320, kh=5, kw=5, s=2, p=0, d=1, g=1),
    dict(n=64, ci=24, co=48, h=160, w=160, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=32, ci=96, co=96, h=160, w=160, kh=3, kw=3, s=1, p=1, d=1, g=96),
    dict(n=128, ci=8, co=64, h=384, w=384, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=128, ci=3, co=16, h=32, w=32, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=128, ci=3, co=16, h=32, w=32, kh=3, kw=3, s=1, p=1, d=1, g=1),
    dict(n=128, ci=8, co=64, h=128, w=128, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=64, ci=64, co=128, h=64, w=64, kh=3, kw=3, s=1, p=1, d=1, g=1),
    dict(n=16, ci=3, co=64, h=256, w=256, kh=3, kw=3, s=1, p=0, d=1, g=1),
    dict(n=16, ci=64, co=128, h=200, w=160, kh=3, kw=5, s=1, p=0, d=2, g=1),
    dict(n=2, ci=4, co=8, h=16, w=16, kh=3, kw=3, s=1, p=0, d=1, g=1),
]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    den = b.abs().max().item()
    return (a - b).abs().max().item() / den if den > 0 else 0.0


def names(fn) -> str:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ks = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    return " | ".join(k[:90] for k in ks if "elementwise" not in k and "fill" not in k.lower())


def survey(c: dict) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(c["n"], c["ci"], c["h"], c["w"], device="cuda", generator=g)
    wt = torch.randn(c["co"], c["ci"] // c["g"], c["kh"], c["kw"], device="cuda", generator=g)
    args = dict(stride=c["s"], padding=c["p"], dilation=c["d"], groups=c["g"])
    gy = torch.randn(c["n"], c["co"], c["ho"], c["wo"], device="cuda", generator=g)
    res = {}
    for on in (True, False):
        torch.backends.cudnn.allow_tf32 = on
        xr, wr = x.clone().requires_grad_(), wt.clone().requires_grad_()
        y = F.conv2d(xr, wr, **args)
        gx, gw = torch.autograd.grad(y, (xr, wr), gy)
        res[on] = (y.detach(), gx, gw)
    torch.backends.cudnn.allow_tf32 = True
    out = {k: rel(a, b) for k, a, b in zip(PASSES, res[True], res[False])}
    xr, wr = x.clone().requires_grad_(), wt.clone().requires_grad_()
    out["k_fwd"] = names(lambda: F.conv2d(x, wt, **args))
    y = F.conv2d(xr, wr, **args)
    out["k_dgrad"] = names(lambda: torch.autograd.grad(y, xr, gy, retain_graph=True))
    out["k_wgrad"] = names(lambda: torch.autograd.grad(y, wr, gy))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", default="cudnn_tf32_survey.csv")
    ap.add_argument("--secs", type=float, default=400.0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    shapes = []
    for c in FIXED:
        c = dict(c)
        c["ho"] = conv_out_size(c["h"], c["kh"], c["s"], c["p"], c["d"])
        c["wo"] = conv_out_size(c["w"], c["kw"], c["s"], c["p"], c["d"])
        c["flops"] = 2.0 * c["n"] * c["ho"] * c["wo"] * c["co"] * (c["ci"] // c["g"]) * c["kh"] * c["kw"]
        shapes.append(c)
    shapes += [draw(rng) for _ in range(a.n)]
    print(torch.cuda.get_device_name(), torch.__version__, "cudnn", torch.backends.cudnn.version(), flush=True)
    t0 = time.time()
    keys = ["n", "ci", "co", "h", "w", "kh", "kw", "s", "p", "d", "g", "ho", "wo", "flops"]
    with open(a.csv, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(keys + ["fwd", "dgrad", "wgrad", "k_fwd", "k_dgrad", "k_wgrad"])
        for i, c in enumerate(shapes):
            if time.time() - t0 > a.secs:
                print(f"time box: {i} of {len(shapes)} shapes", flush=True)
                break
            r = survey(c)
            wr.writerow([c[k] for k in keys] + [f"{r['fwd']:.3g}", f"{r['dgrad']:.3g}", f"{r['wgrad']:.3g}",
                                                r["k_fwd"], r["k_dgrad"], r["k_wgrad"]])
            f.flush()
            tags = "".join("T" if r[p] > TF32_REL else "." for p in PASSES)
            print(f"{i:4d} {tags} n{c['n']} {c['ci']}->{c['co']} {c['h']}x{c['w']} k{c['kh']}x{c['kw']} s{c['s']} "
                  f"p{c['p']} d{c['d']} g{c['g']} gflop {c['flops'] / 1e9:.3g}", flush=True)
            torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
