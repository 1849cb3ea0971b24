"""Per-kernel GPU times of kgen's forward and training step for bench_conv2d_epilogue problems (torch.profiler),
to see where a problem's time goes. Usage (GPU): python tests/dev/profile_conv.py [--tf32] [--blocks] NAME [NAME ...]
(--blocks: names of the KernelBench-style blocks, `bench_conv2d_epilogue.py --blocks`; --eager: the problem's Model
too, so cuDNN's kernels for the same step sit beside kgen's). A NAME ending in .py is a problem file's path."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tests.bench.bench_conv2d_epilogue import problem_sources  # noqa: E402
from tests.helpers import generate_module  # noqa: E402


def print_kernel_times(step, title: str, rows: int = 14) -> None:
    """Runs step() 3 times to warm up, then prints the per-kernel GPU times of 5 more (torch.profiler)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print(f"== {title}: 5 training steps")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=70))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--blocks", action="store_true", help="NAMEs are KernelBench-style blocks")
    ap.add_argument("--eager", action="store_true", help="also profile the problem's Model (cuDNN and eager ops)")
    a = ap.parse_args()
    sources = problem_sources(a.blocks)
    torch.backends.cudnn.allow_tf32 = a.tf32
    for name in a.names:
        source = Path(name).read_text() if name.endswith(".py") else sources[name]
        name = Path(name).stem if name.endswith(".py") else name
        ns = generate_module(source, name)
        user: dict = {}
        exec(source, user)
        x = user["get_inputs"]()[0].cuda().requires_grad_(True)
        for label, cls in [("kgen", ns["ModelNew"])] + ([("eager", user["Model"])] if a.eager else []):
            model = cls(*user["get_init_inputs"]()).cuda()

            def step():
                y = model(x)
                y.backward(torch.ones_like(y))
            print_kernel_times(step, f"{name}, {label} (TF32 {'on' if a.tf32 else 'off'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
