"""Host cost per call (GPU machine): where a generated module's microseconds go, against eager, on a tiny problem
(every family's HARDENING). Times many calls with a host clock; the GPU work is tiny, so this is the CPU path.
Usage: python tests/device/overhead.py [FAMILY]"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else None
    for fc in all_families():
        if only not in (None, fc.name):
            continue
        model, new, ns, user = reference_and_new(fc.hardening)
        with torch.device("cuda"):
            x = user["get_inputs"]()[0]
        xg = x.clone().requires_grad_(True)
        op = getattr(torch.ops, ns["KGEN_NAMESPACE"]).forward.default
        params = [p for p in new.parameters()]
        rows = {
            "eager Model(x), no grad": lambda: model(x),
            "kgen ModelNew(x), no grad": lambda: new(x),
            "kgen op (OpOverload), no grad": lambda: op(x, *params),
            "kgen op._op, no grad": lambda: op._op(x, *params),
            "eager Model(xg) fwd+bwd": lambda: model(xg).sum().backward(),
            "kgen ModelNew(xg) fwd+bwd": lambda: new(xg).sum().backward(),
        }
        print(f"{fc.name} ({torch.cuda.get_device_name()}, torch {torch.__version__}): host microseconds per call")
        for label, fn in rows.items():
            if "no grad" in label:
                with torch.no_grad():
                    t = us_per_call(fn)
            else:
                t = us_per_call(fn, 1000)
            print(f"  {label:<34} {t:8.2f}")


if __name__ == "__main__":
    main()
