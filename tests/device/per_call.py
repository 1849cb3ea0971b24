"""Per-call cost table (GPU): every registered family's CASES at their small test shapes, eager against kgen,
forward and forward+backward, timed one call per sample (how KernelBench times) and back to back (20 calls per
sample), eager and kgen sampled in turn so drift hits both; and the forward as KernelBench's harness times it, one
call per sample with autograd on (the parameters require grad) and no backward.
Usage: python tests/device/per_call.py [--family NAME] [--match WORD ...] [--csv FILE] (--match: only cases whose id
holds one of the words). Prints one row per case and the bar check
(kgen <= eager) per column."""

import argparse
import csv
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen.bench import first, forward_call, harness_forward, reset_save_policy, training_step  # noqa: E402
from tests.families import all_families  # noqa: E402
from tests.helpers import reference_and_new  # noqa: E402


def interleaved(fns: dict, per_call: bool, samples: int = 200) -> dict:
    """Median ms of each fn, sampling the providers in turn (ABAB...) so drift in clocks or host load hits all."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for fn in fns.values():
        for _ in range(10):
            fn()
    torch.cuda.synchronize()
    inner = 1 if per_call else 20
    times: dict = {k: [] for k in fns}
    for _ in range(samples if per_call else samples // 10):
        for k, fn in fns.items():
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times[k].append(start.elapsed_time(end) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def time_case(source: str) -> dict:
    torch.backends.cudnn.allow_tf32 = False
    model, new, ns, user = reference_and_new(source)
    with torch.device("cuda"):
        x = user["get_inputs"]()[0]
    xg = x.detach().clone().requires_grad_(True)
    fwd = {"eager": forward_call(model, x), "kgen": forward_call(new, x)}
    reset_save_policy(ns)  # a fresh process's state: no backward run yet
    harness = interleaved({"eager": harness_forward(model, x), "kgen": harness_forward(new, x)}, True)
    # an index-only output (return_indices, [1]) has no training step
    step = {"eager": training_step(model, xg), "kgen": training_step(new, xg)} if first(model(xg)).requires_grad else None
    cols = [interleaved(fwd, True), step and interleaved(step, True), interleaved(fwd, False),
            step and interleaved(step, False), harness]
    return {k: tuple(c[k] if c else None for c in cols) for k in ("eager", "kgen")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default=None)
    ap.add_argument("--match", nargs="*", default=None, help="only cases whose id holds one of these words")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    cols = ("fwd/call", "step/call", "fwd b2b", "step b2b", "fwd(grad)/call")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; ms, eager / kgen (ratio eager/kgen)")
    print(f"{'case':<58}" + "".join(f"{c:>24}" for c in cols))
    worse = [0] * len(cols)
    rows = []
    for fc in all_families():
        if a.family not in (None, fc.name):
            continue
        for cid, src in fc.cases:
            if a.match and not any(w in cid for w in a.match):
                continue
            t = time_case(src)
            cells = []
            for i in range(len(cols)):
                e, k = t["eager"][i], t["kgen"][i]
                if e is None:
                    cells.append("no gradient")
                    continue
                worse[i] += k > e
                cells.append(f"{e:8.4f}/{k:8.4f} ({e / k:4.2f})")
            print(f"{(fc.name + ':' + cid)[:57]:<58}" + "".join(f"{c:>24}" for c in cells), flush=True)
            rows.append([fc.name, cid, *t["eager"], *t["kgen"]])
    print("cases where kgen is slower than eager: " + ", ".join(f"{c} {w}" for c, w in zip(cols, worse)))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["family", "case", *(f"eager_{c}" for c in cols), *(f"kgen_{c}" for c in cols)])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
