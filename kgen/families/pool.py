"""Family pool: a lone pooling op, every PyTorch pooling layer.

Scope: nn.AvgPool1d/2d/3d, nn.MaxPool1d/2d/3d, nn.AdaptiveAvgPool1d/2d/3d, nn.AdaptiveMaxPool1d/2d/3d and their
functional forms (kgen/ops.py normalizes them into one ``pool`` op), every argument (kernel, stride, padding,
dilation, ceil_mode, count_include_pad, divisor_override, output sizes with None entries, return_indices, also
``[0]`` / ``[1]`` of a (values, indices) result), batched (N, C, *spatial) and unbatched (C, *spatial) input,
float32 / float16 / bfloat16 (float32 accumulation). N is a run-time value; everything else is compile-time.

Every op is computed as a 3-d pool (1-d and 2-d ops get leading spatial dims of size 1, as PyTorch computes 1-d
pooling as 2-d with H = 1), and an adaptive pool whose bins are all equal is a fixed window (kernel = stride =
size / out). Three forward designs, chosen here once:
- ``window``: each thread keeps VO x RH outputs in registers and streams the input rows their windows cover with
  16-byte loads (max pooling follows PyTorch's scan order, so ties and NaNs pick PyTorch's element); where one
  window's last input slice is the next one's first (MaxPool3d(3, 2, 1)), a thread walks several output slices and
  reads that shared slice once;
- ``colsum``: the tuned AvgPool2d kernel for wide windows (column sums down the window rows, then across them
  from shared memory);
- ``simple``: one thread per output with run-time window bounds (unequal adaptive bins, very wide windows), or,
  for windows of 32 or more elements 8 or more columns wide, a group of lanes of one warp per output
  (``simple_tiling``): each lane scans its columns of every window row in PyTorch's order, then the group combines
  its partials.
Backward is deterministic, without atomics, and saves no more than PyTorch (max pooling keeps each output's
in-window argmax offset in 1, 2 or 4 bytes, never int64):
- ``tile`` (max pooling with fixed 2-d / 3-d windows where a block of grad_x aligned to the strides fits a
  thread's registers): a thread owns a small block of grad_x, reads each window that can reach it once and adds its
  gradient where the saved argmax names one of the block's elements, the taps enumerated here (``tile_taps``);
- ``scatter`` (the other fixed 2-d / 3-d max windows but 2-d windows of 2-byte types): a block holds a grad_x tile in
  shared memory, loads every window reaching it, and adds each gradient at its argmax in barrier-separated phases
  of windows that share no element (so each element sums its windows in a fixed order);
- ``gather`` (everything else but the column-sum design's own): each grad_x element sums the windows that can hold it
  (max pooling: those whose saved argmax is this element).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kgen.errors import Unsupported
from kgen.geometry import (adaptive_end, adaptive_max_window, adaptive_start, ceil_div, check_avg_pool3d_input,
                           check_output, check_pool_args, pool_out_shape)
from kgen.ops import Op
from kgen.problem import Problem

NAME = "pool"
TEMPLATES = {"kernel.cu": "pool/kernel.cu.j2", "binding.cpp": "pool/binding.cpp.j2"}
MODEL_TEMPLATE = "pool/model_new.py.j2"


@dataclass(frozen=True)
class DType:
    ctype: str  # CUDA element type
    aten: str  # ATen scalar type
    size: int  # bytes
    headers: tuple[str, ...] = ()  # templates included for this element type only


DTYPES = {
    "float32": DType("float", "at::kFloat", 4),
    "float16": DType("__half", "at::kHalf", 2, ("pool/half.cuh",)),
    "bfloat16": DType("__nv_bfloat16", "at::kBFloat16", 2, ("pool/bfloat16.cuh",)),
}
TORCH_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@dataclass(frozen=True)
class OffsetType:
    """Storage of max pooling's saved in-window argmax offsets (windows of up to `limit` elements)."""

    limit: int
    ctype: str
    aten: str
    torch: str
    size: int


OFFSET_TYPES = (
    OffsetType(1 << 8, "uint8_t", "at::kByte", "torch.uint8", 1),
    OffsetType(1 << 16, "uint16_t", "at::kShort", "torch.int16", 2),  # int16 storage read as uint16 by the kernels
    OffsetType(1 << 31, "int32_t", "at::kInt", "torch.int32", 4),
)

OUTPUTS = ("values", "indices", "both")  # what forward returns: values, int64 indices, or (values, indices)


@dataclass(frozen=True)
class Spec:
    op: str  # avg | max | adaptive_avg | adaptive_max
    nd: int  # 1 | 2 | 3
    dtype: str  # float32 | float16 | bfloat16
    batched: bool  # input (N, C, *size); else (C, *size)
    C: int
    size: tuple[int, ...]  # input spatial sizes (nd)
    out: tuple[int, ...]  # output spatial sizes (nd)
    kernel: tuple[int, ...]  # () for adaptive ops
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool
    divisor_override: int | None
    outputs: str  # values | indices | both


# ------------------------------------------------------------------------------------------------------ matching


def _outputs(ops: list[Op]) -> str:
    pool = ops[0]
    tuple_result = bool(pool.params.get("returns_tuple", pool.params["return_indices"]))
    if len(ops) == 1:
        return "both" if tuple_result else "values"
    nxt = ops[1]
    index = nxt.params.get("index") if nxt.kind == "getitem" else None
    if len(ops) == 2 and tuple_result and index in (0, 1, -1, -2):
        return "values" if index in (0, -2) else "indices"
    raise Unsupported(f"{nxt.where}: {nxt.label} after {pool.label} is outside the pool family (a lone pooling op, "
                      "or [0] / [1] of its (values, indices) result); compute the rest in PyTorch")


def spec_from(op: Op, outputs: str) -> Spec:
    p = op.params
    kind, nd = p["op"], p["nd"]
    what = f"{op.where}: {op.label}"
    if op.dtype not in TORCH_DTYPES:
        raise Unsupported(f"{what} on {op.dtype} input; the pool family takes float32, float16 or bfloat16")
    rank = len(op.in_shape)
    if rank not in (nd + 1, nd + 2):
        raise Unsupported(f"{what} on a {rank}-d input; it takes (N, C, *{nd} sizes) or unbatched (C, *{nd} sizes)")
    batched = rank == nd + 2
    C, size = op.in_shape[-nd - 1], tuple(op.in_shape[-nd:])
    if C <= 0 or min(size) <= 0:
        raise Unsupported(f"{what} on input of shape {tuple(op.in_shape)}; every dimension but the batch must be non-zero")
    if kind in ("avg", "max"):
        k, s, pad, d = p["kernel"], p["stride"], p["padding"], p["dilation"]
        check_pool_args(what, k, s, pad, d)
        if kind == "avg" and nd == 3:
            check_avg_pool3d_input(what, size, k)
        if kind == "avg" and p["divisor_override"] is not None and p["divisor_override"] == 0:
            raise Unsupported(f"{what}: divisor_override must be non-zero (PyTorch: divisor must be not zero)")
        out = pool_out_shape(size, k, s, pad, p["ceil_mode"], d)
        check_output(what, size, out)
    else:
        k, s, pad, d = (), (), (), (1,) * nd
        out = tuple(p["output_size"])
        if min(out) <= 0:
            raise Unsupported(f"{what}: output_size {out} has a zero entry; use sizes of at least 1")
    if op.shape and (len(op.shape) != rank or tuple(op.shape[-nd - 1:]) != (C,) + tuple(out)):
        raise AssertionError(f"kgen's pool output shape {(C,) + tuple(out)} disagrees with PyTorch's {tuple(op.shape)} "
                             f"for {op.label} on {tuple(op.in_shape)}")
    if math.prod(size) >= 1 << 31 or math.prod(out) >= 1 << 31:
        raise Unsupported(f"{what}: one (n, c) plane of {size} elements is too large (2^31 elements at most)")
    return Spec(op=kind, nd=nd, dtype=TORCH_DTYPES[op.dtype], batched=batched, C=C, size=size, out=tuple(out),
                kernel=tuple(k), stride=tuple(s), padding=tuple(pad), dilation=tuple(d),
                ceil_mode=bool(p["ceil_mode"]), count_include_pad=bool(p["count_include_pad"]),
                divisor_override=p["divisor_override"], outputs=outputs)


def match(ops: list[Op], problem: Problem) -> Spec | None:
    if not ops or ops[0].kind != "pool":
        return None
    return spec_from(ops[0], _outputs(ops))


# ------------------------------------------------------------------------------------------------------ planning

THREADS = 256  # window / simple forward and gather backward blocks
SEG_MAX = 48  # input elements one window-design thread holds per row (float registers)
OUT_MAX = 16  # outputs one window-design thread keeps in registers
# ... of 2-byte elements: 8 (H200, float16 MaxPool2d(3, 2, 1) on 32x96x384x384: 16 outputs per thread 78% of the
# copy-rate floor, 8 outputs 86%; float32 keeps 16, as 8 output columns x 2 rows: MaxPool3d(3, 2, 1) 78%, 66% at 8)
OUT_MAX_HALF = 8
LOADS_MAX = 40  # vector loads per window slice one window-design thread may hold (a register budget)
# A row's input segment that widening for 16 bytes of output may reach. H200, AdaptiveAvgPool2d(7) on 256x512x28x28
# (4 x 4 windows, no overlap): 4 outputs a thread read 64 bytes a row, 90% of the copy-rate floor (a tie with
# torch.compile); 2 outputs (32 bytes) or 1, 99%. AvgPool3d(2) float32 at 2 or 4 outputs (16 / 32 bytes): 104% both.
MIN_OUTPUTS_SEG_BYTES = 32
# Windows whose last input slice is the next window's first ((KD - 1) * DD == SD: MaxPool3d(3, 2, 1) and the like)
# walk WALK_SLICES output slices per work item, reading the shared slice once (the window design's "walk"); a walking
# thread also keeps that slice's fold, so it holds at most WALK_VO_MAX outputs a row.
WALK_SLICES = 8
WALK_VO_MAX = 4
WALK_MIN_ITEMS = 16384  # per sample (64 blocks): with fewer walking work items a small batch would leave SMs idle,
# so such problems keep one output slice per work item
COLSUM_MIN_WINDOW = 25  # avg 2d windows of this many elements or more use the column-sum design
UNROLL_MAX = 16  # loops up to this trip count are fully unrolled
# The simple forward splits a window over a group of 4-32 lanes across its columns where each lane gets at least
# SPLIT_MIN_COLS columns of a row and SPLIT_MIN_LOADS elements. H100, bench_pool.py --random 20 --seed 2, forward ms
# one thread an output -> split: AdaptiveAvgPool1d(25) of 17x96x65536 bfloat16 (bins of 2622 columns, 32 lanes) 0.936
# -> 0.190; AdaptiveAvgPool3d((3, None, 2)) of 29x64x128x112 (56 columns, 32 lanes) 0.134 -> 0.068;
# AdaptiveAvgPool1d(254) of 42x16x16384 (65 columns, 8 lanes) 0.036 -> 0.027. Groups that also split the rows (lane
# r of a row group taking every k-th row) lost wherever bins were 2-13 columns wide: AdaptiveMaxPool3d((3, 4, 156))
# 0.152 -> 0.978, AdaptiveAvgPool2d((3, 295)) 0.153 -> 0.820, AdaptiveMaxPool3d((9, 1, 10)) 0.154 -> 0.385 (only the
# 3840-output AdaptiveAvgPool3d((3, 4, 5)) gained, 0.283 -> 0.168), so rows stay with one lane.
SPLIT_MIN_COLS = 2
SPLIT_MIN_LOADS = 8
# Where a call has so few outputs that SPLIT lanes each would fill under a quarter of the GPU's resident threads (the
# launcher asks the device), the simple forward splits the window's rows too, into contiguous ranges of at least
# ROW_SPLIT_MIN_ROWS rows over up to 32 / SPLIT lanes: AdaptiveAvgPool3d((3, 4, 5)) of 4x16x64x112x16 has 3840 outputs
# of about 2,500 elements, 4 columns wide (one lane each: 0.303 ms on an H100, 3% of the floor, eager 1.4x faster).
# COL_BATCH: column loads of a row each lane has in flight (1: the loop as GPU-timed; 4 is the next experiment,
# tests/dev/pool_variants.py col_batch4).
ROW_SPLIT_MIN_ROWS = 2
ROW_SPLIT_FILL = 4  # ... under 1 / ROW_SPLIT_FILL of the resident threads
COL_BATCH = 1
# A one-lane output whose window (adaptive: widest bin) holds at most UNROLL_WINDOW_MAX elements scans it unrolled:
# every load issued first (predicated by the bounds and, adaptive, the bin's own extent), then the scan in PyTorch's
# order. The rolled scan kept one 2- or 4-byte load in flight a thread, too few bytes to reach the copy rate. H100,
# rolled -> unrolled forward: MaxPool2d(2, return_indices) float16 on 32 x 96 x 192 x 192 0.254 -> 0.187 ms (66% ->
# 90% of the floor), MaxPool2d(3, 2, 1, return_indices) float32 0.325 -> 0.269 (97%), MaxPool2d(3, 1, 1,
# return_indices) bfloat16 0.526 -> 0.369; adaptive bins level (docs/notes/pool_plan.md, fifty-seventh session).
UNROLL_WINDOW_MAX = 16
# Blocks per SM each kernel is compiled for (caps registers: 2 -> 128, 4 -> 64 per thread): the window forward keeps
# many loads in flight per thread; the others are light and want occupancy.
MIN_BLOCKS = {"window": 2, "lanes": 2, "simple": 4, "colsum": 1, "gather": 4, "scatter": 4, "tile": 4}


@dataclass(frozen=True)
class Geometry:
    """The op as a 3-d pool: sizes (D, H, W), outputs, window, stride, padding, dilation; adaptive=True keeps the
    floor/ceil bins (kernel = the widest bin per dimension)."""

    reduce: str  # avg | max
    adaptive: bool
    size: tuple[int, int, int]
    out: tuple[int, int, int]
    kernel: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]


def _lift(t: tuple[int, ...], fill: int) -> tuple[int, int, int]:
    a, b, c = (fill,) * (3 - len(t)) + tuple(t)
    return a, b, c


def geometry(spec: Spec) -> Geometry:
    reduce = "max" if spec.op in ("max", "adaptive_max") else "avg"
    size, out = _lift(spec.size, 1), _lift(spec.out, 1)
    if spec.op in ("avg", "max"):
        return Geometry(reduce, False, size, out, _lift(spec.kernel, 1), _lift(spec.stride, 1), _lift(spec.padding, 0),
                        _lift(spec.dilation, 1))
    if all(s % o == 0 for s, o in zip(size, out)):  # equal bins: a fixed window, kernel = stride = size / out
        k = _lift(tuple(s // o for s, o in zip(size, out)), 1)
        return Geometry(reduce, False, size, out, k, k, (0, 0, 0), (1, 1, 1))
    k = _lift(tuple(adaptive_max_window(o, s) for s, o in zip(size, out)), 1)
    return Geometry(reduce, True, size, out, k, (1, 1, 1), (0, 0, 0), (1, 1, 1))


def vec_widths(W: int, itemsize: int) -> list[int]:
    """Elements per vector access, widest (16 bytes) first, each dividing W."""
    v, out = 16 // itemsize, []
    while v >= 1:
        if W % v == 0:
            out.append(v)
        v //= 2
    return out


def walk_slices(g: Geometry, itemsize: int, channels: int) -> int:
    """Output slices one window-design work item walks (0: one), when consecutive windows share exactly one input
    slice. Not for 2-byte max pooling (its packed scan folds whole windows)."""
    (KD, _, _), (SD, _, _), (DD, _, _), (DO, HO, WO) = g.kernel, g.stride, g.dilation, g.out
    if KD < 2 or (KD - 1) * DD != SD or DO < 2 or (g.reduce == "max" and itemsize == 2):
        return 0
    runs = ceil_div(DO, WALK_SLICES)
    items = channels * runs * HO * ceil_div(WO, WALK_VO_MAX) // 2  # about: two rows a work item
    return ceil_div(DO, runs) if items >= WALK_MIN_ITEMS else 0


# 32-bit words one window-design thread may hold (window_words) before the forward that also saves offsets spills at
# its 128-register cap: measured by nvcc -Xptxas -v for sm_80 and sm_90 on MaxPool2d (5, 1, 2), (5, 2, 2), (4, 2, 1),
# (7, 4, 3) float32 (152-236 words: 8-128 bytes of spills; none at the budget) and bfloat16 (6, (4, 1), 1) packed
# (88 words: 56 bytes on sm_80; 16 bytes left at 64 words with 8-byte loads); issue 8's MaxPool2d(3, 2, 1) float32
# holds 132 and float16 52 without spills. Not separated by this estimate: 3-d windows without the walk at 132 words
# (MaxPool3d(3, 2, 1) on 10 x 12 x 16: 24 bytes on sm_90; on 9 x 10 x 12, none).
WINDOW_WORDS_MAX = {"float": 136, "packed": 80}


def window_words(g: Geometry, itemsize: int, seg: int, nj: int, vo: int, rh: int) -> float:
    """Estimate of the 32-bit words a window-design thread holds at once: every row its windows read (the compiler
    hoists the unrolled rows' loads) and its outputs (max pooling: value and offset)."""
    return seg * nj * itemsize / 4 + vo * rh * (2 if g.reduce == "max" else 1)


def window_tiling(g: Geometry, itemsize: int, channels: int = 1) -> dict | None:
    """VO outputs along W and RH output rows per thread, VEC-element loads; None when no tiling fits registers."""
    (_, H, W), (_, HO, WO) = g.size, g.out
    (_, KH, KW), (_, SH, SW), (_, _, PW), (_, DH, DW) = g.kernel, g.stride, g.padding, g.dilation
    ekw = (KW - 1) * DW + 1
    walk = walk_slices(g, itemsize, channels)
    over = None  # the widest vectors' tiling, where no vector width fits the register budget
    for vec in vec_widths(W, itemsize):
        al = ceil_div(PW, vec) * vec

        def seg(vo: int) -> int:
            return ceil_div(al - PW + (vo - 1) * SW + ekw, vec) * vec

        vo = base = vec // math.gcd(vec, SW)  # vo * SW a whole number of vectors
        out_max = WALK_VO_MAX * 2 if walk else OUT_MAX_HALF if itemsize == 2 else OUT_MAX
        if vo > out_max or seg(vo) > SEG_MAX:
            continue
        # At least 16 bytes of output per thread where the row allows (where windows do not overlap, only while a
        # row's input segment stays within MIN_OUTPUTS_SEG_BYTES: widening them saves no loads); more outputs while
        # the halo is a large share of the segment.
        min_outputs = max(1, 16 // itemsize)
        ekh = (KH - 1) * DH + 1
        while (vo * 2 <= (WALK_VO_MAX if walk else out_max) and seg(vo * 2) <= SEG_MAX and vo * 2 <= 1 << (WO - 1).bit_length()
               and ceil_div(seg(vo * 2), vec) * ekh <= LOADS_MAX
               and ((vo < min_outputs and (ekw > SW or seg(vo * 2) * itemsize <= MIN_OUTPUTS_SEG_BYTES))
                    or seg(vo) > 1.25 * vo * SW)):
            vo *= 2
        # Two output rows per thread where windows overlap in H, unless the loads are narrow (many of them, and their
        # addresses, would not fit the register budget without spilling).
        rh = 2 if (ekh > SH and HO > 1 and vo * 2 <= out_max and ceil_div(seg(vo), vec) * (SH + ekh) <= 64
                   and vec * itemsize >= 8) else 1
        # 2-byte max pooling scans output pairs packed in 32-bit words (half the instructions; H200, float16
        # MaxPool2d(3, 2, 1): the float scan that saves offsets was bound by the ALU pipe, 0.56 ms for a 0.29 floor)
        packed = g.reduce == "max" and itemsize == 2 and vo % 2 == 0 and vec % 2 == 0 and math.prod(g.kernel) <= 0xFFFF
        budget = WINDOW_WORDS_MAX["packed" if packed else "float"]
        # max pooling (its forward that saves offsets): fewer rows, then fewer outputs, until the words a thread holds
        # fit the register budget
        while (g.reduce == "max" and window_words(g, itemsize, seg(vo), (rh - 1) * SH + ekh, vo, rh) > budget
               and (rh > 1 or vo > base)):
            if rh > 1:
                rh = 1
            else:
                vo //= 2
            packed = packed and vo % 2 == 0
        nj = (rh - 1) * SH + ekh
        tiling = {"vec": vec, "vo": vo, "rh": rh, "al": al, "seg": seg(vo), "nj": nj, "chunks": ceil_div(WO, vo),
                  "groups": ceil_div(HO, rh), "packed": packed, "walk": walk}
        if g.reduce != "max" or window_words(g, itemsize, seg(vo), nj, vo, rh) <= budget:
            return tiling
        over = over or tiling  # narrower vectors take fewer outputs a thread
    return over


LANES_MIN_USE = 0.7  # the lanes design is taken when at least this fraction of its lanes' outputs are real
# outputs per lane to aim at (MS steps x RH rows x OPL). H200, forward: MaxPool1d(4, 2) 86% of the copy-rate floor at
# 8, 97% at 4 (81% at 16); AvgPool1d(5, 1, 2) 88% at 8, 92% at 4 (more warps in flight, each with less to hold)
LANES_OUTPUTS = 4


def lanes_tiling(g: Geometry, itemsize: int) -> dict | None:
    """The warp-contiguous design: lane t of a warp owns VEC input columns (one coalesced load per row), computes the
    OPL = VEC / SW outputs whose windows start there, and takes HLN <= 2 vectors of halo from the next lanes. Needs
    SW | VEC; None when no vector width fits or too many lanes would idle on a narrow row."""
    (_, H, W), (_, HO, WO) = g.size, g.out
    (_, KH, KW), (_, SH, SW), (_, _, PW), (_, DH, DW) = g.kernel, g.stride, g.padding, g.dilation
    ekw, ekh = (KW - 1) * DW + 1, (KH - 1) * DH + 1
    best = None
    for vec in vec_widths(W, itemsize):
        if vec % SW:
            continue
        opl, al = vec // SW, ceil_div(PW, vec) * vec
        need = al - PW + (opl - 1) * SW + ekw  # columns from a lane's first one that its windows read
        hln = ceil_div(max(0, need - vec), vec)
        steps = ceil_div(WO, 32 * opl)
        use = WO / (steps * 32 * opl)
        if hln > 2 or use < LANES_MIN_USE:
            continue
        score = use * vec * itemsize
        if best is None or score > best[0]:
            best = (score, vec, opl, al, hln, steps)
    if best is None:
        return None
    _, vec, opl, al, hln, steps = best
    rh = 2 if ekh > SH and HO > 1 else 1
    ms = max(1, min(steps, LANES_OUTPUTS // (opl * rh)))
    return {"vec": vec, "opl": opl, "al": al, "hln": hln, "steps": steps, "rh": rh, "ms": ms,
            "nj": (rh - 1) * SH + ekh, "groups": ceil_div(HO, rh)}


# The column-sum design (ported from the tuned AvgPool2d kernels).
SMEM_FLOATS = 12 * 1024  # 48 KB of static shared memory per block
MAX_SPAN = 4096  # input columns one forward tile covers
TILE_ELEMS = 8192  # input elements per tile worth one block's launch


def colsum_tiling(g: Geometry, itemsize: int) -> dict:
    (_, H, W), (_, HO, WO) = g.size, g.out
    (_, KH, KW), (_, SH, SW), (_, PH, PW) = g.kernel, g.stride, g.padding
    vec = vec_widths(W, itemsize)[0]

    def span(cols: int) -> int:  # colsum row length for a tile of `cols` output columns (start rounded down to vec)
        return ceil_div((cols - 1) * SW + KW + vec - 1, vec) * vec

    cols = WO if span(WO) <= MAX_SPAN else max(1, (MAX_SPAN - KW) // SW + 1)
    if span(cols) > SMEM_FLOATS:
        raise Unsupported(f"avg pooling kernel width {KW} needs more shared memory than a block has; kgen supports "
                          "kernels up to ~8000 wide")
    rows = 1
    # More output rows per tile when windows overlap (fewer re-reads) or a tile is small; bounded by registers and smem.
    while (rows < HO and rows * vec < 32 and (rows + 1) * span(cols) <= SMEM_FLOATS
           and (KH > SH or ((rows - 1) * SH + KH) * span(cols) < TILE_ELEMS) and rows < 8):
        rows += 1
    if cols == WO:  # one column tile: the exact number of vectors a tile reads
        ca = -((PW + vec - 1) // vec) * vec if PW else 0
        c_lo, c_hi = max(ca, 0), min((WO - 1) * SW - PW + KW, W)
        chunks = ceil_div(c_hi - c_lo, vec)
    else:
        chunks = span(cols) // vec
    threads = min(512, max(32, ceil_div(chunks, 32) * 32))
    in_rows = (rows - 1) * SH + KH
    # Persistent, register-prefetching variant: one column tile, one vector chunk per thread, loads fit registers.
    prefetch = cols == WO and chunks <= threads and in_rows * vec <= 64
    b_cols = W if W <= MAX_SPAN else MAX_SPAN
    b_rows = max(1, min(H, 16, TILE_ELEMS * 2 // b_cols))
    gw = (b_cols + KW - 2) // SW + 2
    while b_rows > 1 and b_rows * gw > SMEM_FLOATS:
        b_rows -= 1
    b_threads = min(512, max(32, ceil_div(b_rows * b_cols // vec, 32) * 32))
    return {"vec": vec, "f_rows": rows, "f_cols": cols, "f_span": span(cols), "f_threads": threads,
            "f_in_rows": in_rows, "f_prefetch": prefetch, "b_rows": b_rows, "b_cols": b_cols, "b_threads": b_threads,
            "b_vec": vec}


def _covering(n_in: int, n_out: int, k: int, s: int, p: int, d: int, adaptive: bool, group: int) -> int:
    """The most windows (outputs) covering `group` consecutive inputs starting at a multiple of `group`."""
    if adaptive:
        return max(adaptive_end(i + group - 1, n_in, n_out) - adaptive_start(i, n_in, n_out)
                   for i in range(0, n_in, group))
    return max(1, min(n_out, ceil_div(group - 1 + (k - 1) * d + 1, s)))


# grad_x bytes per max-pooling gather thread of a 2-byte type (others: 16). H200: float16 MaxPool2d(3, 2, 1) step
# 1.022 ms with 16 bytes, 0.978 with 32 (fewer candidate windows per element; that gather is bound by the ALU, not
# memory); but bfloat16 AvgPool3d(2) 0.557 -> 0.843 ms with 32 (fewer threads to hide its latency), so average keeps 16
GATHER_BYTES_HALF = 32
GATHER_WIDE_CANDIDATES_MAX = 16  # ... and at most this many candidate windows a thread there
ALIGNED_KW_MAX = 8  # the aligned gather unrolls each candidate over its KW taps


def _aligned_candidates(r: int, k: int, s: int, p: int, d: int) -> tuple[int, int]:
    """Along one dimension, for blocks of r inputs starting at multiples of r (s dividing r): the start of the first
    window that can reach the block, relative to its first input (r0 <= 0), and how many windows can (nq). The aligned
    gather's W candidates and the tile backward's per dimension."""
    ek = (k - 1) * d + 1
    r0 = 1 - ek + (-p - (1 - ek)) % s  # the first window start >= 1 - ek that is = -p (mod s)
    return r0, (r - 1 - r0) // s + 1


def gather_tiling(g: Geometry, itemsize: int, offsize: int) -> dict:
    """B_VEC grad_x elements per thread and the windows (candidates) that can hold them. Aligned form (fixed windows,
    the W stride dividing B_VEC): every thread's first W candidate starts the same distance B_R0 from its first element,
    so which element each tap of candidate q names is a compile-time constant; only the B_NQ candidates that can reach
    the thread's elements are visited and each tests only its taps, not every element. Max pooling's aligned form also
    reads its first B_GQ candidates' grad_y and offsets as one vector load each (0: one load per candidate) where the
    group starts on a multiple of B_GQ outputs in every row: float16 MaxPool2d(3, 2, 1) reads 2 vectors instead of 16
    values per candidate row (H100: step 1.064 -> 0.929 ms)."""
    (D, H, W), (DO, HO, WO) = g.size, g.out
    (_, _, KW), (_, _, SW), (_, _, PW), (_, _, DW) = g.kernel, g.stride, g.padding, g.dilation
    def covering(vec: int) -> list[int]:
        return [_covering(n, o, k, s, p, d, g.adaptive, grp) for n, o, k, s, p, d, grp in
                zip(g.size, g.out, g.kernel, g.stride, g.padding, g.dilation, (1, 1, vec))]

    vec = vec_widths(W, itemsize)[0]
    wide = vec * GATHER_BYTES_HALF // 16
    # the wide form unrolls every candidate's loads: not past GATHER_WIDE_CANDIDATES_MAX of them (float16
    # AdaptiveMaxPool3d((None, 8, 69)) of a 20 x 96 plane: 24 candidates, an 8-byte spill at 64 registers)
    if (g.reduce == "max" and itemsize == 2 and vec * itemsize == 16 and W % wide == 0
            and math.prod(covering(wide)) <= GATHER_WIDE_CANDIDATES_MAX):
        vec = wide
    cov = covering(vec)
    out = {"b_vec": vec, "ncd": cov[0], "nch": cov[1], "nqw": cov[2], "b_chunks": W // vec, "b_aligned": False,
           "b_r0": 0, "b_nq": 0, "b_gq": 0}
    if not g.adaptive and vec % SW == 0 and KW <= ALIGNED_KW_MAX:
        r0, nq = _aligned_candidates(vec, KW, SW, PW, DW)
        if nq <= UNROLL_MAX:
            out.update(b_aligned=True, b_r0=r0, b_nq=nq)
            gq = vec // SW  # candidates per vector: the thread's first element steps by B_VEC = gq * SW inputs
            if (g.reduce == "max" and 2 <= gq <= nq and gq & (gq - 1) == 0 and ((r0 + PW) // SW) % gq == 0
                    and WO % gq == 0 and gq * max(itemsize, offsize) <= 16):
                out["b_gq"] = gq
    return out


# The tile backward (max pooling, fixed windows): a thread gathers a block of grad_x in registers. H200, issue 8's
# sizes, step against the scatter / gather it replaced: MaxPool2d(3, 2, 1) float32 1.455 -> 1.240 ms (77% -> 90% of
# the floor), float16 0.835 -> 0.727 (70% -> 80%), MaxPool3d(3, 2, 1) 1.704 -> 1.444 (72% -> 85%); the scatter had
# issued ~45 instructions per grad_x element (Nsight: SM 76-81% busy, DRAM 59%). Blocks of at most 8 float32
# elements: 1.215 on MaxPool2d (but no 3-d block fits); 32 at 2 blocks an SM: 1.359.
TILE_ELEMS_MAX = {4: 16, 2: 32}  # grad_x elements (float32 accumulators) per thread, by element size
TILE_PAIRS_MAX = 256  # (candidate window, tap inside the block) pairs: one compare and add each, unrolled
TILE_REGS_MAX = 52  # accumulators plus a grad_y and an offset register per candidate window (all rows in flight)


def tile_taps(g: Geometry, block: tuple[int, int, int]) -> list[tuple[int, int, list[tuple[int, ...]]]]:
    """For a block of RD x RH x RW grad_x elements (each a multiple of its stride): per candidate window row (a, b)
    along (D, H), the (q, offset, ld, lh, lw) of every tap of candidate q along W whose element (ld, lh, lw) lies
    inside the block, `offset` being the saved in-window argmax offset that names it. Rows with no such tap are left
    out: the tile backward's adds, enumerated once here."""
    per_dim = []
    for r, k, s, p, d in zip(block, g.kernel, g.stride, g.padding, g.dilation):
        r0, nq = _aligned_candidates(r, k, s, p, d)
        per_dim.append([[(t, r0 + q * s + t * d) for t in range(k) if 0 <= r0 + q * s + t * d < r] for q in range(nq)])
    KH, KW = g.kernel[1], g.kernel[2]
    rows = []
    for a, taps_d in enumerate(per_dim[0]):
        for b, taps_h in enumerate(per_dim[1]):
            taps = [(q, (kd * KH + kh) * KW + kw, ld, lh, lw)
                    for q, taps_w in enumerate(per_dim[2])
                    for kd, ld in taps_d for kh, lh in taps_h for kw, lw in taps_w]
            if taps:
                rows.append((a, b, taps))
    return rows


def tile_tiling(g: Geometry, itemsize: int, offsize: int) -> dict | None:
    """Max pooling with fixed windows where a block of RD x RH x RW grad_x elements (RW whole vectors; each a
    multiple of its dimension's stride) can be owned by one thread: every candidate window then starts at the same
    distance from the block's corner in every thread, so which element each tap names is a compile-time constant.
    The thread reads each candidate's grad_y and saved offset once (a row's first RW / SW candidates as one vector
    each where they are aligned) and adds the gradient where the offset names a tap inside the block: no shared
    memory, no barriers, no atomics, every element summing its windows in a fixed order. The block minimises an
    estimate of instructions per element (candidate loads, tap compares, stores, a fixed cost per thread). None where
    no block is aligned or fits."""
    if g.reduce != "max" or g.adaptive or g.kernel[:2] == (1, 1):
        # 1-d windows keep the gather (H200, MaxPool1d(4, 2) step: 2.97 ms gathering, 3.55 with 16-element blocks)
        return None
    vec = vec_widths(g.size[2], itemsize)[0]
    cap = TILE_ELEMS_MAX[itemsize]
    D, H, W = g.size
    best = None
    for rw in range(vec, cap + 1, vec):
        if rw % g.stride[2] or W % rw:
            continue
        for rh in range(g.stride[1], cap // rw + 1, g.stride[1]):
            for rd in range(g.stride[0], cap // (rw * rh) + 1, g.stride[0]):
                if (rd > 1 and rd > D) or (rh > 1 and rh > H):
                    continue
                block = (rd, rh, rw)
                r0, nq = zip(*(_aligned_candidates(r, k, s, p, d)
                               for r, k, s, p, d in zip(block, g.kernel, g.stride, g.padding, g.dilation)))
                rows = tile_taps(g, block)
                pairs = sum(len(t) for _, _, t in rows)
                elems = rd * rh * rw
                if pairs > TILE_PAIRS_MAX or nq[2] > UNROLL_MAX or elems + 2 * math.prod(nq) > TILE_REGS_MAX:
                    continue
                waste = (ceil_div(D, rd) * rd * ceil_div(H, rh) * rh) / (D * H)  # blocks past the last slice / row
                cost = waste * (24 + 4 * nq[0] * nq[1] * nq[2] + 2 * pairs + 2 * rd * rh * (rw // vec)) / elems
                if best is None or cost < best[0] - 1e-9:
                    best = (cost, block, list(r0), list(nq), rows)
    if best is None:
        return None
    _, (rd, rh, rw), r0, nq, rows = best
    # Candidates q0 .. q0 + gq - 1 of a row are the block's own gq = RW / SW outputs along W, whose first index is a
    # multiple of gq in every thread: one vector load each of grad_y and offsets where they fit 16 bytes.
    gq = rw // g.stride[2]
    q0 = (-((r0[2] + g.padding[2]) // g.stride[2])) % gq if gq else 0
    grouped = (2 <= gq and q0 + gq <= nq[2] and gq & (gq - 1) == 0 and g.out[2] % gq == 0
               and gq * max(itemsize, offsize) <= 16)
    return {"t_vec": vec, "t_block": [rd, rh, rw], "t_r0": r0, "t_nq": nq, "t_gq": gq if grouped else 0,
            "t_gq0": q0 if grouped else 0, "t_blocks": [ceil_div(D, rd), ceil_div(H, rh), W // rw],
            "t_rows": [(a, b, [(q, k, ld, lh, lw // vec, lw % vec) for q, k, ld, lh, lw in taps])
                       for a, b, taps in rows]}


SCATTER_THREADS = 256  # threads of a scatter block
SCATTER_SMEM_FLOATS = 12 * 1024  # the scatter backward's float32 grad_x tile (48 KB of static shared memory at most)
SCATTER_HOLD = 6  # windows one scatter thread holds in registers per tile (8 measured ~4% faster on H200 but spills
# at the 64-register cap on dilated, many-phase windows and on the broadcast grad_y variant; 4: ~4% slower)
SCATTER_PHASES_MAX = 27  # barrier-separated phases per tile (3-d stride 1, kernel 3)
SCATTER_TILE_COST = 2048  # bytes of traffic one tile's fixed cost (barriers, edges, ramp) is worth in the choice


def scatter_tiling(g: Geometry, itemsize: int, offsize: int) -> dict | None:
    """Max pooling with fixed windows: a block owns a TD x TH x TW tile of grad_x in shared memory (float32). Its
    threads load every window that can reach the tile (a CD x CH x CW box, in order, so the loads coalesce; at most
    SCATTER_HOLD per thread, held in registers) with the element its saved offset names. Windows P = ceil(EK / S)
    apart along a dimension share no element, so the adds run in PD x PH x PW phases (a window's phase: its place in
    the box modulo P) split by barriers: within a phase no two windows add to the same element, and every element sums
    its windows in a fixed order (deterministic, no atomics). Then the tile is written with vector stores. Each
    window's gradient and offset are read once per tile it reaches, against the gather's once per grad_x vector.
    None when the windows are adaptive bins, need too many phases, or no tile fits."""
    if g.reduce != "max" or g.adaptive or g.kernel[:2] == (1, 1) or (g.kernel[0] == 1 and itemsize == 2):
        # 1-d windows keep the gather (H200, MaxPool1d(4, 2): step 2.98 ms gathering, 3.46 scattering), and so do
        # 2-d windows of 2-byte types (float16 MaxPool2d(3, 2, 1): 1.35 ms gathering, 1.38 scattering)
        return None
    vec = vec_widths(g.size[2], itemsize)[0]
    ek = [(k - 1) * d + 1 for k, d in zip(g.kernel, g.dilation)]
    phases = [min(ceil_div(e, s), o) for e, s, o in zip(ek, g.stride, g.out)]
    if math.prod(phases) > SCATTER_PHASES_MAX:
        return None

    def cand(t: int, o: int, e: int, s: int) -> int:  # most windows reaching t consecutive inputs
        return min(o, (t + e - 2) // s + 1)

    D, H, W = g.size
    widths = sorted({W} | set(range(32 * vec, min(W, SCATTER_SMEM_FLOATS) + 1, 32 * vec)))
    best = None
    for tw in widths:
        for th in range(1, H + 1):
            for td in range(1, D + 1):
                t = (td, th, tw)
                cands = [cand(*a) for a in zip(t, g.out, ek, g.stride)]
                if td * th * tw > SCATTER_SMEM_FLOATS or math.prod(cands) > SCATTER_HOLD * SCATTER_THREADS:
                    break
                tiles = math.prod(ceil_div(n, x) for n, x in zip(g.size, t))
                cost = tiles * (math.prod(cands) * (itemsize + offsize) + SCATTER_TILE_COST + td * th * tw)
                if best is None or cost < best[0]:
                    best = (cost, t, cands)
    if best is None:  # one row of the tile, a vector wide, does not fit
        return None
    _, (td, th, tw), cands = best
    return {"s_vec": vec, "s_td": td, "s_th": th, "s_tw": tw,
            "s_tiles": [ceil_div(n, x) for n, x in zip(g.size, (td, th, tw))],
            "s_phases": phases, "s_box": cands, "s_hold": ceil_div(math.prod(cands), SCATTER_THREADS),
            "s_threads": SCATTER_THREADS}


def const_divisor(spec: Spec, g: Geometry) -> int:
    """An average pool's divisor when every window has the same one (divisor_override; or every window, clipped at
    size + padding as PyTorch clips it, is a whole kernel and count_include_pad or no window reaches the padding),
    else 0."""
    if g.reduce != "avg" or g.adaptive:
        return 0
    if spec.divisor_override:
        return spec.divisor_override
    whole = all((o - 1) * s - p + k <= n + p for n, o, k, s, p in zip(g.size, g.out, g.kernel, g.stride, g.padding))
    inside = all(p == 0 and (o - 1) * s + k <= n for n, o, k, s, p in zip(g.size, g.out, g.kernel, g.stride, g.padding))
    return math.prod(g.kernel) if (whole and spec.count_include_pad) or inside else 0


def pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def simple_tiling(g: Geometry) -> dict:
    """The simple forward's lanes per output (split, a power of two up to a warp), all across the window's columns:
    the most that leave each lane SPLIT_MIN_COLS columns of a row and SPLIT_MIN_LOADS elements, or one lane where
    that is fewer than 4; row_split: the lanes across its rows (contiguous ranges of ROW_SPLIT_MIN_ROWS rows or
    more, up to a warp in all) the launcher adds where a call has too few outputs to fill the GPU (1: never)."""
    KD, KH, KW = g.kernel
    split = min(32, pow2_floor(KW // SPLIT_MIN_COLS), pow2_floor(KD * KH * KW // SPLIT_MIN_LOADS))
    split = split if split >= 4 else 1
    row_split = min(32 // split, pow2_floor(KD * KH // ROW_SPLIT_MIN_ROWS))
    return {"split": split, "row_split": row_split if row_split >= 2 else 1, "col_batch": COL_BATCH,
            "row_split_fill": ROW_SPLIT_FILL, "unroll": split == 1 and KD * KH * KW <= UNROLL_WINDOW_MAX}


def offset_type(g: Geometry) -> OffsetType:
    n = math.prod(g.kernel)
    return next(t for t in OFFSET_TYPES if n <= t.limit)


def disjoint_row_windows(g: Geometry, lanes: dict | None, indices: bool) -> bool:
    """Single-row windows that do not overlap ((KW - 1) * DW + 1 <= SW) take the simple forward, whose lanes load only
    their own windows and store consecutive outputs, where the window design loses: windows with gaps between them
    where the lanes design does not apply (stride not dividing a vector), and int64 index outputs (the window design
    stores a thread's VO indices at a VO x 8-byte stride across the warp). H100, tests/dev/pool_variants.py, forward
    window -> simple: MaxPool1d(2, 3, 1) float32 on 32 x 256 x 100000 2.595 -> 1.530 ms (56% -> 94% of the copy-rate
    floor), its return_indices [1] float16 on 121 x 256 x 4096 0.541 -> 0.231 (36% -> 85%; eager 0.411), MaxPool1d(2,
    return_indices) float16 0.823 -> 0.321. Windows that touch (k == s) without indices keep their design: the simple
    forward lost there (MaxPool1d(2) float32 1.592 -> 1.871 ms, AdaptiveMaxPool1d(8) on 128 columns 0.055 -> 0.083)."""
    KD, KH, KW = g.kernel
    ekw = (KW - 1) * g.dilation[2] + 1
    return KD == 1 and KH == 1 and ekw <= g.stride[2] and (indices or (ekw < g.stride[2] and lanes is None))


def indexed_plane_windows(g: Geometry, indices: bool) -> bool:
    """Windows of several rows in one plane (2-d max pooling, or 3-d with a depth-1 kernel) with int64 index outputs
    take the simple forward: the window design stores a thread's VO indices at a VO x 8-byte stride across the warp,
    the simple forward a warp's consecutive outputs. H100, tests/dev/pool_variants.py --extra, forward window ->
    simple: MaxPool2d(3, 2, 1, return_indices) float32 on 32 x 96 x 192 x 192 0.418 -> 0.324 ms (eager 0.442),
    MaxPool2d(2, return_indices) float16 0.390 -> 0.252 (eager 0.336). Windows over several planes keep the window
    design (MaxPool3d(2, return_indices) on 8 x 32 x 32 x 64 x 64: 0.063 ms, simple 0.071)."""
    KD, KH, _ = g.kernel
    return indices and not g.adaptive and KD == 1 and KH > 1


def plan(spec: Spec) -> dict:
    """Designs and tilings, derived once."""
    g = geometry(spec)
    isz = DTYPES[spec.dtype].size
    KD, KH, KW = g.kernel
    out: dict = {"geometry": g}
    window = None if g.adaptive else window_tiling(g, isz, spec.C)
    lanes = None if g.adaptive else lanes_tiling(g, isz)
    indices = spec.outputs != "values"  # int64 index outputs
    if spec.nd == 2 and g.reduce == "avg" and not g.adaptive and KH * KW >= COLSUM_MIN_WINDOW:
        out["forward"], out["tiling"] = "colsum", colsum_tiling(g, isz)
    elif disjoint_row_windows(g, lanes, indices) or indexed_plane_windows(g, indices):
        out["forward"], out["tiling"] = "simple", simple_tiling(g)
    elif lanes is not None and KD == 1 and KH == 1 and not (
            window is not None and window["seg"] == window["vo"] * g.stride[2] and g.out[2] % window["vo"] == 0):
        # Single-row windows (1-d pooling): lanes, unless each window-design thread already reads exactly its own
        # columns and stores whole vectors. Measured on H200: lanes took MaxPool1d(4, 2) from 37% to 87% of the
        # copy-rate floor and AvgPool1d(5, 1, 2) from 60% to 88%, but multi-row windows lost (MaxPool2d(3, 2, 1)
        # 96% -> 48%: a shuffle per halo element per row), so those keep the window design.
        out["forward"], out["tiling"] = "lanes", lanes
    elif window is not None:
        out["forward"], out["tiling"] = "window", window
    else:
        out["forward"], out["tiling"] = "simple", simple_tiling(g)
    out["bwd_tiling"] = {}  # the scatter's or the gather's tiling (colsum's is part of its forward tiling)
    if spec.outputs == "indices":
        out["backward"] = "none"
    elif out["forward"] == "colsum":
        out["backward"] = "colsum"
    else:
        osz = offset_type(g).size
        if (tiling := tile_tiling(g, isz, osz)) is not None:
            out["backward"], out["bwd_tiling"] = "tile", tiling
        elif (tiling := scatter_tiling(g, isz, osz)) is not None:
            out["backward"], out["bwd_tiling"] = "scatter", tiling
        else:
            out["backward"], out["bwd_tiling"] = "gather", gather_tiling(g, isz, osz)
    return out


def forward_variants(spec: Spec) -> list[tuple[bool, bool, bool]]:
    """(write values, write int64 indices, write saved offsets) combinations the binding launches."""
    max_pool = spec.op in ("max", "adaptive_max")
    if spec.outputs == "indices":
        return [(False, True, False)]
    base = (True, spec.outputs == "both")
    return [(*base, False)] + ([(*base, True)] if max_pool else [])


def _cpp_shape(batch: str | None, dims: tuple[int, ...]) -> str:
    return "{" + ", ".join(([batch] if batch else []) + [str(d) for d in dims]) + "}"


def _py_shape(batch: str | None, dims: tuple[int, ...]) -> str:
    items = ([batch] if batch else []) + [str(d) for d in dims]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def context(spec: Spec) -> dict:
    pl = plan(spec)
    g: Geometry = pl["geometry"]
    dt = DTYPES[spec.dtype]
    off = offset_type(g)
    (D, H, W), (DO, HO, WO) = g.size, g.out
    (KD, KH, KW), (SD, SH, SW), (PD, PH, PW), (DD, DH, DW) = g.kernel, g.stride, g.padding, g.dilation
    in_dims, out_dims = (spec.C,) + tuple(spec.size), (spec.C,) + tuple(spec.out)
    batch = "n" if spec.batched else None
    ctx = {
        **{k: v for k, v in vars(spec).items()},
        "reduce": g.reduce, "adaptive": g.adaptive, "design": pl["forward"], "backward": pl["backward"],
        "D": D, "H": H, "W": W, "DO": DO, "HO": HO, "WO": WO, "KD": KD, "KH": KH, "KW": KW, "SD": SD, "SH": SH,
        "SW": SW, "PD": PD, "PH": PH, "PW": PW, "DD": DD, "DH": DH, "DW": DW,
        "ctype": dt.ctype, "dtype_headers": list(dt.headers), "aten_dtype": dt.aten, "itemsize": dt.size, "const_divisor": const_divisor(spec, g),
        "off_ctype": off.ctype, "off_aten": off.aten, "off_torch": off.torch, "off_size": off.size,
        "threads": THREADS, "unroll_max": UNROLL_MAX, "fwd_min_blocks": MIN_BLOCKS[pl["forward"]],
        "bwd_min_blocks": MIN_BLOCKS[pl["backward"] if pl["backward"] in ("scatter", "tile") else "gather"],
        "variants": forward_variants(spec),
        # the gather's and the tile backward's grouped vector loads of grad_y and offsets
        "align_grad_y": bool(pl["bwd_tiling"].get("b_gq") or pl["bwd_tiling"].get("t_gq")),
        # shapes for the binding ("-1": any batch; "n": the batch of this call) and the fake kernels
        "x_want_cpp": _cpp_shape("-1" if spec.batched else None, in_dims), "x_shape_cpp": _cpp_shape(batch, in_dims),
        "y_want_cpp": _cpp_shape("-1" if spec.batched else None, out_dims), "y_shape_cpp": _cpp_shape(batch, out_dims),
        "x_shape_py": _py_shape(batch, in_dims), "y_shape_py": _py_shape(batch, out_dims),
        **pl["tiling"], **pl["bwd_tiling"],
    }
    return ctx


def describe(spec: Spec) -> list[str]:
    pl = plan(spec)
    g: Geometry = pl["geometry"]
    t = pl["tiling"]
    what = {"avg": "average", "max": "max", "adaptive_avg": "adaptive average", "adaptive_max": "adaptive max"}[spec.op]
    lines = [f"{what} pooling, {spec.nd}-d, {spec.dtype} (float32 accumulation), computed as a 3-d pool over "
             f"(D, H, W) = {g.size} -> {g.out}{' with floor/ceil bins' if g.adaptive else f', window {g.kernel}'}."]
    if pl["forward"] == "lanes":
        lines.append(f"forward: lane t of a warp owns {t['vec']} adjacent input columns (each row one coalesced load of "
                     f"the warp's {32 * t['vec']} columns) and computes the {t['opl']} outputs whose windows start there, "
                     f"taking its right-hand halo from the next lanes by shuffles; {t['ms']} step(s) x {t['rh']} output "
                     "row(s) per warp.")
    elif pl["forward"] == "window":
        lines.append(f"forward: each thread keeps {t['vo']} outputs along W x {t['rh']} output row(s) in registers and "
                     f"streams the {t['nj']} input rows per window slice their windows cover with {t['vec'] * DTYPES[spec.dtype].size}-byte loads.")
    elif pl["forward"] == "colsum":
        lines.append(f"forward: one block per tile of {t['f_rows']} output row(s) x {t['f_cols']} output columns; each "
                     "thread sums adjacent input columns down the window rows, then each output adds its column sums "
                     "from shared memory and divides by PyTorch's divisor.")
    elif t["split"] == 1 and t["unroll"]:
        lines.append("forward: one thread per output, its whole window unrolled: every load issued first (predicated by "
                     "the bounds), then the scan in PyTorch's order.")
    elif t["split"] == 1:
        lines.append("forward: one thread per output, looping over its window (run-time bounds).")
    else:
        lines.append(f"forward: {t['split']} lanes of a warp per output, lane l taking columns l, l + {t['split']}, ... of "
                     "every window row in PyTorch's order (run-time bounds), then combined by shuffles in a fixed order.")
    if pl["forward"] == "simple" and t["row_split"] > 1:
        lines.append(f"Calls with too few outputs to fill the GPU split each window's rows over {t['row_split']} times "
                     "as many lanes (contiguous row ranges, combined the same way).")
    if g.reduce == "max":
        lines.append("Max pooling scans each window in PyTorch's order (NaN wins, ties keep the first element); with "
                     "autograd on, forward also saves each output's in-window argmax offset "
                     f"({offset_type(g).size} byte(s), not int64 indices).")
    if pl["backward"] == "scatter":
        t = pl["bwd_tiling"]
        lines.append(f"backward: per {t['s_td']} x {t['s_th']} x {t['s_tw']} tile of grad_x in shared memory, every "
                     "window that can reach it adds its gradient at its saved argmax, in "
                     f"{math.prod(t['s_phases'])} barrier-separated phase(s) of windows that share no element (fixed "
                     "order, no atomics); then the tile is written with vector stores.")
    elif pl["backward"] == "tile":
        t = pl["bwd_tiling"]
        lines.append(f"backward: each thread owns a {' x '.join(map(str, t['t_block']))} block of grad_x in registers "
                     f"and reads each of the {math.prod(t['t_nq'])} windows that can reach it once, adding its gradient "
                     "where its saved argmax names an element of the block (compile-time taps; fixed order, no "
                     "atomics, no shared memory).")
    elif pl["backward"] == "gather":
        lines.append("backward: a deterministic gather; each thread writes adjacent grad_x elements, summing grad_y "
                     "over the windows that can hold them (max pooling: where the saved argmax is the element).")
    elif pl["backward"] == "colsum":
        lines.append("backward: per tile of input rows, row sums of grad_y / divisor over the covering windows in "
                     "shared memory, then every grad_x element gathers its windows (every element written).")
    lines.append("Batch size is a run-time value; indexing that scales with it is 64-bit.")
    return lines


def module_context(spec: Spec, problem: Problem) -> dict:
    return {}


def traffic(spec: Spec, n: int) -> tuple[int, int]:
    """Fewest bytes moved at batch n. Forward reads x and writes what it returns (values, int64 indices). With
    gradients, max pooling also writes and later reads its saved argmax offsets; backward reads grad_y and writes
    grad_x."""
    n = n if spec.batched else 1
    isz = DTYPES[spec.dtype].size
    x_elems, y_elems = n * spec.C * math.prod(spec.size), n * spec.C * math.prod(spec.out)
    fwd = x_elems * isz + (y_elems * isz if spec.outputs != "indices" else 0) + (8 * y_elems if spec.outputs != "values" else 0)
    if spec.outputs == "indices":
        return fwd, fwd
    saved = 2 * y_elems * offset_type(geometry(spec)).size if spec.op in ("max", "adaptive_max") else 0
    return fwd, fwd + saved + y_elems * isz + x_elems * isz
