"""kgen/geometry.py against PyTorch itself (CPU): pooling output sizes over a grid of every argument (1d/2d/3d, avg and
max, kernel, stride, padding, dilation, ceil_mode), the argument checks (what PyTorch rejects, kgen refuses), the
adaptive bins' floor/ceil boundaries, and convolution output sizes against F.conv2d."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from kgen.errors import Unsupported
from kgen.geometry import (adaptive_end, adaptive_max_window, adaptive_start, check_avg_pool3d_input, check_output,
                           check_pool_args, conv_out_size, pool_out_shape, pool_out_size, windows_disjoint)

SIZES = range(1, 12)


def pytorch_shape(op: str, nd: int, sizes, k, s, p, d, ceil_mode):
    """PyTorch's output spatial shape, or None when PyTorch rejects the arguments."""
    x = torch.zeros((1, 1) + tuple(sizes))
    try:  # PyTorch raises RuntimeError (or ValueError) for arguments it rejects; that is the property under test
        if op == "avg":
            y = getattr(F, f"avg_pool{nd}d")(x, k, s, p, ceil_mode=ceil_mode)
        else:
            y = getattr(F, f"max_pool{nd}d")(x, k, s, p, d, ceil_mode=ceil_mode)
    except (RuntimeError, ValueError):
        return None
    return tuple(y.shape[2:])


def kgen_shape(sizes, k, s, p, d, ceil_mode, op="max"):
    """kgen's output shape, or None when kgen refuses the arguments."""
    try:  # kgen's refusal is Unsupported, the counterpart of PyTorch's error
        check_pool_args("pool", k, s, p, d)
        if op == "avg" and len(sizes) == 3:
            check_avg_pool3d_input("pool", sizes, k)
        out = pool_out_shape(sizes, k, s, p, ceil_mode, d)
        check_output("pool", sizes, out)
    except Unsupported:
        return None
    return out


@pytest.mark.parametrize("op", ["avg", "max"])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pool1d_output_sizes_match_pytorch(op, ceil_mode):
    dils = (1, 2, 3) if op == "max" else (1,)
    for n, k, s, p, d in itertools.product(SIZES, range(1, 6), range(1, 4), range(0, 4), dils):
        want = pytorch_shape(op, 1, (n,), (k,), (s,), (p,), (d,), ceil_mode)
        assert kgen_shape((n,), (k,), (s,), (p,), (d,), ceil_mode) == want, (n, k, s, p, d, ceil_mode)


@pytest.mark.parametrize("op", ["avg", "max"])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pool2d_output_sizes_match_pytorch(op, ceil_mode):
    dils = ((1, 1), (2, 1), (1, 3)) if op == "max" else ((1, 1),)
    for (h, w), k, s, p, d in itertools.product([(1, 7), (5, 4), (9, 11), (12, 3)], [(1, 1), (2, 3), (3, 3), (4, 2)],
                                                [(1, 1), (2, 1), (2, 3)], [(0, 0), (1, 0), (1, 1), (2, 1)], dils):
        want = pytorch_shape(op, 2, (h, w), k, s, p, d, ceil_mode)
        assert kgen_shape((h, w), k, s, p, d, ceil_mode) == want, ((h, w), k, s, p, d, ceil_mode)


@pytest.mark.parametrize("op", ["avg", "max"])
def test_pool3d_output_sizes_match_pytorch(op):
    dils = ((1, 1, 1), (2, 1, 3)) if op == "max" else ((1, 1, 1),)
    for sizes, k, s, p, d, ceil_mode in itertools.product([(1, 4, 6), (5, 7, 3), (8, 8, 9)],
                                                          [(1, 2, 3), (2, 2, 2), (3, 1, 2)],
                                                          [(1, 1, 1), (2, 3, 1)], [(0, 0, 0), (1, 0, 1)], dils,
                                                          (False, True)):
        want = pytorch_shape(op, 3, sizes, k, s, p, d, ceil_mode)
        assert kgen_shape(sizes, k, s, p, d, ceil_mode, op) == want, (sizes, k, s, p, d, ceil_mode)


@pytest.mark.parametrize("size,k,s,p,d,ceil_mode", [
    (10, 3, 2, 1, 1, True), (7, 2, 2, 1, 1, True), (5, 3, 3, 1, 1, True), (6, 4, 3, 2, 1, True), (9, 2, 2, 1, 3, True),
])
def test_ceil_mode_drops_a_window_starting_in_the_padding(size, k, s, p, d, ceil_mode):
    want = F.max_pool1d(torch.zeros(1, 1, size), k, s, p, d, ceil_mode=ceil_mode).shape[-1]
    assert pool_out_size(size, k, s, p, ceil_mode, d) == want
    assert (want - 1) * s < size + p  # the rule itself: the last window starts inside the input or left padding


@pytest.mark.parametrize("k,d", [(1, 1), (2, 1), (3, 1), (2, 2), (3, 2), (4, 3)])
def test_disjoint_windows_hold_each_element_at_most_once(k, d):
    """windows_disjoint (the conv family's stage backward then reads one window per element) is sound: every element
    of every size, stride, padding and ceil_mode it accepts lies in at most one window, and that window is
    (h + p) // s; a stride one short of the reach makes some element shared."""
    reach = d * (k - 1) + 1
    for size, s, ceil_mode in itertools.product(range(max(reach - 1, 1), 14), range(1, 7), (False, True)):
        for p in range(0, min(k // 2, (reach - 1) // 2) + 1):
            if size + 2 * p < reach:
                continue
            out = pool_out_size(size, k, s, p, ceil_mode, d)
            held = [[o for o in range(out) if any(o * s - p + j * d == h for j in range(k))] for h in range(size)]
            if windows_disjoint((k,), (s,), (d,)):
                assert all(len(w) <= 1 for w in held), (size, k, s, p, d)
                assert all(w == [(h + p) // s] for h, w in enumerate(held) if w), (size, k, s, p, d)
    if reach > 1:
        assert not windows_disjoint((k,), (reach - 1,), (d,))
        out = pool_out_size(3 * reach, k, reach - 1, 0, False, d)
        held = [sum(o * (reach - 1) + j * d == h for o in range(out) for j in range(k)) for h in range(3 * reach)]
        assert max(held) == 2


@pytest.mark.parametrize("n", range(1, 14))
def test_adaptive_bins_match_pytorch(n):
    x = torch.arange(n, dtype=torch.float32).view(1, 1, n)
    for out in range(1, 2 * n + 2):
        last = F.adaptive_max_pool1d(x, out, return_indices=True)[1].flatten().tolist()  # argmax: the bin's last input
        first = F.adaptive_max_pool1d(-x, out, return_indices=True)[1].flatten().tolist()  # the bin's first input
        assert [adaptive_start(i, out, n) for i in range(out)] == first
        assert [adaptive_end(i, out, n) - 1 for i in range(out)] == last
        assert adaptive_max_window(out, n) == max(b - a + 1 for a, b in zip(first, last))
        means = F.adaptive_avg_pool1d(x, out).flatten()
        want = torch.tensor([sum(range(adaptive_start(i, out, n), adaptive_end(i, out, n))) /
                             (adaptive_end(i, out, n) - adaptive_start(i, out, n)) for i in range(out)])
        torch.testing.assert_close(means, want)


def test_conv_out_size_matches_conv2d():
    for (h, w), k, s, p, d in itertools.product([(5, 9), (8, 8), (13, 6)], [(1, 1), (3, 3), (2, 5)],
                                                [(1, 1), (2, 3)], [(0, 0), (1, 2)], [(1, 1), (2, 1)]):
        if any(n + 2 * pp - dd * (kk - 1) - 1 < 0 for n, kk, pp, dd in zip((h, w), k, p, d)):
            continue
        y = F.conv2d(torch.zeros(1, 2, h, w), torch.zeros(3, 2, *k), stride=s, padding=p, dilation=d)
        assert tuple(y.shape[2:]) == tuple(conv_out_size(n, kk, ss, pp, dd) for n, kk, ss, pp, dd in zip((h, w), k, s, p, d))
