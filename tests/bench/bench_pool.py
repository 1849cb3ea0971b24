"""Benchmark the pool family at realistic sizes (issue 8; every input >= 256 MB): each problem file is written into a
temporary folder and timed by `kgen.bench` (eager, torch.compile and kgen; forward and forward+backward; the memory
floor from the family's traffic() and the copy bandwidth of the same run), appending rows to a CSV.

Usage (GPU): python tests/bench/bench_pool.py [--quick] [--no-compile] [--per-call] [--only NAME ...] [--csv docs/bench.csv]
             [--random N [--seed S]]: N random in-scope problems (the family's test generator) at benchmark sizes
             (random_benchmark_sources), then one summary line each: where kgen loses to eager or torch.compile, or
             sits far from the memory floor, on problems nobody hand-picked.
--quick: fewer timing samples (2 warm-up, 5 samples).
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import bench  # noqa: E402
from kgen.families.pool import DTYPES  # noqa: E402

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


# spatial sides a benchmark-sized draw grows to (never below the drawn ones): 1-d lengths; 2-d sides; 3-d depths, sides
SIDES = {1: (128, 1000, 4096, 16384, 65536), 2: (28, 32, 56, 64, 112, 128, 224, 256, 512),
         3: ((8, 16, 32, 64), (16, 32, 56, 64, 112, 128))}
CHANNELS = (3, 16, 32, 64, 96, 128, 256)


def benchmark_sized(case: tuple, rng: random.Random) -> tuple:
    """A drawn case (tests/test_pool.py's random_case) at a benchmark's size: each spatial side grown to one of SIDES
    (kept where the draw's is larger), then channels from CHANNELS and a batch that make the input 16-512 MB
    (log-uniform); an unbatched draw takes it all in channels. Its arguments are kept as drawn."""
    op, nd, shape, kw, form, index, dtype = case
    size = [max(s, rng.choice(SIDES[nd] if nd < 3 else SIDES[3][i > 0])) for i, s in enumerate(shape[-nd:])]
    planes = max(1, round(math.exp(rng.uniform(math.log(16e6), math.log(512e6))) / DTYPES[dtype].size / math.prod(size)))
    batched = len(shape) == nd + 2
    c = min(planes, rng.choice(CHANNELS)) if batched else planes
    lead = (max(1, round(planes / c)), c) if batched else (c,)
    return op, nd, lead + tuple(size), kw, form, index, dtype


def random_benchmark_sources(n: int, seed: int) -> dict[str, str]:
    """name -> problem text: n draws of the family's random in-scope generator at benchmark sizes (benchmark_sized),
    each redrawn until PyTorch takes the grown shape (a ceil_mode or dilated window may stop fitting)."""
    from tests.test_pool import case_ok, pool_problem, random_case
    rng = random.Random(f"bench:{seed}")
    out = {}
    while len(out) < n:
        case = benchmark_sized(random_case(rng), rng)
        if case_ok(*case[:4]):
            out[f"p{seed}_{len(out)}"] = pool_problem(*case)
    return out


def describe(source: str) -> str:
    """One line of a problem: its forward's expression and input."""
    init = [ln.strip() for ln in source.splitlines() if ln.strip().startswith("self.pool = ")]
    body = source.split("def forward(self, x):\n", 1)[1].split("\n", 1)[0].strip()
    x = source.split("def get_inputs():\n", 1)[1].split("\n", 1)[0].strip()
    return "; ".join(init + [body, x.removeprefix("return [").removesuffix("]")])


def main(argv: list[str] | None = None) -> int:
    ap = bench.script_parser(__doc__)
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="time N random in-scope problems at benchmark sizes instead (random_benchmark_sources)")
    ap.add_argument("--seed", type=int, default=1, help="the --random draws' seed")
    a = ap.parse_args(argv)
    if a.random:
        return bench.run_draws(random_benchmark_sources(a.random, a.seed), a, [False], describe, "kgen_bench_pool_rand_")
    warmup, reps = bench.samples(a.quick)
    sources = bench.pick({n: problem_source(*row) for n, row in PROBLEMS.items()}, a.only)
    paths = bench.write_problems("kgen_bench_pool_", sources, a.prebuild)
    for path in paths:
        bench.run(path, warmup=warmup, reps=reps, with_compile=not a.no_compile, per_call=a.per_call, csv=a.csv)
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
