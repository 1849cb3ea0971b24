"""Issue 9's error report: for each bench_conv2d_epilogue problem (at a small batch), kgen's output error in both
cuDNN TF32 modes against a float64 reference, against eager with TF32 off and against default eager (TF32 on), and
whether each pair passes allclose at atol = rtol = 1e-4 (KernelBench's float32 test). Also one experiment: which
rounding of the operands to TF32 (to nearest, or truncation) explains cuDNN's TF32 convolution output.

Usage (GPU): python tests/bench/conv_error_report.py [--batch 2] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kgen.bench import load_generated  # noqa: E402
from kgen.problem import load_problem  # noqa: E402
from tests.bench.bench_conv2d_epilogue import PROBLEMS, problem_source  # noqa: E402

TOL = 1e-4


def rna(t: torch.Tensor) -> torch.Tensor:
    """TF32 to nearest, ties away (cvt.rna.tf32.f32), for finite values."""
    return ((t.float().contiguous().view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


def trunc(t: torch.Tensor) -> torch.Tensor:
    """TF32 by dropping the 13 low mantissa bits."""
    return (t.float().contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def err(a: torch.Tensor, b: torch.Tensor) -> tuple[float, bool]:
    """(max |a - b| / (1 + |b|) as allclose weighs it, whether allclose(a, b, 1e-4, 1e-4) holds)."""
    a, b = a.double(), b.double()
    return ((a - b).abs() / (1 + b.abs())).max().item(), bool(torch.allclose(a, b, atol=TOL, rtol=TOL))


def set_tf32(on: bool) -> None:
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on


def report(name: str, batch: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="kgen_err_"))
    conv, body, init, shape = PROBLEMS[name]
    path = folder / f"{name}.py"
    path.write_text(problem_source(conv, body, init, (batch,) + tuple(shape[1:])))
    loaded = load_problem(path)
    _, ns = load_generated(loaded)
    user = loaded.namespace
    torch.manual_seed(0)
    model = user["Model"](*user["get_init_inputs"]()).cuda()
    new = ns["ModelNew"](*user["get_init_inputs"]()).cuda()
    new.load_state_dict(model.state_dict())
    torch.manual_seed(1)
    x = torch.randn((batch,) + tuple(shape[1:]), device="cuda")
    with torch.no_grad():
        ref64 = model.double()(x.double())
        model.float()
        set_tf32(False)
        eager_off, kgen_off = model(x), new(x)
        set_tf32(True)
        eager_on, kgen_on = model(x), new(x)
        set_tf32(False)
    rows = [("kgen TF32 off", kgen_off), ("kgen TF32 on", kgen_on), ("eager TF32 off", eager_off),
            ("eager TF32 on", eager_on)]
    print(f"{name} (batch {batch}): max |a - b| / (1 + |b|), and allclose at 1e-4")
    for label, out in rows:
        cells = []
        for ref_label, ref in (("float64", ref64), ("eager off", eager_off), ("eager on", eager_on)):
            if out is ref:
                continue
            e, ok = err(out, ref)
            cells.append(f"vs {ref_label} {e:.2e} {'pass' if ok else 'FAIL'}")
        print(f"  {label:15s} " + "; ".join(cells))


def rounding_experiment() -> None:
    """cuDNN's TF32 output against float64 convolutions of the operands rounded each way."""
    torch.manual_seed(2)
    x = torch.randn(8, 32, 64, 64, device="cuda")
    w = torch.randn(64, 32, 3, 3, device="cuda") * 0.1
    set_tf32(True)
    with torch.no_grad():
        y = F.conv2d(x, w, padding=1)
    set_tf32(False)
    print("cuDNN TF32 conv2d (8x32x64x64, 64x32x3x3) against float64 conv2d of operands rounded to TF32:")
    for label, fn in (("to nearest (cvt.rna)", rna), ("truncated", trunc), ("not rounded", lambda t: t)):
        ref = F.conv2d(fn(x).double(), fn(w).double(), padding=1)
        d = (y.double() - ref).abs()
        print(f"  {label:22s} max {d.max().item():.3e}  mean {d.mean().item():.3e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    for name in a.only or list(PROBLEMS):
        report(name, a.batch)
    rounding_experiment()
    return 0


if __name__ == "__main__":
    sys.exit(main())
