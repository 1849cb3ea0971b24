"""Host cost per call (GPU machine): where a generated module's microseconds go, against eager.

Usage: python tests/device/overhead.py [FAMILY]            every family's HARDENING problem (tiny: the host path)
       python tests/device/overhead.py --problem FILE [--batch N ...]
                                                       a problem file at the given batches (default: its own)

Host microseconds per call (many calls on a host clock, no sync between them: with tiny GPU work this is the CPU
path) and, per batch, one call per sample between two CUDA events (how KernelBench times: the host's cost before
the first kernel shows) beside back-to-back event time, for eager Model and kgen ModelNew, with and without autograd
(KernelBench's harness times the forward with autograd on and no backward)."""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen.bench import cuda_time_ms, forward_call, harness_forward, per_call_ms, reset_save_policy  # noqa: E402
from tests.families import all_families  # noqa: E402
from tests.helpers import reference_and_new  # noqa: E402


def us_per_call(fn, n=3000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def no_grad(fn):
    def f():
        with torch.no_grad():
            fn()
    return f


def host_table(label, model, new, ns, x):
    xg = x.clone().requires_grad_(True)
    op = getattr(torch.ops, ns["KGEN_NAMESPACE"]).forward.default
    params = [p for p in new.parameters()]
    rows = {
        "eager Model(x), no grad": no_grad(lambda: model(x)),
        "kgen ModelNew(x), no grad": no_grad(lambda: new(x)),
        "kgen extension forward, no grad": no_grad(lambda: ns["kgen_fast"](x, *params)),
        "kgen op (OpOverload), no grad": no_grad(lambda: op(x, *params)),
        "eager Model(x), autograd on": lambda: model(x),
        "kgen ModelNew(x), autograd on": lambda: new(x),
        "eager Model(xg) fwd+bwd": lambda: model(xg).sum().backward(),
        "kgen ModelNew(xg) fwd+bwd": lambda: new(xg).sum().backward(),
    }
    print(f"{label} ({torch.cuda.get_device_name()}, torch {torch.__version__}): host microseconds per call")
    for name, fn in rows.items():
        print(f"  {name:<36} {us_per_call(fn, 1000 if 'bwd' in name else 3000):8.2f}", flush=True)


def event_table(model, new, ns, x):
    """Milliseconds: back-to-back and one call per sample, each provider with and without autograd (kgen's save
    policy reset first, as a fresh process finds it: the host table's backward rows make it store)."""
    print(f"  batch {x.shape[0]}: ms back-to-back | one call per sample (median)")
    reset_save_policy(ns)  # neither row below runs a backward
    for name, m in (("eager", model), ("kgen", new)):
        for grad in (False, True):
            fn = harness_forward(m, x) if grad else forward_call(m, x)  # as `kgen bench` times them
            b2b, call = cuda_time_ms(fn, 10, 30), per_call_ms(fn, 10, 100)
            print(f"    {name:<6} {'autograd on' if grad else 'no grad':<12} {b2b:9.4f} | {call:9.4f}  "
                  f"(per call - b2b: {1e3 * (call - b2b):7.1f} us)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("family", nargs="?")
    ap.add_argument("--problem", type=Path, help="a problem file instead of the families' HARDENING problems")
    ap.add_argument("--batch", type=int, nargs="*", default=[], help="batches to time (--problem; default its own)")
    args = ap.parse_args()
    if args.problem:
        source = args.problem.read_text()
        model, new, ns, user = reference_and_new(source, args.problem.stem)
        x0 = user["get_inputs"]()[0]
        for i, n in enumerate(args.batch or [x0.shape[0]]):
            x = torch.rand((n,) + tuple(x0.shape[1:]), device="cuda")
            if i == 0:
                host_table(f"{args.problem.stem} batch {n}", model, new, ns, x)
            event_table(model, new, ns, x)
        return
    for fc in all_families():
        if args.family not in (None, fc.name):
            continue
        model, new, ns, user = reference_and_new(fc.hardening)
        with torch.device("cuda"):
            x = user["get_inputs"]()[0]
        host_table(fc.name, model, new, ns, x)


if __name__ == "__main__":
    main()
