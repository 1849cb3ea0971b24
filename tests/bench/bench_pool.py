"""Benchmark the pool family at realistic sizes (issue 8; every input >= 256 MB): each problem file is written into a
temporary folder and timed by `kgen.bench` (eager, torch.compile and kgen; forward and forward+backward; the memory
floor from the family's traffic() and the copy bandwidth of the same run), appending rows to a CSV.

Usage (GPU): python tests/bench/bench_pool.py [--quick] [--no-compile] [--per-call] [--only NAME ...] [--csv docs/bench.csv]
--quick: fewer timing samples (2 warm-up, 5 samples).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import bench  # noqa: E402

# name -> (module expression, input shape, dtype)
PROBLEMS = {
    "maxpool1d_k4s2": ("nn.MaxPool1d(4, 2)", (32, 256, 100000), "float32"),
    "maxpool2d_k3s2p1": ("nn.MaxPool2d(3, 2, 1)", (32, 96, 384, 384), "float32"),
    "maxpool3d_k3s2p1": ("nn.MaxPool3d(3, 2, 1)", (8, 48, 96, 96, 160), "float32"),
    "avgpool1d_k5s1p2": ("nn.AvgPool1d(5, 1, 2)", (32, 128, 120000), "float32"),
    "avgpool3d_k2": ("nn.AvgPool3d(2)", (8, 64, 64, 128, 128), "float32"),
    "adaptiveavgpool2d_7": ("nn.AdaptiveAvgPool2d(7)", (256, 512, 28, 28), "float32"),
    "maxpool2d_k3s2p1_fp16": ("nn.MaxPool2d(3, 2, 1)", (32, 96, 384, 384), "float16"),
    "avgpool3d_k2_bf16": ("nn.AvgPool3d(2)", (8, 64, 64, 128, 128), "bfloat16"),
}


def problem_source(module: str, shape: tuple, dtype: str) -> str:
    dt = "" if dtype == "float32" else f", dtype=torch.{dtype}"
    return f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = {module}

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.rand({", ".join(map(str, shape))}{dt})]


def get_init_inputs():
    return []
'''


def main(argv: list[str] | None = None) -> int:
    ap = bench.script_parser(__doc__)
    a = ap.parse_args(argv)
    names = a.only or list(PROBLEMS)
    warmup, reps = bench.samples(a.quick)
    paths = bench.write_problems("kgen_bench_pool_", {n: problem_source(*PROBLEMS[n]) for n in names}, a.prebuild)
    for path in paths:
        bench.run(path, warmup=warmup, reps=reps, with_compile=not a.no_compile, per_call=a.per_call, csv=a.csv)
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
