"""The generated module in the situations real users put it in (GPU): CUDA graph capture of a forward and of a
whole training step, torch.compile(mode="reduce-overhead"), a non-default stream with a pending producer, a
second GPU (cuda:1 tensors, torch.cuda.device(1)), and torch.inference_mode (as some harnesses time) followed by
training. Every registered family's HARDENING problem."""

import pytest
import torch

from tests.families import all_families, setup_problem

FAMILY_PROBLEMS = {fc.name: fc.hardening for fc in all_families()}
FAMS = sorted(FAMILY_PROBLEMS)
TOL = dict(atol=1e-4, rtol=1e-4)


def setup(family, device="cuda"):
    return setup_problem(FAMILY_PROBLEMS[family], device)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_inference_mode_then_a_training_step(family):
    """A forward under torch.inference_mode (inference tensors in and out), then the same module trained: nothing
    made under inference mode may reach autograd (PyTorch refuses to save inference tensors for backward)."""
    model, new, shape = setup(family)
    x = torch.randn(shape, device="cuda")
    with torch.inference_mode():
        xi = x.clone()
        y = new(xi)
        y2 = new(xi)  # a second call: whatever the first one cached
    assert y.is_inference()
    with torch.no_grad():
        ref = model(x)
    torch.testing.assert_close(y, ref, **TOL)
    torch.testing.assert_close(y2, ref, **TOL)
    xg = x.clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    out, ref = new(xg), model(xr)
    torch.testing.assert_close(out, ref, **TOL)
    g = torch.randn_like(ref)
    out.backward(g)
    ref.backward(g)
    torch.testing.assert_close(xg.grad, xr.grad, **TOL)
    for p, pr in zip(new.parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, pr.grad, **TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_cuda_graph_capture_of_forward_and_training_step(family):
    model, new, shape = setup(family)
    static_x = torch.randn(shape, device="cuda", requires_grad=True)
    # warm up on a side stream, as torch.cuda.graphs documents
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            new(static_x).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    with torch.no_grad():
        g_fwd = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_fwd):
            static_y = new(static_x)
    for p in new.parameters():
        p.grad = None
    static_x.grad = None
    g_step = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_step):
        step_y = new(static_x)
        step_y.sum().backward()
    for _ in range(2):  # replays read the new contents of static_x
        x = torch.randn(shape, device="cuda")
        static_x.data.copy_(x)
        g_fwd.replay()
        g_step.replay()
        xr = x.clone().requires_grad_(True)
        for p in model.parameters():
            p.grad = None
        ref = model(xr)
        ref.sum().backward()
        torch.testing.assert_close(static_y, ref, **TOL)
        torch.testing.assert_close(step_y, ref, **TOL)
        torch.testing.assert_close(static_x.grad, xr.grad, **TOL)
        for p, pr in zip(new.parameters(), model.parameters()):
            torch.testing.assert_close(p.grad, pr.grad, **TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_compile_reduce_overhead(family):
    model, new, shape = setup(family)
    compiled = torch.compile(new, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        x = torch.randn(shape, device="cuda")
        torch.testing.assert_close(compiled(x).clone(), model(x), **TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_non_default_stream_with_a_pending_producer(family):
    """The input is written on a side stream behind a long sleep; the module, called on that stream, must run
    after it (launching on the default stream would read the input before it is written)."""
    model, new, shape = setup(family)
    src = torch.randn(shape, device="cuda")
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        x = torch.empty(shape, device="cuda")
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the producer writes x
        x.copy_(src)
        y = new(x)
    s.synchronize()
    torch.testing.assert_close(y, model(src), **TOL)


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.parametrize("family", FAMS)
def test_second_gpu(family):
    model, new, shape = setup(family, "cuda:1")
    x = torch.randn(shape, device="cuda:1", requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    y = new(x)  # current device is cuda:0: the op must follow its inputs to cuda:1
    assert y.device == torch.device("cuda:1")
    ref = model(xr)
    torch.testing.assert_close(y, ref, **TOL)
    y.sum().backward()
    ref.sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, **TOL)
    with torch.cuda.device(1):
        torch.testing.assert_close(new(x.detach()), ref.detach(), **TOL)
    if list(new.parameters()):  # parameters on cuda:1, input on cuda:0: a clear error, not a wrong answer
        with pytest.raises(RuntimeError, match="move the module and its inputs to one GPU"):
            new(x.detach().to("cuda:0"))
