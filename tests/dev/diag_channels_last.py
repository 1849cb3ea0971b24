"""Diagnose channels_last gradients of the avg_pool2d hardening problem: ours vs PyTorch (CUDA channels_last,
CUDA contiguous) vs a float64 CPU reference."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tests.helpers import reference_and_new  # noqa: E402
from tests.test_hardening import FAMILY_PROBLEMS  # noqa: E402

model, new, ns, user = reference_and_new(FAMILY_PROBLEMS["avg_pool2d"])
base = torch.rand(3, 4, 21, 24, device="cuda")
g = torch.randn(3, 4, 11, 12, device="cuda")
grads = {}
for label, fmt, gfmt in [("ours_cl", torch.channels_last, torch.channels_last), ("ours_contig", torch.contiguous_format, torch.contiguous_format),
                         ("ours_x_cl_g_contig", torch.channels_last, torch.contiguous_format),
                         ("ours_x_contig_g_cl", torch.contiguous_format, torch.channels_last)]:
    x = base.clone().to(memory_format=fmt).requires_grad_(True)
    new(x).backward(g.clone().to(memory_format=gfmt))
    grads[label] = x.grad.float().cpu()
for label, fmt in [("torch_cl", torch.channels_last), ("torch_contig", torch.contiguous_format)]:
    x = base.clone().to(memory_format=fmt).requires_grad_(True)
    F.avg_pool2d(x, 3, 2, 1).backward(g.clone().to(memory_format=fmt))
    grads[label] = x.grad.float().cpu()
x = base.double().cpu().requires_grad_(True)
F.avg_pool2d(x, 3, 2, 1).backward(g.double().cpu())
ref = x.grad.float()
for k, v in grads.items():
    print(f"diag {k:<20} max|diff| vs float64 CPU: {(v - ref).abs().max().item():.3e}")
