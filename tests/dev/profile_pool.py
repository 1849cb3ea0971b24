"""Per-kernel GPU times of kgen's training step for bench_pool problems (torch.profiler): where a pooling problem's
step goes (the forward that saves argmax offsets, the backward). Usage (GPU): python tests/dev/profile_pool.py NAME..."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.bench.bench_pool import PROBLEMS, problem_source  # noqa: E402
from tests.dev.profile_conv import print_kernel_times  # noqa: E402
from tests.helpers import generate_module  # noqa: E402


def training_step(source: str, name: str):
    """(model, x, step): the generated ModelNew of a problem, its input (requires grad), and one training step with a
    fixed random full-size grad_y (x's gradient is reset each step)."""
    ns = generate_module(source, name)
    user: dict = {}
    exec(source, user)
    model = ns["ModelNew"](*user["get_init_inputs"]()).cuda()
    x = user["get_inputs"]()[0].cuda().requires_grad_(True)
    with torch.no_grad():
        gy = torch.rand_like(model(x))

    def step():
        x.grad = None
        model(x).backward(gy)
    return model, x, step


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", choices=list(PROBLEMS))
    a = ap.parse_args()
    for name in a.names:
        _, _, step = training_step(problem_source(*PROBLEMS[name]), name)
        print_kernel_times(step, f"{name} (random full-size grad_y)", rows=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
