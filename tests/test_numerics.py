"""GPU numerics over every registered family: for each family's CASES, the generated module against the problem's
own Model on fresh random inputs (never zeros), forward and every gradient (input and parameters), within
KernelBench's tolerances for the input dtype; outputs poisoned first so unwritten elements show; integer outputs
(pooling indices) must be equal. Each family's own test file adds its special cases."""

import pytest
import torch

from tests.families import TOLERANCE, all_cases
from tests.helpers import poison_cuda_allocator, reference_and_new

CASES = all_cases()


def outputs(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def compare(source: str, seed: int = 0):
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model, new, ns, user = reference_and_new(source, seed=seed)
    with torch.device("meta"):
        meta = user["get_inputs"]()[0]
    atol, rtol = TOLERANCE[meta.dtype]
    torch.manual_seed(seed + 1)
    x = torch.randn(meta.shape, device="cuda").to(meta.dtype).requires_grad_(True)
    xr = x.detach().clone().requires_grad_(True)
    ref = outputs(model(xr))
    poison_cuda_allocator(4 * x.numel() + 4096)
    out = outputs(new(x))
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
        if r.is_floating_point():
            torch.testing.assert_close(o, r, atol=atol, rtol=rtol, equal_nan=True)
        else:
            assert torch.equal(o, r), "integer outputs (indices) differ from PyTorch's"
    with torch.no_grad():  # inference may take other kernels (conv2d_epilogue folds a pooling stage in)
        poison_cuda_allocator(4 * x.numel() + 4096)
        for o, r in zip(outputs(new(x)), ref):
            if r.is_floating_point():
                torch.testing.assert_close(o, r.detach(), atol=atol, rtol=rtol, equal_nan=True)
    grads = [(o, r, torch.randn_like(r)) for o, r in zip(out, ref) if r.is_floating_point() and r.requires_grad]
    if not grads:  # e.g. a pool that returns only its indices: nothing to differentiate
        return new, x
    torch.autograd.backward([r for _, r, _ in grads], [g for _, _, g in grads])
    poison_cuda_allocator(4 * x.numel() + 4096)
    torch.autograd.backward([o for o, _, _ in grads], [g for _, _, g in grads])
    torch.testing.assert_close(x.grad, xr.grad, atol=atol, rtol=rtol, equal_nan=True)
    for (name, p), (_, pr) in zip(new.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.grad, pr.grad, atol=atol, rtol=rtol, msg=lambda m: f"{name}: {m}")
    return new, x


@pytest.mark.gpu
@pytest.mark.parametrize("family,cid,source", CASES, ids=[f"{f}-{c}" for f, c, _ in CASES])
def test_forward_and_every_gradient_match_pytorch(family, cid, source):
    compare(source)
