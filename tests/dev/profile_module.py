"""Per-kernel GPU time of generated modules' forward and training step, TF32 off and allowed, from torch.profiler:
which kernel a mode's time goes to. Any family; the modules are built first (one process each).
Usage (GPU): python tests/dev/profile_module.py PROBLEM.py LABEL=model_new.py [LABEL=model_new.py ...] [--reps N]"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tests.device.prebuild import build_labelled  # noqa: E402


def kernel_table(fn, reps: int) -> list[tuple[str, int, float]]:
    """(kernel, calls a rep, GPU microseconds a rep) of `reps` calls of fn after a warm-up, largest first."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.count // reps, e.device_time_total / reps) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[2])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problem")
    ap.add_argument("modules", nargs="+", help="LABEL=path/to/model_new.py")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    mods = build_labelled(a.modules)
    user: dict = {"__name__": "problem"}
    exec(compile(Path(a.problem).read_text(), a.problem, "exec"), user)
    init = user["get_init_inputs"]()
    with torch.device("meta"):
        shape = user["get_inputs"]()[0].shape
    x = torch.randn(shape, device="cuda", requires_grad=True)
    print(f"{a.problem} on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for label, path in mods:
        ns: dict = {"__name__": f"profiled_{label}"}
        exec(compile(Path(path).read_text(), path, "exec"), ns)
        m = ns["ModelNew"](*init).cuda()
        for tf32 in (False, True):
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32

            def fwd():
                with torch.no_grad():
                    m(x)

            def step():
                m(x).sum().backward()

            for what, fn in (("fwd", fwd), ("step", step)):
                rows = kernel_table(fn, a.reps)
                total = sum(r[2] for r in rows)
                print(f"{label} TF32 {'allowed' if tf32 else 'off'} {what}: {total:8.1f} us of GPU time a call")
                for key, count, us in rows:
                    print(f"    {us:8.1f} us  x{count}  {key[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
