"""avg_pool2d family: spec (CPU) and kernels against PyTorch (GPU), forward and backward."""

import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kgen.errors import KgenError
from kgen.families import avg_pool2d
from kgen.problem import load_problem
from kgen.geometry import pool_out_size
from kgen.spec import match
from tests.helpers import avg_pool_problem, generate_module, poison_cuda_allocator, write_problem

# (input shape, AvgPool2d kwargs, functional form)
CONFIGS = [
    ((2, 3, 37, 41), dict(kernel_size=3, stride=2, padding=1), False),  # stride != kernel, padding, W odd (scalar path)
    ((2, 4, 33, 29), dict(kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), ceil_mode=True), False),
    ((3, 2, 30, 32), dict(kernel_size=4, stride=4, padding=2, count_include_pad=False), False),
    ((1, 5, 20, 22), dict(kernel_size=3, stride=3, divisor_override=7), False),  # batch 1, W % 4 == 2
    ((2, 3, 40, 48), dict(kernel_size=5, stride=1), False),  # overlapping windows
    ((1, 1, 7, 9), dict(kernel_size=2), False),  # odd sizes, stride None
    ((2, 3, 15, 16), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), False),
    ((2, 2, 19, 21), dict(kernel_size=3, stride=1, padding=1, count_include_pad=False), True),  # F.avg_pool2d
    ((1, 2, 100, 2048), dict(kernel_size=11), False),  # the bundled problem's window on a small batch
    ((1, 2, 12, 5000), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), False),  # several column tiles
]


def ids(cfg):
    shape, kw, functional = cfg
    return ("F_" if functional else "") + "x".join(map(str, shape)) + "_" + "_".join(f"{k}{v}" for k, v in kw.items())


# ------------------------------------------------------------------------------------------------------- CPU tier


@pytest.mark.parametrize("size,k,s,ceil_mode", [
    (size, k, s, c) for size, k, s, c in itertools.product(range(3, 14), range(1, 5), range(1, 4), (False, True)) if k <= size
])
def test_output_size_matches_pytorch(size, k, s, ceil_mode):
    for p in range(0, k // 2 + 1):
        want = F.avg_pool2d(torch.zeros(1, 1, size, size + 1), k, s, p, ceil_mode=ceil_mode).shape[2:]
        assert (pool_out_size(size, k, s, p, ceil_mode), pool_out_size(size + 1, k, s, p, ceil_mode)) == tuple(want)


@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_spec_matches_pytorch_shapes(cfg):
    shape, kw, functional = cfg
    problem = load_problem(write_problem(avg_pool_problem(shape, kw, functional)))
    family, spec = match(problem)
    assert family is avg_pool2d
    want = nn.AvgPool2d(**kw)(torch.rand(shape)).shape
    assert (shape[1], spec.HO, spec.WO) == tuple(want[1:])
    assert (spec.C, spec.H, spec.W) == shape[1:]


def test_module_and_functional_forms_give_one_spec():
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False, divisor_override=5)
    a = match(load_problem(write_problem(avg_pool_problem((2, 3, 17, 19), kw, False))))[1]
    b = match(load_problem(write_problem(avg_pool_problem((2, 3, 17, 19), kw, True))))[1]
    assert a == b


@pytest.mark.parametrize("kw,message", [
    (dict(kernel_size=3, padding=2), "half"),
    (dict(kernel_size=3, divisor_override=0), "divisor"),
    (dict(kernel_size=40), "too small"),
])
def test_invalid_arguments_refused_at_generate_time(kw, message):
    with pytest.raises(KgenError, match=message):
        match(load_problem(write_problem(avg_pool_problem((1, 2, 20, 20), kw))))


def test_tiling_covers_the_bundled_row_with_one_thread_per_vector():
    spec = match(load_problem("kgen/problems/avg_pool2d.py"))[1]
    t = avg_pool2d.context(spec)
    assert (t["vec"], t["f_rows"], t["f_cols"], t["f_threads"]) == (4, 1, 186, 512)


# ------------------------------------------------------------------------------------------------------- GPU tier


def check_against_pytorch(ns, shape, kw, functional, batch=None):
    torch.manual_seed(0)
    init = ns["get_init_inputs"]()
    model = ns["ModelNew"](*init).cuda()
    ref = (lambda t: F.avg_pool2d(t, **kw)) if functional else nn.AvgPool2d(**kw)
    n = shape[0] if batch is None else batch
    x = torch.rand((n,) + tuple(shape[1:]), device="cuda", requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y_ref = ref(x_ref)
    poison_cuda_allocator(2 * y_ref.numel() + 2 * x.numel() + 1024)
    y = model(x)
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)
    g = torch.randn_like(y_ref)
    y_ref.backward(g)
    poison_cuda_allocator(2 * x.numel() + 1024)
    y.backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-4, rtol=1e-4)
    assert not torch.isnan(y).any() and not torch.isnan(x.grad).any()


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_forward_backward_match_pytorch(cfg):
    shape, kw, functional = cfg
    ns = generate_module(avg_pool_problem(shape, kw, functional))
    check_against_pytorch(ns, shape, kw, functional)


@pytest.mark.gpu
def test_batch_is_a_runtime_value():
    shape, kw, functional = CONFIGS[0]
    ns = generate_module(avg_pool_problem(shape, kw, functional))
    check_against_pytorch(ns, shape, kw, functional, batch=5)
    y = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()(torch.rand((0,) + shape[1:], device="cuda"))
    assert y.shape == (0,) + tuple(nn.AvgPool2d(**kw)(torch.rand(shape)).shape[1:])


@pytest.mark.gpu
def test_opcheck_and_compile_fullgraph():
    shape, kw, functional = CONFIGS[1]
    ns = generate_module(avg_pool_problem(shape, kw, functional))
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    x = torch.rand(shape, device="cuda", requires_grad=True)
    op = getattr(torch.ops, ns["KGEN_NAMESPACE"]).forward
    torch.library.opcheck(op, (x,))
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.slow
def test_bundled_problem_full_size():
    """16x64x2048x2048 (4.3 G elements): forward against PyTorch at full size; backward against PyTorch's
    backward on batch slices (PyTorch's own backward fails at this size)."""
    ns = generate_module(open("kgen/problems/avg_pool2d.py").read(), name="avg_pool2d")
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    ref = nn.AvgPool2d(11)
    x = torch.rand(16, 64, 2048, 2048, device="cuda", requires_grad=True)
    y = model(x)
    with torch.no_grad():
        torch.testing.assert_close(y, ref(x), atol=1e-4, rtol=1e-4)
    g = torch.randn_like(y)
    y.backward(g)
    del y
    for b in range(0, 16, 4):
        xs = x.detach()[b:b + 4].clone().requires_grad_(True)
        ref(xs).backward(g[b:b + 4])
        torch.testing.assert_close(x.grad[b:b + 4], xs.grad, atol=1e-4, rtol=1e-4)
        del xs


@pytest.mark.gpu
@pytest.mark.slow
def test_output_over_2_31_elements():
    """Stride-1 pooling whose output has more than 2^31 elements, forward and backward, against PyTorch on slices."""
    shape, kw = (2, 64, 4096, 4100), dict(kernel_size=2, stride=1)
    ns = generate_module(avg_pool_problem(shape, kw))
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    ref = nn.AvgPool2d(**kw)
    x = torch.rand(shape, device="cuda", requires_grad=True)
    y = model(x)
    assert y.numel() > 2**31
    g = torch.randn_like(y)
    y.backward(g)
    for b in range(shape[0]):
        xs = x.detach()[b:b + 1].clone().requires_grad_(True)
        ys = ref(xs)
        torch.testing.assert_close(y[b:b + 1].detach(), ys, atol=1e-4, rtol=1e-4)
        ys.backward(g[b:b + 1])
        torch.testing.assert_close(x.grad[b:b + 1], xs.grad, atol=1e-4, rtol=1e-4)
        del xs, ys


# ----------------------------------------------------------------------------------------- contract (tests/families.py)

CASES = [(ids(c), avg_pool_problem(*c)) for c in CONFIGS]
HARDENING = avg_pool_problem((3, 4, 21, 24), dict(kernel_size=3, stride=2, padding=1))


def random_problem(rng):
    kh, kw = rng.randint(1, 7), rng.randint(1, 7)
    sh, sw = rng.randint(1, 4), rng.randint(1, 4)
    ph, pw = rng.randint(0, kh // 2), rng.randint(0, kw // 2)
    h, w = rng.randint(kh, 70), rng.randint(kw, 300)
    args = dict(kernel_size=(kh, kw), stride=(sh, sw), padding=(ph, pw), ceil_mode=rng.random() < 0.4,
                count_include_pad=rng.random() < 0.5)
    if rng.random() < 0.2:
        args["divisor_override"] = rng.randint(1, 9)
    return avg_pool_problem((rng.randint(1, 3), rng.randint(1, 5), h, w), args, functional=rng.random() < 0.3)
