"""A/B of conv2d_epilogue's save policies at issue 9's sizes (device only; a development harness): kgen's forward
with autograd on and no backward (how KernelBench's harness times it) and its training step, under "store" (the
training forward in the forward) and "recompute" (the inference forward; the backward runs the training forward
first). "auto", the shipped default, is "recompute" until a backward has run and "store" after.

Usage: python tests/dev/save_policy_ab.py [--tf32] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen import bench  # noqa: E402
from kgen.problem import load_problem  # noqa: E402
from tests.bench.bench_conv2d_epilogue import PROBLEMS as BENCH, problem_source  # noqa: E402

# Beside issue 9's problems: the hardswish problem with padding 1 (256-wide output rows, 16-byte aligned, where the
# unpadded problem's are 254 wide), to tell whether the training forward's extra cost there follows the row alignment.
PROBLEMS = {**BENCH, "conv3x3p1_sub_hardswish": ("16, 64, 3, padding=1", "return F.hardswish(y - 0.5)", [],
                                                 (64, 16, 256, 256))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = a.tf32
    paths = bench.write_problems("kgen_save_ab_", {n: problem_source(*PROBLEMS[n]) for n in a.only or BENCH}, 8)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, TF32 {'allowed' if a.tf32 else 'off'}; ms")
    print(f"{'problem':<34} {'eager fwd(grad)':>16} {'store fwd(grad)':>16} {'recompute':>10} "
          f"{'store step':>11} {'recompute step':>15}")
    for path in paths:
        loaded = load_problem(path)
        _, ns = bench.load_generated(loaded)
        user = loaded.namespace
        torch.manual_seed(0)
        model = user["Model"]().cuda()
        new = ns["ModelNew"]().cuda()
        new.load_state_dict(model.state_dict())
        with torch.device("cuda"):
            x = user["get_inputs"]()[0]
        xg = x.detach().requires_grad_(True)
        policy = getattr(torch.ops, ns["KGEN_NAMESPACE"]).save_policy
        row = [bench.cuda_time_ms(bench.harness_forward(model, x), 3, 10)]
        for mode in ("store", "recompute"):
            policy(mode)
            row.append(bench.cuda_time_ms(bench.harness_forward(new, x), 3, 10))
        for mode in ("store", "recompute"):
            policy(mode)
            row.append(bench.cuda_time_ms(bench.training_step(new, xg), 3, 10))
        policy("auto")
        print(f"{path.stem:<34} {row[0]:16.3f} {row[1]:16.3f} {row[2]:10.3f} {row[3]:11.3f} {row[4]:15.3f}", flush=True)
        del model, new, x, xg
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
