"""PyTorch's N-d output-size rules for convolution, pooling and adaptive pooling: one place, used by every family.

Each function works on one spatial dimension; the ``*_shape`` forms map it over a tuple of dimensions. Argument
checks raise ``Unsupported`` with PyTorch's own reason, at generate time. ``tests/test_geometry.py`` checks every
rule against PyTorch itself over a grid of arguments.
"""

from __future__ import annotations

from typing import Sequence

from kgen.errors import Unsupported


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def conv_out_size(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    """Conv output length (aten/src/ATen/native/ConvUtils.h)."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def conv_same_padding(k: int, d: int) -> tuple[int, int]:
    """padding='same': total d*(k-1), the odd element on the right (PyTorch pads the right side extra)."""
    total = d * (k - 1)
    return total // 2, total - total // 2


def pool_out_size(size: int, k: int, s: int, p: int, ceil_mode: bool, d: int = 1) -> int:
    """Pooling output length (aten pooling_output_shape), with ceil_mode's rule that a last window starting in the
    right padding is dropped."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def pool_out_shape(sizes: Sequence[int], k: Sequence[int], s: Sequence[int], p: Sequence[int], ceil_mode: bool,
                   d: Sequence[int] | None = None) -> tuple[int, ...]:
    d = d or (1,) * len(sizes)
    return tuple(pool_out_size(n, *a, ceil_mode, dd) for n, *a, dd in zip(sizes, k, s, p, d))


def windows_disjoint(k: Sequence[int], s: Sequence[int], d: Sequence[int]) -> bool:
    """No input element lies in two pooling windows: in every dimension the stride is at least the window's reach
    (d * (k - 1) + 1). Sufficient, not necessary (dilated windows can interleave without sharing an element); a
    backward that gathers may then look at the one window (h + p) // s only."""
    return all(ss >= dd * (kk - 1) + 1 for kk, ss, dd in zip(k, s, d))


def adaptive_start(i: int, out: int, size: int) -> int:
    """First input index of adaptive bin i: floor(i * size / out)."""
    return (i * size) // out


def adaptive_end(i: int, out: int, size: int) -> int:
    """One past the last input index of adaptive bin i: ceil((i + 1) * size / out)."""
    return -(-((i + 1) * size) // out)


def adaptive_max_window(out: int, size: int) -> int:
    """The widest adaptive bin, in input elements."""
    return max(adaptive_end(i, out, size) - adaptive_start(i, out, size) for i in range(out))


def check_pool_args(what: str, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                    d: Sequence[int] | None = None) -> None:
    """PyTorch's argument checks for avg/max pooling (aten pool2d_shape_check), with its reasons."""
    d = d or (1,) * len(k)
    if min(k) <= 0:
        raise Unsupported(f"{what}: kernel_size must be greater than zero, got {tuple(k)}")
    if min(s) <= 0:
        raise Unsupported(f"{what}: stride must be greater than zero, got {tuple(s)}")
    if min(d) <= 0:
        raise Unsupported(f"{what}: dilation must be greater than zero, got {tuple(d)}")
    if min(p) < 0:
        raise Unsupported(f"{what}: padding must be non-negative, got {tuple(p)}")
    if any(pp > kk // 2 for kk, pp in zip(k, p)):  # PyTorch compares with the kernel size, dilation or not
        raise Unsupported(f"{what}: padding {tuple(p)} must be at most half the kernel size {tuple(k)} (PyTorch: pad "
                          "should be smaller than or equal to half of kernel size)")


def check_avg_pool3d_input(what: str, sizes: Sequence[int], k: Sequence[int]) -> None:
    """avg_pool3d's extra check (aten pool3d_shape_check with check_input_size): no input dimension smaller than the
    kernel, padding or not."""
    if any(n < kk for n, kk in zip(sizes, k)):
        raise Unsupported(f"{what}: input {tuple(sizes)} is smaller than the kernel {tuple(k)} in some dimension "
                          "(PyTorch: input image smaller than kernel size); use a larger input or a smaller kernel")


def check_output(what: str, sizes: Sequence[int], out: Sequence[int]) -> None:
    if min(out) <= 0:
        raise Unsupported(f"{what}: output size would be {tuple(out)} for input size {tuple(sizes)} (PyTorch: output "
                          "size is too small); use a larger input or a smaller kernel")
