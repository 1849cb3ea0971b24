"""Family avg_pool2d: a lone 2D average pool (nn.AvgPool2d or F.avg_pool2d), every argument of nn.AvgPool2d.

Scope: float32 NCHW input [N, C, H, W] (N at run time); kernel_size, stride (None = kernel), padding (int or pair),
ceil_mode, count_include_pad, divisor_override. Output sizes follow PyTorch's rule, ceil_mode's dropped last
window included; argument combinations PyTorch rejects are rejected at generate time with PyTorch's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kgen.errors import Unsupported
from kgen.problem import Problem
from kgen.geometry import ceil_div, pool_out_size
from kgen.ops import Op

NAME = "avg_pool2d"
TEMPLATES = {"kernel.cu": "avg_pool2d/kernel.cu.j2", "binding.cpp": "avg_pool2d/binding.cpp.j2"}
MODEL_TEMPLATE = "avg_pool2d/model_new.py.j2"


@dataclass(frozen=True)
class Spec:
    C: int
    H: int
    W: int
    HO: int
    WO: int
    KH: int
    KW: int
    SH: int
    SW: int
    PH: int
    PW: int
    ceil_mode: bool
    count_include_pad: bool
    divisor_override: int | None


def validate(spec_args: dict) -> None:
    """PyTorch's own argument checks for avg_pool2d, with its meaning, raised at generate time."""
    k, s, p = (spec_args["KH"], spec_args["KW"]), (spec_args["SH"], spec_args["SW"]), (spec_args["PH"], spec_args["PW"])
    if min(k) <= 0:
        raise Unsupported(f"avg_pool2d kernel_size must be positive, got {k}")
    if min(s) <= 0:
        raise Unsupported(f"avg_pool2d stride must be positive, got {s}")
    if min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise Unsupported(f"avg_pool2d padding {p} must be non-negative and at most half the kernel {k} (PyTorch: pad should be at most half of effective kernel size)")
    if spec_args["divisor_override"] is not None and spec_args["divisor_override"] == 0:
        raise Unsupported("avg_pool2d divisor_override must be non-zero")


def spec_from(op: Op) -> Spec:
    if len(op.in_shape) != 4:
        raise Unsupported(f"{op.where}: avg_pool2d on a {len(op.in_shape)}-d input; kgen's avg_pool2d family takes NCHW (4-d) input")
    _, C, H, W = op.in_shape
    p = op.params
    args = dict(C=C, H=H, W=W, KH=p["kernel"][0], KW=p["kernel"][1], SH=p["stride"][0], SW=p["stride"][1],
                PH=p["padding"][0], PW=p["padding"][1], ceil_mode=p["ceil_mode"],
                count_include_pad=p["count_include_pad"], divisor_override=p["divisor_override"])
    validate(args)
    HO = pool_out_size(H, args["KH"], args["SH"], args["PH"], args["ceil_mode"])
    WO = pool_out_size(W, args["KW"], args["SW"], args["PW"], args["ceil_mode"])
    if HO <= 0 or WO <= 0:
        raise Unsupported(f"{op.where}: avg_pool2d output would be {HO}x{WO} for a {H}x{W} input (PyTorch: output size is too small)")
    if op.shape and tuple(op.shape[1:]) != (C, HO, WO):
        raise AssertionError(f"kgen's avg_pool2d output size {(C, HO, WO)} disagrees with PyTorch's {tuple(op.shape[1:])}")
    return Spec(HO=HO, WO=WO, **args)


def match(ops: list[Op], problem: Problem) -> Spec | None:
    if ops[0].kind != "pool" or (ops[0].params["op"], ops[0].params["nd"]) != ("avg", 2):
        return None
    if ops[0].dtype != torch.float32:
        raise Unsupported(f"{ops[0].where}: the avg_pool2d family takes float32 input, got {ops[0].dtype}")
    if len(ops) > 1:
        raise Unsupported(f"{ops[1].where}: {ops[1].label} after avg_pool2d breaks the avg_pool2d family's pattern (a lone AvgPool2d)")
    return spec_from(ops[0])


# ------------------------------------------------------------------------------------------------------ tiling

SMEM_FLOATS = 12 * 1024  # 48 KB of static shared memory per block
MAX_SPAN = 4096  # input columns one forward tile covers
TILE_ELEMS = 8192  # input elements per tile worth one block's launch


def vec_width(W: int) -> int:
    return 4 if W % 4 == 0 else 2 if W % 2 == 0 else 1


def forward_tiling(s: Spec) -> dict:
    vec = vec_width(s.W)

    def span(cols: int) -> int:  # colsum row length for a tile of `cols` output columns (start rounded down to vec)
        return ceil_div((cols - 1) * s.SW + s.KW + vec - 1, vec) * vec

    cols = s.WO if span(s.WO) <= MAX_SPAN else max(1, (MAX_SPAN - s.KW) // s.SW + 1)
    if span(cols) > SMEM_FLOATS:
        raise Unsupported(f"avg_pool2d kernel width {s.KW} needs more shared memory than a block has; kgen supports kernels up to ~8000 wide")
    rows = 1
    # More output rows per tile when windows overlap (fewer re-reads) or a tile is small; bounded by registers and smem.
    while (rows < s.HO and rows * vec < 32 and (rows + 1) * span(cols) <= SMEM_FLOATS
           and (s.KH > s.SH or ((rows - 1) * s.SH + s.KH) * span(cols) < TILE_ELEMS) and rows < 8):
        rows += 1
    if cols == s.WO:  # one column tile: the exact number of vectors a tile reads
        ca = -((s.PW + vec - 1) // vec) * vec if s.PW else 0
        c_lo, c_hi = max(ca, 0), min((s.WO - 1) * s.SW - s.PW + s.KW, s.W)
        chunks = ceil_div(c_hi - c_lo, vec)
    else:
        chunks = span(cols) // vec
    threads = min(512, max(32, ceil_div(chunks, 32) * 32))
    in_rows = (rows - 1) * s.SH + s.KH
    # Persistent, register-prefetching variant: one column tile, one vector chunk per thread, loads fit registers.
    prefetch = cols == s.WO and chunks <= threads and in_rows * vec <= 64
    return {"vec": vec, "f_rows": rows, "f_cols": cols, "f_span": span(cols), "f_threads": threads,
            "f_in_rows": in_rows, "f_prefetch": prefetch}


def backward_tiling(s: Spec, vec: int) -> dict:
    cols = s.W if s.W <= MAX_SPAN else MAX_SPAN
    rows = max(1, min(s.H, 16, TILE_ELEMS * 2 // cols))
    gw = (cols + s.KW - 2) // s.SW + 2
    while rows > 1 and rows * gw > SMEM_FLOATS:
        rows -= 1
    threads = min(512, max(32, ceil_div(rows * cols // vec, 32) * 32))
    return {"b_rows": rows, "b_cols": cols, "b_threads": threads}


def context(spec: Spec) -> dict:
    fwd = forward_tiling(spec)
    return {**vars(spec), **fwd, **backward_tiling(spec, fwd["vec"])}


def describe(spec: Spec) -> list[str]:
    t = context(spec)
    return [
        f"forward: one block per tile of {t['f_rows']} output row(s) x {t['f_cols']} output columns of one (n, c) plane.",
        f"Each thread sums {t['vec']} adjacent input columns down the {t['f_in_rows']} window rows ({t['vec'] * 4}-byte",
        "loads, all rows in flight), then each output adds its KW column sums from shared memory and divides by",
        "PyTorch's divisor. backward: one block per tile of input rows; it first sums grad_y / divisor over the windows",
        "covering each row, then every grad_x element gathers the windows covering its column (coalesced streaming",
        "stores, every element written). Batch size is a run-time value; indexing is 64-bit.",
    ]


def module_context(spec: Spec, problem: Problem) -> dict:
    return {}


def traffic(spec: Spec, n: int) -> tuple[int, int]:
    """Fewest bytes moved: forward reads x and writes y; forward+backward also reads grad_y and writes grad_x."""
    x, y = 4 * n * spec.C * spec.H * spec.W, 4 * n * spec.C * spec.HO * spec.WO
    return x + y, 2 * (x + y)
