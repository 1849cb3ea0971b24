"""Per-kernel GPU times of kgen's training step for bench_pool problems (torch.profiler): where a pooling problem's
step goes (the forward that saves argmax offsets, the backward). Usage (GPU): python tests/dev/profile_pool.py NAME..."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tests.bench.bench_pool import PROBLEMS, problem_source  # noqa: E402
from tests.helpers import generate_module  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", choices=list(PROBLEMS))
    a = ap.parse_args()
    for name in a.names:
        source = problem_source(*PROBLEMS[name])
        ns = generate_module(source, name)
        user: dict = {}
        exec(source, user)
        model = ns["ModelNew"]().cuda()
        x = user["get_inputs"]()[0].cuda().requires_grad_(True)
        gy = None
        for _ in range(3):
            y = model(x)
            gy = torch.rand_like(y) if gy is None else gy
            y.backward(gy)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                x.grad = None
                model(x).backward(gy)
            torch.cuda.synchronize()
        print(f"== {name}: 5 training steps (random full-size grad_y)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=70))
    return 0


if __name__ == "__main__":
    sys.exit(main())
