"""pool family: every PyTorch pooling layer (1d/2d/3d average, max, adaptive average, adaptive max) in float32,
float16 and bfloat16.

CPU tier: specs of random in-scope problems against PyTorch's own output shapes; refusals; the tiling plans.
GPU tier (@pytest.mark.gpu): forward, indices and every gradient against PyTorch for every case; NaN propagation,
ties, -inf, return_indices, unbatched input, batch 0, grad_y broadcast from y.sum(), bitwise-deterministic backward.

Exports for the generic tiers: CASES (id, problem source), HARDENING (one small float32 problem) and
random_problem(rng) (a random problem anywhere in the family's scope).
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import shutil

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kgen.errors import KgenError, Unsupported
from kgen.families import pool
from kgen.ops import chain
from kgen.problem import load_problem
from tests.families import TOLERANCE
from tests.helpers import generate_module, poison_cuda_allocator, reference_and_new, side_draw, write_problem

OPS = ("avg", "max", "adaptive_avg", "adaptive_max")
DTYPES = ("float32", "float16", "bfloat16")
MODULE = {"avg": "AvgPool", "max": "MaxPool", "adaptive_avg": "AdaptiveAvgPool", "adaptive_max": "AdaptiveMaxPool"}
FUNCTION = {"avg": "avg_pool", "max": "max_pool", "adaptive_avg": "adaptive_avg_pool", "adaptive_max": "adaptive_max_pool"}


def pool_problem(op: str, nd: int, shape: tuple, kw: dict, form: str = "module", index: int | None = None,
                 dtype: str = "float32") -> str:
    """A problem file applying one pooling op: form "module" (nn.<Op>Pool<nd>d(**kw)), "functional"
    (F.<op>_pool<nd>d(x, **kw)) or "torch" (torch.max_pool<nd>d / torch.adaptive_*_pool1d); index picks [0] or [1]
    of a (values, indices) result."""
    args = ", ".join(f"{k}={v!r}" for k, v in kw.items())
    pick = "" if index is None else f"[{index}]"
    if form == "module":
        init = f"        self.pool = nn.{MODULE[op]}{nd}d({args})\n"
        call = f"self.pool(x){pick}"
    else:
        init = ""
        prefix = "F." if form == "functional" else "torch."
        call = f"{prefix}{FUNCTION[op]}{nd}d(x{', ' + args if args else ''}){pick}"
    dt = "" if dtype == "float32" else f", dtype=torch.{dtype}"
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, x):
        return {call}


def get_inputs():
    return [torch.rand({", ".join(map(str, shape))}{dt})]


def get_init_inputs():
    return []
'''


# (op, nd, dtype, shape, kwargs, form, index)
_TABLE = [
    ("avg", 1, "float32", (2, 3, 37), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), "module", None),
    ("avg", 1, "float16", (3, 5, 64), dict(kernel_size=5, stride=1, padding=2), "functional", None),
    ("avg", 1, "bfloat16", (2, 4, 50), dict(kernel_size=4), "module", None),
    ("avg", 2, "float32", (2, 3, 21, 24), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), "module", None),
    ("avg", 2, "float16", (2, 4, 33, 29), dict(kernel_size=(3, 5), stride=(2, 1), padding=(1, 2), divisor_override=7), "functional", None),
    ("avg", 2, "bfloat16", (1, 3, 40, 48), dict(kernel_size=5, stride=1), "module", None),  # column-sum design
    ("avg", 3, "float32", (2, 3, 9, 10, 11), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), "module", None),
    ("avg", 3, "float16", (1, 2, 8, 12, 16), dict(kernel_size=2), "functional", None),
    ("avg", 3, "bfloat16", (2, 2, 7, 9, 10), dict(kernel_size=(3, 2, 3), stride=(1, 2, 2), padding=(1, 0, 1), count_include_pad=False, divisor_override=5), "module", None),
    ("max", 1, "float32", (2, 3, 45), dict(kernel_size=4, stride=2, padding=1, dilation=2, ceil_mode=True), "module", None),
    ("max", 1, "float16", (3, 4, 64), dict(kernel_size=3, stride=2, padding=1), "functional", None),
    ("max", 1, "bfloat16", (2, 3, 33), dict(kernel_size=2), "torch", None),
    ("max", 2, "float32", (3, 4, 21, 24), dict(kernel_size=3, stride=2, padding=1), "module", None),
    ("max", 2, "float16", (2, 3, 17, 19), dict(kernel_size=(2, 3), stride=(1, 2), padding=1, dilation=(2, 1), ceil_mode=True), "module", None),
    ("max", 2, "bfloat16", (2, 3, 16, 16), dict(kernel_size=2, return_indices=True), "functional", None),
    ("max", 3, "float32", (2, 2, 9, 10, 12), dict(kernel_size=3, stride=2, padding=1, return_indices=True), "module", None),
    ("max", 3, "float16", (1, 3, 8, 9, 10), dict(kernel_size=(2, 3, 3), stride=(2, 1, 2), dilation=(1, 2, 1)), "functional", None),
    ("max", 3, "bfloat16", (2, 2, 6, 8, 8), dict(kernel_size=2), "module", None),
    ("adaptive_avg", 1, "float32", (2, 3, 37), dict(output_size=5), "module", None),
    ("adaptive_avg", 1, "float16", (3, 4, 64), dict(output_size=8), "torch", None),
    ("adaptive_avg", 1, "bfloat16", (2, 3, 10), dict(output_size=7), "functional", None),
    ("adaptive_avg", 2, "float32", (2, 3, 13, 13), dict(output_size=(6, 6)), "module", None),
    ("adaptive_avg", 2, "float16", (2, 4, 28, 28), dict(output_size=7), "functional", None),
    ("adaptive_avg", 2, "bfloat16", (2, 3, 9, 11), dict(output_size=(None, 4)), "module", None),
    ("adaptive_avg", 3, "float32", (2, 2, 7, 9, 10), dict(output_size=(3, 4, 5)), "module", None),
    ("adaptive_avg", 3, "float16", (1, 2, 8, 8, 8), dict(output_size=2), "functional", None),
    ("adaptive_avg", 3, "bfloat16", (2, 2, 5, 6, 7), dict(output_size=(None, 3, 10)), "module", None),
    ("adaptive_max", 1, "float32", (2, 3, 37), dict(output_size=5, return_indices=True), "module", None),
    ("adaptive_max", 1, "float16", (3, 4, 64), dict(output_size=8), "functional", None),
    ("adaptive_max", 1, "bfloat16", (2, 3, 5), dict(output_size=8), "module", None),
    ("adaptive_max", 2, "float32", (2, 3, 13, 13), dict(output_size=(6, 6)), "functional", None),
    ("adaptive_max", 2, "float16", (2, 4, 28, 28), dict(output_size=7, return_indices=True), "module", None),
    ("adaptive_max", 2, "bfloat16", (2, 3, 9, 11), dict(output_size=(None, 4)), "module", None),
    ("adaptive_max", 3, "float32", (2, 2, 7, 9, 10), dict(output_size=(3, 4, 5), return_indices=True), "functional", None),
    ("adaptive_max", 3, "float16", (1, 2, 8, 8, 8), dict(output_size=2), "module", None),
    ("adaptive_max", 3, "bfloat16", (2, 2, 5, 6, 7), dict(output_size=(3, None, 2)), "module", None),
    # unbatched input, [0] / [1] of (values, indices), builtin forms, odd widths, the two forward fallbacks
    ("max", 2, "float32", (4, 21, 24), dict(kernel_size=3, stride=2, padding=1), "module", None),
    ("avg", 1, "float32", (3, 40), dict(kernel_size=3, stride=1, padding=1), "functional", None),
    ("adaptive_avg", 3, "float32", (2, 6, 7, 8), dict(output_size=(3, None, 5)), "module", None),
    ("max", 2, "float32", (2, 3, 15, 16), dict(kernel_size=2, return_indices=True), "functional", 0),
    ("max", 2, "float32", (2, 3, 15, 16), dict(kernel_size=3, stride=2, return_indices=True), "functional", 1),
    ("max", 1, "float32", (2, 3, 30), dict(kernel_size=3, stride=2, return_indices=True), "module", 1),
    ("max", 3, "float32", (1, 2, 6, 7, 9), dict(kernel_size=2, stride=1), "torch", None),
    ("max", 2, "float16", (2, 3, 15, 17), dict(kernel_size=3, stride=2), "module", None),  # odd W: scalar loads
    ("max", 1, "float32", (2, 3, 300), dict(kernel_size=60, stride=7, padding=3), "module", None),  # wide: one thread per output
    # wide rows: the warp-contiguous design (halo lanes 0, 1 and 2; odd widths; every dtype; indices and offsets)
    ("max", 1, "float32", (2, 3, 1000), dict(kernel_size=4, stride=2), "module", None),
    ("max", 1, "bfloat16", (2, 2, 1002), dict(kernel_size=3, stride=1, padding=1, dilation=2, return_indices=True), "functional", None),
    ("avg", 1, "float16", (2, 2, 1000), dict(kernel_size=5, stride=1, padding=2), "module", None),
    ("avg", 1, "float32", (3, 999), dict(kernel_size=3, stride=1, padding=1, ceil_mode=True, count_include_pad=False), "functional", None),
    ("max", 2, "float32", (1, 2, 9, 384), dict(kernel_size=3, stride=2, padding=1, return_indices=True), "module", None),
    ("max", 2, "float16", (2, 2, 7, 386), dict(kernel_size=3, stride=2, padding=1), "module", None),
    ("max", 3, "float32", (1, 2, 5, 6, 160), dict(kernel_size=3, stride=2, padding=1), "module", None),
    ("avg", 3, "bfloat16", (1, 2, 4, 4, 254), dict(kernel_size=(2, 2, 3), stride=(2, 2, 1), padding=(1, 0, 1)), "module", None),
    ("avg", 2, "float32", (1, 2, 100, 2048), dict(kernel_size=11), "module", None),  # the bundled window, persistent tiles
    ("avg", 2, "float32", (1, 2, 12, 5000), dict(kernel_size=5, stride=1, padding=2, ceil_mode=True), "module", None),  # column tiles
    # the scatter backward over several tiles per plane, a partial last tile, dilated windows (3 phases a dimension)
    ("max", 2, "float32", (1, 2, 150, 330), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True), "module", None),
    ("max", 3, "bfloat16", (1, 2, 20, 30, 72), dict(kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 0), dilation=(2, 1, 1), ceil_mode=True), "functional", None),
    # the walk (consecutive output slices share one input slice): a full run and a partial one, max and average
    ("max", 3, "float32", (1, 40, 17, 64, 128), dict(kernel_size=3, stride=2, padding=1), "module", None),
    ("avg", 3, "float32", (1, 40, 18, 64, 128), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), "module", None),
    # a compile sweep's draw (seed 4102): the gather backward's 32-byte float16 form took 24 candidate windows a thread
    # and spilled 8 bytes at 64 registers
    ("adaptive_max", 3, "float16", (2, 1, 16, 20, 96), dict(output_size=(None, 8, 69)), "module", None),
    # the simple forward's lane groups (simple_tiling: windows of 32 elements or more, 8 columns or more;
    # bench_pool.py --random found such bins at 8% of the copy-rate floor one thread an output): 32, 16 and 4 lanes,
    # and bins too narrow to split (one lane)
    ("adaptive_avg", 1, "bfloat16", (3, 5, 2000), dict(output_size=7), "module", None),
    ("adaptive_max", 1, "float32", (2, 3, 1500), dict(output_size=11, return_indices=True), "module", None),
    ("adaptive_max", 3, "float16", (2, 3, 19, 23, 20), dict(output_size=(3, 2, 3), return_indices=True), "functional", None),
    ("adaptive_avg", 3, "float32", (2, 3, 29, 45, 11), dict(output_size=(4, 3, 3)), "module", None),
    ("adaptive_avg", 2, "float32", (2, 3, 45, 37), dict(output_size=(4, 3)), "module", None),
    ("adaptive_max", 2, "bfloat16", (2, 2, 40, 21), dict(output_size=(5, 4), return_indices=True), "module", 0),
    # few outputs (every test shape here has): the simple forward's rows split over lanes too, 32 row lanes of 4-wide
    # bins (bench_pool.py's 3%-of-the-floor draw, one sample) and 16 column lanes x 2 row lanes of fixed windows too
    # wide for the window design
    ("adaptive_avg", 3, "float32", (1, 2, 64, 112, 16), dict(output_size=(3, 4, 5)), "functional", None),
    ("max", 2, "float32", (1, 2, 70, 130), dict(kernel_size=(12, 50), stride=(9, 20), padding=(3, 5), dilation=(2, 1), return_indices=True), "module", None),
    # 1-d windows that do not overlap, stride not dividing a vector (no lanes design): the simple forward
    ("max", 1, "float16", (2, 3, 401), dict(kernel_size=2, stride=3, padding=1, return_indices=True), "module", 1),
    ("avg", 1, "float32", (2, 3, 333), dict(kernel_size=3, stride=5), "functional", None),
]


def _case_id(op, nd, dtype, shape, kw, form, index) -> str:
    tail = f"_i{index}" if index is not None else ""
    return f"{op}{nd}d_{dtype}_{'x'.join(map(str, shape))}_{form}{tail}"


CASES: list[tuple[str, str]] = [(_case_id(*row), pool_problem(row[0], row[1], row[3], row[4], row[5], row[6], row[2]))
                                for row in _TABLE]

HARDENING: str = pool_problem("max", 2, (3, 4, 21, 24), dict(kernel_size=3, stride=2, padding=1))


# ------------------------------------------------------------------------------------------------ random problems


def _tuple_or_int(rng: random.Random, values: list[int]):
    return values[0] if len(set(values)) == 1 and rng.random() < 0.7 else tuple(values)


def _meta_result(op: str, nd: int, shape: tuple, kw: dict):
    x = torch.empty(shape, device="meta")
    return getattr(F, f"{FUNCTION[op]}{nd}d")(x, **kw)


def _windows_reach_input(size: int, k: int, s: int, p: int, d: int, out: int) -> bool:
    """Every window holds at least one input element (PyTorch's backward of an all-padding max window is not a
    gradient of anything; such problems are left out of the random draws)."""
    return all(any(0 <= o * s - p + t * d < size for t in range(k)) for o in range(out))


def case_ok(op: str, nd: int, shape: tuple, kw: dict) -> bool:
    """PyTorch takes the call and gives a non-empty output, and (max pooling) every window holds an input element."""
    try:
        result = _meta_result(op, nd, shape, dict(kw))
    except (RuntimeError, ValueError, TypeError):
        return False
    y = result[0] if isinstance(result, tuple) else result
    if y.numel() == 0 or min(y.shape[-nd:]) <= 0:
        return False
    if op != "max":
        return True
    lift = lambda v: v if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    k, s = lift(kw["kernel_size"]), lift(kw.get("stride") or kw["kernel_size"])
    p, d = lift(kw.get("padding", 0)), lift(kw.get("dilation", 1))
    return all(_windows_reach_input(n, *a) for n, *a in zip(shape[-nd:], k, s, p, d, y.shape[-nd:]))


def random_problem(rng: random.Random) -> str:
    """A random problem anywhere in the pool family's scope: every op, rank, argument, dtype and form; half the
    draws that read one item of a (values, indices) pair unpack the pair instead (`v, i = self.pool(x)`, then return
    the item read), chosen by a hash of the text so the draws stay as they were."""
    source = pool_problem(*random_case(rng))
    m = re.search(r"^        return (.+)\[([01])\]$", source, re.M)
    if m and side_draw(source, 2):
        source = source.replace(m.group(0), f"        v, i = {m.group(1)}\n        return {'vi'[int(m.group(2))]}")
    return source


def random_case(rng: random.Random) -> tuple:
    """random_problem's draw as pool_problem's arguments (op, nd, shape, kw, form, index, dtype)."""
    while True:
        op, nd, dtype = rng.choice(OPS), rng.choice((1, 2, 3)), rng.choice(DTYPES)
        hi = {1: 120, 2: 24, 3: 11}[nd]
        size = [rng.randint(1, hi) for _ in range(nd)]
        if rng.random() < {1: 0.45, 2: 0.35, 3: 0.3}[nd]:  # wide rows (the warp-contiguous design)
            size = [rng.randint(1, 5) for _ in range(nd - 1)] + [rng.randint(100, {1: 1200, 2: 500, 3: 260}[nd])]
        elif nd > 1 and rng.random() < (0.5 if op == "max" else 0.15):  # large planes: several scatter tiles, partial ones
            size = {2: [rng.randint(40, 140), rng.randint(40, 300)],
                    3: [rng.randint(8, 24), rng.randint(12, 40), rng.randint(30, 120)]}[nd]
        batched = rng.random() < 0.8
        shape = ((rng.randint(1, 3),) if batched else ()) + (rng.randint(1, 4),) + tuple(size)
        kw: dict = {}
        if op == "max" and rng.random() < 0.4:  # a CNN's downsampling (k, 2, k // 2) on rows of whole 16-element
            k = rng.choice((2, 3, 3, 3, 5))     # vectors: the gather's grouped loads (b_gq) in most dtypes
            size[-1] = 16 * rng.randint(1, 6)
            shape = shape[:-1] + (size[-1],)
            kw.update(kernel_size=k, stride=2, padding=k // 2)
        elif op in ("avg", "max"):
            kmax = 70 if nd == 1 and size[0] >= 100 and rng.random() < 0.5 else 6
            k = [rng.randint(1, max(1, min(kmax, s))) for s in size]
            d = [rng.choice((1, 1, 2, 3)) for _ in size] if op == "max" else [1] * nd
            p = [rng.randint(0, kk // 2) for kk in k]
            kw["kernel_size"] = _tuple_or_int(rng, k)
            if rng.random() < 0.7:
                kw["stride"] = _tuple_or_int(rng, [rng.randint(1, 4) for _ in size])
            if any(p) or rng.random() < 0.2:
                kw["padding"] = _tuple_or_int(rng, p)
            if op == "max" and (any(dd > 1 for dd in d) or rng.random() < 0.2):
                kw["dilation"] = _tuple_or_int(rng, d)
            if op == "max" and nd > 1 and rng.random() < 0.5:  # rows of whole 16-element blocks: the tile backward
                size[-1] = 16 * rng.randint(1, 8)
                shape = shape[:-1] + (size[-1],)
            if rng.random() < 0.4:
                kw["ceil_mode"] = True
            if op == "avg" and rng.random() < 0.4:
                kw["count_include_pad"] = False
            if op == "avg" and nd > 1 and rng.random() < 0.25:
                kw["divisor_override"] = rng.randint(1, 9)
        else:
            out = [None if rng.random() < 0.15 else rng.randint(1, s + 3) for s in size]
            kw["output_size"] = out[0] if nd == 1 or (len(set(out)) == 1 and rng.random() < 0.5) else tuple(out)
            if kw["output_size"] is None:
                kw["output_size"] = tuple(out) if nd > 1 else rng.randint(1, size[0] + 3)
        if nd == 3 and op in ("avg", "max") and rng.random() < 0.6:
            # consecutive windows share exactly one input slice ((KD - 1) * DD == SD): the window forward's walk
            k3, s3, p3, d3 = ([*v] if isinstance(v, tuple) else [v] * 3 for v in (
                kw["kernel_size"], kw.get("stride", kw["kernel_size"]), kw.get("padding", 0), kw.get("dilation", 1)))
            s3[0] = rng.randint(1, 3)
            k3[0], d3[0] = (2, s3[0]) if op == "max" and rng.random() < 0.3 else (s3[0] + 1, 1)
            p3[0] = min(p3[0], k3[0] // 2)
            size[0] = max(size[0], (k3[0] - 1) * d3[0] + 1 + rng.randint(1, 3 * s3[0]))  # two or more output slices
            shape = shape[:-3] + tuple(size)
            kw.update(kernel_size=tuple(k3), stride=tuple(s3), padding=tuple(p3))
            if op == "max":
                kw["dilation"] = tuple(d3)
        max_like = op in ("max", "adaptive_max")
        if max_like and rng.random() < 0.35:
            kw["return_indices"] = True
        forms = ["module", "module", "functional"]
        if op == "max" and "return_indices" not in kw:
            forms.append("torch")
        if nd == 1 and op in ("adaptive_avg", "adaptive_max") and "return_indices" not in kw:
            forms.append("torch")
        form = rng.choice(forms)
        returns_tuple = kw.get("return_indices", False) or (form == "torch" and op == "adaptive_max")
        index = rng.choice((None, 0, 1)) if returns_tuple else None
        if not case_ok(op, nd, shape, kw):  # a call PyTorch accepts, every max window reaching the input
            continue
        if form == "torch" and op == "max":  # torch.max_pool<nd>d has no default stride
            kw.setdefault("stride", kw["kernel_size"])
        return op, nd, shape, kw, form, index, dtype


# ------------------------------------------------------------------------------------------------------- CPU tier


def _spec(source: str):
    problem = load_problem(write_problem(source))
    return pool.match(chain(problem), problem), problem


def _eager_output(source: str):
    ns: dict = {"__name__": "ref"}
    exec(compile(source, "<problem>", "exec"), ns)
    model = ns["Model"](*ns["get_init_inputs"]())
    with torch.device("meta"):
        x = ns["get_inputs"]()[0]
    return model(torch.rand(tuple(x.shape)))


def test_random_draws_reach_every_max_backward():
    """The sweep's generator draws max pooling for every backward design, the tile backward with and without its
    grouped loads and the gather's grouped loads (b_gq, 1-d windows) among them, so GPU sweeps check them on shapes no
    table lists."""
    plans = [pool.plan(_spec(random_problem(random.Random(f"grouped:{i}")))[0]) for i in range(200)]
    tile = [pl["bwd_tiling"] for pl in plans if pl["backward"] == "tile"]
    assert len(tile) >= 8 and sum(bool(t["t_gq"]) for t in tile) >= 3 and sum(not t["t_gq"] for t in tile) >= 3
    assert sum(1 for t in tile if t["t_block"][0] > 1) >= 2  # 3-d blocks
    assert sum(1 for pl in plans if pl["backward"] == "scatter") >= 4
    assert sum(1 for pl in plans if pl["backward"] == "gather" and pl["bwd_tiling"].get("b_gq")) >= 3


def test_simple_forward_splits_wide_windows_over_lane_groups():
    """simple_tiling: a power-of-two group of 4 to 32 lanes across the window's columns, the largest that leaves each
    lane SPLIT_MIN_COLS columns of a row and SPLIT_MIN_LOADS elements; one lane where that is under 4 (windows under
    32 elements or 8 columns). The CASES reach groups of 1, 4, 16 and 32. row_split: the most lanes across the rows
    (SPLIT x row_split <= 32) that leave each ROW_SPLIT_MIN_ROWS rows, 1 where that is under 2."""
    seen, seen_rows = set(), set()
    for cid, src in CASES + [("r%d" % i, random_problem(random.Random(f"split:{i}"))) for i in range(120)]:
        spec, _ = _spec(src)
        pl = pool.plan(spec)
        if pl["forward"] != "simple":
            continue
        split, (KD, KH, KW) = pl["tiling"]["split"], pl["geometry"].kernel
        fits = [n for n in (4, 8, 16, 32) if n * pool.SPLIT_MIN_COLS <= KW and n * pool.SPLIT_MIN_LOADS <= KD * KH * KW]
        assert split == (max(fits) if fits else 1), (cid, split, pl["geometry"].kernel)
        if KD * KH * KW < 32 or KW < 8:
            assert split == 1, (cid, split)
        rows = [n for n in (2, 4, 8, 16, 32) if split * n <= 32 and n * pool.ROW_SPLIT_MIN_ROWS <= KD * KH]
        assert pl["tiling"]["row_split"] == (max(rows) if rows else 1), (cid, pl["tiling"], pl["geometry"].kernel)
        if cid[0] != "r":
            seen.add(split)
            seen_rows.add(pl["tiling"]["row_split"])
    assert {1, 4, 16, 32} <= seen, seen
    assert {1, 4, 8} <= seen_rows, seen_rows  # 1-d bins never split rows; 2-d and 3-d bins do


def test_random_benchmark_draws_are_pool_problems_at_benchmark_size():
    """bench_pool.py --random: each draw is a problem this family matches, its input 16-512 MB (within the batch's
    rounding) with no spatial side below the smallest benchmark side, its output shape PyTorch's, and its summary
    line names its call and input."""
    from tests.bench.bench_pool import SIDES, describe, random_benchmark_sources

    sources = random_benchmark_sources(24, 1)
    assert len(sources) == 24 and len(set(sources.values())) == 24
    assert set(DTYPES) == {s.split("dtype=torch.")[-1].split(")")[0] if "dtype=" in s else "float32"
                                   for s in sources.values()}
    for name, src in sources.items():
        spec, problem = _spec(src)
        x = problem.input_shapes[0]
        mb = math.prod(x) * pool.DTYPES[spec.dtype].size / 1e6
        assert 4 <= mb <= 1100, (name, x)  # 16-512 MB drawn; batch and channel counts round
        low = (SIDES[1][0],) if spec.nd == 1 else (SIDES[2][0],) * 2 if spec.nd == 2 else (SIDES[3][0][0], SIDES[3][1][0], SIDES[3][1][0])
        assert all(s >= lo for s, lo in zip(x[-spec.nd:], low)), (name, x)
        ns: dict = {"__name__": "ref"}
        exec(compile(src, "<problem>", "exec"), ns)
        with torch.device("meta"):  # PyTorch's output shape without materializing the input
            out = ns["Model"]()(*ns["get_inputs"]())
        values = out[0] if isinstance(out, tuple) else out
        assert tuple(values.shape[-spec.nd - 1:]) == (spec.C,) + spec.out, name
        line = describe(src)
        assert "pool" in line and "torch.rand(" + ", ".join(map(str, x)) in line, line


@pytest.mark.parametrize("seed", range(60))
def test_random_problem_spec_matches_pytorch(seed):
    source = random_problem(random.Random(seed))
    spec, _ = _spec(source)
    out = _eager_output(source)
    values = out[0] if isinstance(out, tuple) else out
    assert tuple(values.shape[-spec.nd - 1:]) == (spec.C,) + spec.out
    assert values.dim() == spec.nd + (2 if spec.batched else 1)
    want = "both" if isinstance(out, tuple) else "indices" if values.dtype == torch.int64 else "values"
    assert spec.outputs == want
    ctx = pool.context(spec)
    assert ctx["design"] in ("lanes", "window", "colsum", "simple") and pool.describe(spec)
    fwd, train = pool.traffic(spec, 2)
    assert 0 < fwd <= train


def spec_reference(spec, x: torch.Tensor):
    """PyTorch's own pooling op called with the spec's parameters alone: what the kernels are generated from."""
    nd = spec.nd
    if spec.op == "avg":
        kw = dict(kernel_size=spec.kernel, stride=spec.stride, padding=spec.padding, ceil_mode=spec.ceil_mode,
                  count_include_pad=spec.count_include_pad)
        if nd > 1:
            kw["divisor_override"] = spec.divisor_override
        return getattr(F, f"avg_pool{nd}d")(x, **kw)
    if spec.op == "adaptive_avg":
        return getattr(F, f"adaptive_avg_pool{nd}d")(x, spec.out)
    if spec.op == "max":
        v, i = getattr(F, f"max_pool{nd}d")(x, spec.kernel, spec.stride, spec.padding, spec.dilation, spec.ceil_mode, True)
    else:
        v, i = getattr(F, f"adaptive_max_pool{nd}d")(x, spec.out, True)
    return {"values": v, "indices": i, "both": (v, i)}[spec.outputs]


# Positional and keyword spellings of the pooling calls (a scope probe's forms): their spec must carry every argument
SPELLINGS = {
    1: ["F.avg_pool1d(x, 3, 2, 1, True, False)", "F.max_pool1d(x, 3, None, 1, 2)", "torch.max_pool1d(x, 4, 3)",
        "F.max_pool1d(x, 3, 2, return_indices=True)", "torch.avg_pool1d(x, 3, 2, 1, True, False)",
        "F.adaptive_max_pool1d(x, 7, True)[1]", "torch.adaptive_avg_pool1d(x, 5)", "F.max_pool1d_with_indices(x, 2)[1]"],
    2: ["F.avg_pool2d(x, 3, 2, 1, True, False, 2)", "F.max_pool2d(x, 3, 2, 1, 2, True)", "F.max_pool2d(x, 3, 2, 1, 2, False, True)[1]",
        "torch.max_pool2d(x, 3, [2, 1], [1, 0])", "F.avg_pool2d(x, kernel_size=3, stride=[])", "F.max_pool2d(x, 3, stride=[])",
        "F.adaptive_max_pool2d(x, (5, None), True)[1]", "F.max_pool2d_with_indices(x, 3)[0]",
        "F.avg_pool2d(x, (3, 2), (1, 2), (1, 0), False, True, None)", "F.adaptive_avg_pool2d(x, output_size=[4, 3])",
        "torch.nn.functional.max_pool2d(input=x, kernel_size=2)", "F.avg_pool2d(x, 2).contiguous()"],
    3: ["F.avg_pool3d(x, (2, 3, 1), None, 0, True, True, 3)", "F.max_pool3d(x, 2, 1, 1, 1, False, True)[0]",
        "torch.max_pool3d(x, (1, 2, 2), (1, 2, 1))", "F.adaptive_avg_pool3d(x, (None, 2, 3))"],
}


def _check_spec_reference(source: str) -> None:
    spec, problem = _spec(source)
    ns = problem.namespace
    with torch.device("meta"):
        shape = tuple(ns["get_inputs"]()[0].shape)
    x = torch.randn(shape)
    if shape[-1] > 1:
        x[..., 1] = x[..., 0]  # ties in some windows
    want, got = ns["Model"](*ns["get_init_inputs"]())(x), spec_reference(spec, x)
    want, got = (t if isinstance(t, tuple) else (t,) for t in (want, got))
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.dtype == g.dtype and w.shape == g.shape and torch.equal(w, g)


@pytest.mark.parametrize("seed", range(60))
def test_random_specs_reproduce_pytorch_on_the_cpu(seed):
    """Every argument the matcher reads (kernel, stride, padding, dilation, ceil_mode, count_include_pad,
    divisor_override, output size, which outputs) reproduces the Model's values and indices when handed back to
    PyTorch's op: a misread argument that keeps the output shape fails here without a GPU."""
    source = random_problem(random.Random(seed))
    source = re.sub(r", dtype=torch\.\w+", "", source)  # float32 on the CPU; the dtype is a field of its own
    _check_spec_reference(source)


@pytest.mark.parametrize("call", [(nd, c) for nd, calls in SPELLINGS.items() for c in calls], ids=lambda c: c[1])
def test_positional_and_keyword_spellings_reproduce_pytorch(call):
    nd, text = call
    _check_spec_reference(write_problem_call(text, {1: (2, 3, 37), 2: (2, 3, 17, 19), 3: (2, 3, 7, 9, 10)}[nd]))


@pytest.mark.parametrize("case_id,source", CASES, ids=[c[0] for c in CASES])
def test_cases_render(case_id, source):
    from kgen import emit

    gen = emit.generate(write_problem(source))
    assert gen.family == "pool"
    text = gen.files["model_new.py"]
    compile(text, "model_new.py", "exec")
    import re

    assert not re.search(r"\b(pass|try|except)\b", text, re.IGNORECASE)
    assert "torch.nn.functional" not in text.split("# ---- kgen runtime")[1] and "F." not in text.split("class ModelNew")[1]


def test_module_and_functional_forms_give_one_spec():
    kw = dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)
    a, _ = _spec(pool_problem("max", 2, (2, 3, 17, 19), kw, "module"))
    b, _ = _spec(pool_problem("max", 2, (2, 3, 17, 19), kw, "functional"))
    assert a == b


@pytest.mark.parametrize("op,nd,kw", [("max", 2, dict(kernel_size=3, stride=2, padding=1, return_indices=True)),
                                      ("adaptive_max", 3, dict(output_size=(2, 3, 4), return_indices=True))])
@pytest.mark.parametrize("unpack,index", [("v, _ = {call}\n        return v", 0), ("_, i = {call}\n        return i", 1)])
def test_a_values_indices_pair_unpacked_is_the_item_read(op, nd, kw, unpack, index):
    """`v, _ = self.pool(x); return v` (the other item never read) is the same spec as `self.pool(x)[0]`, and
    returning the indices so is `[1]`."""
    shape = (2, 3, 9, 10, 11)[:2 + nd]
    indexed = pool_problem(op, nd, shape, kw, "module", index)
    src = indexed.replace(f"return self.pool(x)[{index}]", unpack.format(call="self.pool(x)"))
    assert src != indexed
    assert _spec(src)[0] == _spec(indexed)[0]


@pytest.mark.parametrize("call", ["F.avg_pool2d(x, x.size()[2:])", "F.max_pool3d(x, kernel_size=x.shape[-3:], stride=1)",
                                  "F.avg_pool1d(x, x.shape[2] // 3, ceil_mode=True)"])
def test_window_arguments_read_from_the_input_shape_are_constants(call):
    """A pooling argument computed from the input's non-batch dims (the global pool idiom F.avg_pool2d(x, x.size()[2:]))
    is a constant of the problem (kgen.problem._fold_shape_numbers): the same spec as the literal written out."""
    nd = int(call.split("_pool")[1][0])
    shape = {1: (3, 4, 10), 2: (3, 4, 9, 10), 3: (3, 4, 7, 9, 10)}[nd]
    literal = call.replace("x.size()[2:]", "(9, 10)").replace("x.shape[-3:]", "(7, 9, 10)").replace("x.shape[2] // 3", "3")
    got, want = (_spec(write_problem_call(c, shape))[0] for c in (call, literal))
    assert got == want


def write_problem_call(call: str, shape: tuple) -> str:
    return f"""import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return {call}


def get_inputs():
    return [torch.rand{shape}]


def get_init_inputs():
    return []
"""


def test_equal_adaptive_bins_become_a_fixed_window():
    spec, _ = _spec(pool_problem("adaptive_avg", 2, (2, 3, 28, 28), dict(output_size=7)))
    ctx = pool.context(spec)
    assert not ctx["adaptive"] and (ctx["KH"], ctx["SH"]) == (4, 4) and ctx["design"] in ("lanes", "window")
    spec, _ = _spec(pool_problem("adaptive_max", 2, (2, 3, 13, 13), dict(output_size=6)))
    assert pool.context(spec)["adaptive"] and pool.context(spec)["design"] == "simple"


@pytest.mark.parametrize("kw,design", [
    (dict(kernel_size=2, stride=3, padding=1, return_indices=True), "simple"),  # gaps and int64 indices
    (dict(kernel_size=2, stride=5, dilation=2), "simple"),  # dilated, effective width 3 < 5, no lanes (5 divides no vector)
    (dict(kernel_size=2, stride=2, return_indices=True), "simple"),  # windows touch, int64 indices
    (dict(kernel_size=3, stride=3, padding=1), "window"),  # windows touch, values only
    (dict(kernel_size=2, stride=4), "window"),  # gaps, but 4 divides a vector: lanes applies, whole-vector windows
    (dict(kernel_size=4, stride=3), "window"),  # overlapping windows keep their design
    (dict(kernel_size=2, stride=2), "window"),  # whole vectors a thread
    (dict(kernel_size=4, stride=2), "lanes"),
])
def test_single_row_windows_that_do_not_overlap_take_the_simple_forward(kw, design):
    """Where the window design stored a thread's int64 indices at a stride across the warp or read the gaps between
    windows (MaxPool1d(2, 3, 1, return_indices)[1] float16: 36% of the copy-rate floor on an H100, 0.75x eager), the
    simple forward read 85%; windows that touch, values only, keep the window or lanes design (pool.disjoint_row_windows)."""
    spec, _ = _spec(pool_problem("max", 1, (2, 3, 4096), kw, index=1 if kw.get("return_indices") else None))
    assert pool.plan(spec)["forward"] == design


@pytest.mark.parametrize("nd,shape,kw,index,design", [
    (2, (2, 3, 40, 40), dict(kernel_size=3, stride=2, padding=1, return_indices=True), None, "simple"),
    (2, (2, 3, 40, 40), dict(kernel_size=2, return_indices=True), 1, "simple"),  # the indices alone
    (3, (2, 3, 4, 40, 40), dict(kernel_size=(1, 3, 3), stride=2, return_indices=True), None, "simple"),  # one plane
    (2, (2, 3, 40, 40), dict(kernel_size=3, stride=2, padding=1), None, "window"),  # values only
    (2, (2, 3, 40, 40), dict(kernel_size=2, return_indices=True), 0, "window"),  # the values alone
    (3, (2, 3, 8, 40, 40), dict(kernel_size=2, return_indices=True), None, "window"),  # windows over planes
])
def test_plane_windows_with_index_outputs_take_the_simple_forward(nd, shape, kw, index, design):
    """The window design stores a thread's int64 indices at a stride across the warp: MaxPool2d(2, return_indices)
    float16 ran 0.390 ms there on an H100 (eager 0.336) and 0.252 on the simple forward (pool.indexed_plane_windows)."""
    spec, _ = _spec(pool_problem("max", nd, shape, kw, index=index))
    assert pool.plan(spec)["forward"] == design


def test_bundled_avg_pool2d_keeps_the_tuned_design():
    spec, _ = _spec(open("kgen/problems/avg_pool2d.py").read())
    t = pool.context(spec)
    assert (t["design"], t["backward"], t["vec"], t["f_rows"], t["f_cols"], t["f_threads"]) == ("colsum", "colsum", 4, 1, 186, 512)


def test_outputs_per_thread_of_non_overlapping_windows_keep_a_row_within_32_bytes():
    """Widening a thread's outputs for 16 bytes of stores stops where windows do not overlap and a row's input segment
    would pass MIN_OUTPUTS_SEG_BYTES (AdaptiveAvgPool2d(7) on 28 x 28: 2 outputs, 32 bytes a row; 4 outputs read 64 and
    ran at 90% of the floor on an H200 against 99%); AvgPool3d(2) keeps 4 outputs (32 bytes) and overlapping windows
    still widen to 16 bytes of output."""
    def ctx(op, nd, shape, kw, dtype="float32"):
        spec, _ = _spec(pool_problem(op, nd, shape, kw, dtype=dtype))
        c = pool.context(spec)
        return c["design"], c["vo"], c["seg"]

    assert ctx("adaptive_avg", 2, (256, 512, 28, 28), dict(output_size=7)) == ("window", 2, 8)
    assert ctx("avg", 3, (8, 64, 64, 128, 128), dict(kernel_size=2)) == ("window", 4, 8)
    assert ctx("avg", 3, (8, 64, 64, 128, 128), dict(kernel_size=2), "bfloat16") == ("window", 8, 16)
    assert ctx("avg", 1, (2, 4, 50), dict(kernel_size=4), "bfloat16") == ("window", 4, 16)  # 8 would read 64 bytes
    assert ctx("avg", 1, (2, 3, 37), dict(kernel_size=3, stride=2, padding=1)) == ("window", 4, 9)  # overlapping


def test_dev_variants_still_apply(tmp_path):
    """tests/dev/pool_variants.py edits template text by exact match and overrides planning names: every variant must
    still render every benchmark problem (an edit that stopped matching, or a renamed constant, fails here rather than
    on the device), a template edit must change some rendered kernel, and rendering leaves the templates as they were."""
    from tests.bench.bench_pool import PROBLEMS, problem_source
    from tests.dev import pool_variants as pv

    paths = []
    for name, row in PROBLEMS.items():
        paths.append(tmp_path / f"{name}.py")
        paths[-1].write_text(problem_source(*row))
    default = [pv.generate(p, {})[0].files for p in paths]
    for label, overrides in pv.VARIANTS.items():
        missing = [k for k in overrides if k != "TEMPLATES" and not hasattr(pool, k)]
        assert not missing, f"variant {label} overrides names pool no longer has: {missing}"
        rendered = [pv.generate(p, overrides)[0].files for p in paths]
        if "TEMPLATES" in overrides:
            assert rendered != default, f"variant {label}'s template edits change no benchmark problem's sources"
    assert [pv.generate(p, {})[0].files for p in paths] == default


def test_aligned_gather_visits_every_window_tap_once():
    """The aligned backward's compile-time candidate arithmetic (B_R0, B_NQ, ow_first), replayed over random 1-d
    geometries: every (window, tap) landing on a real element is visited exactly once, by the thread owning it; where
    max pooling loads its first B_GQ candidates as one vector, that group never straddles a row's start or end."""
    from kgen.geometry import pool_out_size

    rng, checked, grouped = random.Random(0), 0, 0
    for _ in range(4000):
        k, s, d = rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 3)
        p = rng.randint(0, ((k - 1) * d + 1) // 2)
        W, ceil = rng.choice([1, 2, 4, 8, 16]) * rng.randint(1, 12), rng.random() < 0.5
        if (k - 1) * d + 1 > W + 2 * p:
            continue
        WO = pool_out_size(W, k, s, p, ceil, d)
        g = pool.Geometry("max", False, (1, 1, W), (1, 1, WO), (1, 1, k), (1, 1, s), (0, 0, p), (1, 1, d))
        t = pool.gather_tiling(g, rng.choice([1, 2, 4]), rng.choice([1, 2]))
        if not t["b_aligned"]:
            continue
        V, r0, nq, gq, seen = t["b_vec"], t["b_r0"], t["b_nq"], t["b_gq"], []
        grouped += gq > 0
        for iw0 in range(0, W, V):
            assert (iw0 + r0 + p) % s == 0
            first = (iw0 + r0 + p) // s
            if gq:  # the grouped load: candidates first .. first+gq-1 are wholly inside the row or wholly outside it
                assert 2 <= gq <= nq and first % gq == 0 and V == gq * s
                assert first + gq <= WO or first >= WO or first < 0
                assert first >= 0 or first + gq <= 0
            for q in range(nq):
                ow = (iw0 + r0 + p) // s + q
                for kk in range(k):
                    e = r0 + q * s + kk * d
                    if 0 <= ow < WO and 0 <= e < V:
                        assert ow * s - p + kk * d == iw0 + e
                        seen.append((ow, kk))
        want = sorted((ow, kk) for ow in range(WO) for kk in range(k) if 0 <= ow * s - p + kk * d < W)
        assert sorted(seen) == want, (k, s, d, p, W, V, ceil)
        checked += 1
    assert checked > 500 and grouped > 50, (checked, grouped)


def _random_max_pools(rng: random.Random):
    """Random fixed-window 3-d max pools (kernel, stride, padding, dilation, sizes, ceil_mode) whose every window
    holds an input element, without end: (its Geometry, (k, s, p, d, size, ceil, out))."""
    from kgen.geometry import pool_out_size

    while True:
        k = [rng.randint(1, 4) for _ in range(3)]
        s = [rng.randint(1, 3) for _ in range(3)]
        d = [rng.randint(1, 2) for _ in range(3)]
        p = [rng.randint(0, kk // 2) for kk in k]
        size = [rng.randint(1, 9) for _ in range(3)]
        ceil = rng.random() < 0.5
        if any((kk - 1) * dd + 1 > n + 2 * pp for kk, dd, n, pp in zip(k, d, size, p)):
            continue
        out = [pool_out_size(n, kk, ss, pp, ceil, dd) for n, kk, ss, pp, dd in zip(size, k, s, p, d)]
        if not all(any(0 <= o * ss - pp + t * dd < n for t in range(kk)) for n, oo, kk, ss, pp, dd in
                   zip(size, out, k, s, p, d) for o in range(oo)):
            continue  # a dilated window over padding only: PyTorch's index then names another element
        yield pool.Geometry("max", False, *map(tuple, (size, out, k, s, p, d))), (k, s, p, d, size, ceil, out)


def _max_pool_offsets(k, s, p, d, size, ceil, out, rng: random.Random):
    """In-window argmax offsets (what kgen's forward saves), an integer-valued grad_y and PyTorch's grad_x of one
    float64 3-d max pool plane."""
    x = torch.randn(1, 1, *size, dtype=torch.float64, requires_grad=True)
    y, idx = F.max_pool3d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    gen = torch.Generator().manual_seed(rng.randint(0, 1 << 30))
    grad = torch.randint(-8, 9, y.shape, dtype=torch.float64, generator=gen)
    y.backward(grad)
    flat = idx[0, 0]
    pos = [flat // (size[1] * size[2]), (flat // size[2]) % size[1], flat % size[2]]
    o = torch.meshgrid(*[torch.arange(n) for n in out], indexing="ij")
    kk = [(pos[a] - (o[a] * s[a] - p[a])) // d[a] for a in range(3)]
    return (kk[0] * k[1] + kk[1]) * k[2] + kk[2], grad[0, 0], x.grad[0, 0]


def _replay_scatter(g: pool.Geometry, t: dict, offsets: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The scatter backward's loops (templates/pool/backward_scatter.cu.j2) for one plane, in Python: tiles,
    phases, the per-phase window boxes and the in-tile test. Asserts that no two windows of one phase add to the same
    element (so the kernel's shared-memory adds do not race)."""
    (D, H, W), (DO, HO, WO) = g.size, g.out
    (KD, KH, KW), S, P = g.kernel, g.stride, g.padding
    ek = [(k - 1) * d + 1 for k, d in zip(g.kernel, g.dilation)]
    tdims, phases, box = (t["s_td"], t["s_th"], t["s_tw"]), t["s_phases"], t["s_box"]
    gx = torch.zeros(D, H, W, dtype=grad.dtype)
    for td_i in range(t["s_tiles"][0]):
        for th_i in range(t["s_tiles"][1]):
            for tw_i in range(t["s_tiles"][2]):
                i0 = (td_i * tdims[0], th_i * tdims[1], tw_i * tdims[2])
                rng = []
                for a in range(3):
                    last = min(i0[a] + tdims[a], g.size[a]) - 1
                    lo = 0 if i0[a] + P[a] < ek[a] else (i0[a] + P[a] - ek[a]) // S[a] + 1
                    rng.append((lo, min((last + P[a]) // S[a], g.out[a] - 1)))
                tile = torch.zeros(tdims, dtype=grad.dtype)
                visited = set()
                held = []  # (phase, place in the tile, gradient) of every loaded window whose argmax is in the tile
                assert math.prod(box) <= t["s_hold"] * pool.THREADS
                for i in range(math.prod(box)):
                    a, b, c = i // (box[1] * box[2]), (i // box[2]) % box[1], i % box[2]
                    o = (rng[0][0] + a, rng[1][0] + b, rng[2][0] + c)
                    if any(o[q] > rng[q][1] for q in range(3)):
                        continue
                    visited.add(o)
                    k = int(offsets[o])
                    kk = (k // (KH * KW), (k // KW) % KH, k % KW)
                    loc = tuple(o[q] * S[q] - P[q] + kk[q] * g.dilation[q] - i0[q] for q in range(3))
                    if all(0 <= loc[q] < tdims[q] for q in range(3)):
                        held.append((((a % phases[0]) * phases[1] + b % phases[1]) * phases[2] + c % phases[2], loc, grad[o]))
                for phase in range(math.prod(phases)):
                    touched = set()
                    for ph, loc, gv in held:
                        if ph == phase:
                            assert loc not in touched, "two windows of one phase add to one element"
                            touched.add(loc)
                            tile[loc] += gv
                # every window reaching the tile was visited
                for od in range(DO):
                    for oh in range(HO):
                        for ow in range(WO):
                            o = (od, oh, ow)
                            reach = all(o[a] * S[a] - P[a] <= i0[a] + tdims[a] - 1 and
                                        o[a] * S[a] - P[a] + ek[a] - 1 >= i0[a] and
                                        o[a] * S[a] - P[a] <= g.size[a] - 1 for a in range(3))
                            assert not reach or o in visited, (o, i0)
                sl = tuple(slice(i0[a], min(i0[a] + tdims[a], g.size[a])) for a in range(3))
                gx[sl] = tile[tuple(slice(0, sl[a].stop - sl[a].start) for a in range(3))]
    return gx


def test_scatter_backward_replayed_matches_autograd():
    """The max-pool scatter backward's tiling and phases (kgen.families.pool.scatter_tiling), replayed over random
    3-d geometries with small shared-memory tiles (so tiles have edges and halos): the result equals PyTorch's
    gradient exactly (integer-valued grad_y, float64), and no phase races."""
    rng, checked = random.Random(1), 0
    old = pool.SCATTER_SMEM_FLOATS
    try:
        for g, draw in _random_max_pools(rng):
            if checked == 60:
                break
            pool.SCATTER_SMEM_FLOATS = rng.choice([16, 30, 64, 1024])
            t = pool.scatter_tiling(g, rng.choice([1, 2, 4]), 1)
            if t is None:
                continue
            offsets, grad, want = _max_pool_offsets(*draw, rng)
            assert torch.equal(_replay_scatter(g, t, offsets, grad), want), (draw, t)
            checked += 1
    finally:
        pool.SCATTER_SMEM_FLOATS = old


def _replay_tile(g: pool.Geometry, t: dict, offsets: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The tile backward's loops (templates/pool/backward_tile.cu.j2) for one plane, in Python: blocks, first
    candidates (exact divisions), the rendered taps (t_rows) and the row and W validity tests. Asserts the grouped
    loads' alignment: the group starts on a multiple of its size and lies wholly inside the row or wholly outside."""
    (D, H, W), (DO, HO, WO) = g.size, g.out
    S, P = g.stride, g.padding
    block, r0, vec = t["t_block"], t["t_r0"], t["t_vec"]
    gq, gq0 = t["t_gq"], t["t_gq0"]
    gx = torch.zeros(D, H, W, dtype=grad.dtype)
    for bd in range(t["t_blocks"][0]):
        for bh in range(t["t_blocks"][1]):
            for bw in range(t["t_blocks"][2]):
                i0 = (bd * block[0], bh * block[1], bw * block[2])
                assert all((i0[a] + r0[a] + P[a]) % S[a] == 0 for a in range(3))
                o0 = [(i0[a] + r0[a] + P[a]) // S[a] for a in range(3)]
                if gq:
                    first = o0[2] + gq0
                    assert first % gq == 0 and (0 <= first and first + gq <= WO or first + gq <= 0 or first >= WO)
                acc = torch.zeros(*block, dtype=grad.dtype)
                for a, b, taps in t["t_rows"]:
                    od, oh = o0[0] + a, o0[1] + b
                    if not (0 <= od < DO and 0 <= oh < HO):
                        continue
                    for q, k, ld, lh, c, e in taps:
                        ow = o0[2] + q
                        if 0 <= ow < WO and int(offsets[od, oh, ow]) == k:
                            acc[ld, lh, c * vec + e] += grad[od, oh, ow]
                n = [min(i0[a] + block[a], g.size[a]) - i0[a] for a in range(3)]
                gx[i0[0]:i0[0] + n[0], i0[1]:i0[1] + n[1], i0[2]:i0[2] + n[2]] = acc[:n[0], :n[1], :n[2]]
    return gx


def test_tile_backward_replayed_matches_autograd():
    """The max-pool tile backward's blocks and rendered taps (kgen.families.pool.tile_tiling), replayed over random
    3-d geometries, element sizes and block caps (so blocks run past the last row and slice): the result equals
    PyTorch's gradient exactly (integer-valued grad_y, float64)."""
    rng, checked, grouped = random.Random(2), 0, 0
    old = dict(pool.TILE_ELEMS_MAX)
    try:
        for g, draw in _random_max_pools(rng):
            if checked == 80:
                break
            isz = rng.choice([2, 4])
            pool.TILE_ELEMS_MAX[isz] = rng.choice([4, 8, 16, 32])
            t = pool.tile_tiling(g, isz, 1)
            if t is None:
                continue
            offsets, grad, want = _max_pool_offsets(*draw, rng)
            assert torch.equal(_replay_tile(g, t, offsets, grad), want), (draw, t)
            checked += 1
            grouped += bool(t["t_gq"])
    finally:
        pool.TILE_ELEMS_MAX.clear()
        pool.TILE_ELEMS_MAX.update(old)
    assert grouped > 5, grouped


def test_max_backward_designs():
    """Fixed max windows take the tile backward where a block aligned to the strides fits its register budget, else
    the scatter; 1-d windows, adaptive bins and average pooling take the gather."""
    spec, _ = _spec(pool_problem("max", 2, (2, 3, 33, 40), dict(kernel_size=3, stride=2, padding=1)))
    ctx = pool.context(spec)
    assert ctx["backward"] == "tile" and ctx["t_block"] == [1, 2, 8] and ctx["t_gq"] == 4 and ctx["align_grad_y"]
    spec, _ = _spec(pool_problem("max", 2, (32, 96, 384, 384), dict(kernel_size=3, stride=2, padding=1)))
    assert pool.context(spec)["t_block"] == [1, 4, 4]  # issue 8's MaxPool2d: no rows past the plane's last
    spec, _ = _spec(pool_problem("max", 2, (2, 3, 17, 20), dict(kernel_size=3, stride=1, padding=1, dilation=2)))
    ctx = pool.context(spec)  # 5 x 5 candidate windows per element: no block within the register budget
    assert ctx["backward"] == "scatter" and ctx["s_phases"] == [1, 5, 5] and ctx["s_hold"] <= pool.SCATTER_HOLD
    spec, _ = _spec(pool_problem("max", 2, (2, 3, 30, 30), dict(kernel_size=3, stride=3)))
    assert pool.context(spec)["backward"] == "scatter"  # 2-element vectors: no block of whole vectors and strides fits
    spec, _ = _spec(pool_problem("adaptive_max", 2, (2, 3, 13, 13), dict(output_size=6)))
    assert pool.context(spec)["backward"] == "gather"  # unequal adaptive bins
    spec, _ = _spec(pool_problem("avg", 2, (2, 3, 13, 13), dict(kernel_size=3)))
    assert pool.context(spec)["backward"] == "gather"
    spec, _ = _spec(pool_problem("max", 1, (2, 3, 130), dict(kernel_size=4, stride=2)))
    assert pool.context(spec)["backward"] == "gather"  # 1-d windows
    spec, _ = _spec(pool_problem("max", 2, (2, 3, 33, 40), dict(kernel_size=3, stride=2), dtype="float16"))
    assert pool.context(spec)["backward"] == "tile"
    spec, _ = _spec(pool_problem("max", 3, (1, 2, 9, 10, 40), dict(kernel_size=3, stride=2), dtype="bfloat16"))
    assert pool.context(spec)["backward"] == "scatter"  # a 2 x 2 x 8 block and its 20 windows: over the budget
    spec, _ = _spec(pool_problem("max", 3, (1, 2, 9, 10, 40), dict(kernel_size=3, stride=2)))
    assert pool.context(spec)["t_block"] == [2, 2, 4]


def test_walk_only_where_consecutive_windows_share_one_slice():
    """MaxPool3d(3, 2, 1) at issue 8's size walks 8 output slices a work item (6 runs of 48), 4 outputs x 2 rows a
    thread; windows sharing no slice, or more than one, 2-byte max pooling and problems with few work items do not."""
    spec, _ = _spec(pool_problem("max", 3, (8, 48, 96, 96, 160), dict(kernel_size=3, stride=2, padding=1)))
    ctx = pool.context(spec)
    assert (ctx["design"], ctx["walk"], ctx["vo"], ctx["rh"]) == ("window", 8, 4, 2)
    g = pool.geometry(spec)
    assert pool.walk_slices(g, 4, 48) == 8 and pool.walk_slices(g, 2, 48) == 0  # float16 max: the packed scan
    assert pool.walk_slices(g, 4, 1) == 0  # 48 x 48 x 20 work items a sample, too few to walk
    assert pool.walk_slices(dataclasses.replace(g, out=(13,) + g.out[1:]), 4, 48) == 7  # runs of 7 and 6
    assert pool.walk_slices(dataclasses.replace(g, kernel=(2, 3, 3), stride=(1, 2, 2)), 4, 48) == 8  # KD 2, SD 1
    assert pool.walk_slices(dataclasses.replace(g, kernel=(2, 3, 3), stride=(2, 2, 2), dilation=(2, 1, 1)), 4, 48) == 8
    assert pool.walk_slices(dataclasses.replace(g, kernel=(2, 3, 3), stride=(2, 2, 2)), 4, 48) == 0  # no shared slice
    assert pool.walk_slices(dataclasses.replace(g, kernel=(3, 3, 3), stride=(1, 2, 2)), 4, 48) == 0  # two shared
    assert pool.walk_slices(dataclasses.replace(g, reduce="avg"), 2, 48) == 8  # 2-byte average pooling walks


def test_offsets_are_compact():
    spec, _ = _spec(pool_problem("max", 3, (2, 2, 9, 10, 12), dict(kernel_size=3)))
    assert pool.context(spec)["off_ctype"] == "uint8_t"
    spec, _ = _spec(pool_problem("max", 2, (1, 1, 40, 40), dict(kernel_size=20)))
    assert pool.context(spec)["off_ctype"] == "uint16_t"


@pytest.mark.parametrize("op,nd,shape,kw,message", [
    ("max", 2, (1, 2, 20, 20), dict(kernel_size=3, padding=2), "half"),
    ("avg", 2, (1, 2, 20, 20), dict(kernel_size=3, divisor_override=0), "divisor"),
    ("avg", 2, (1, 2, 20, 20), dict(kernel_size=3, stride=0), "stride"),
    ("max", 2, (1, 2, 20, 20), dict(kernel_size=3, dilation=0), "dilation"),
])
def test_invalid_arguments_refused_at_generate_time(op, nd, shape, kw, message):
    with pytest.raises(KgenError, match=message):
        _spec(pool_problem(op, nd, shape, kw, "functional"))


def test_integer_input_refused():
    source = pool_problem("max", 2, (1, 2, 8, 8), dict(kernel_size=2)).replace("torch.rand(1, 2, 8, 8)", "torch.rand(1, 2, 8, 8, dtype=torch.float64)")
    with pytest.raises(Unsupported, match="float32, float16 or bfloat16"):
        _spec(source)


def test_op_after_the_pool_refused():
    source = pool_problem("max", 2, (1, 2, 8, 8), dict(kernel_size=2)).replace("return self.pool(x)", "return torch.relu(self.pool(x))")
    with pytest.raises(Unsupported, match="outside the pool family"):
        _spec(source)


def test_plan_every_random_draw_compiles_to_a_design():
    rng = random.Random(7)
    designs = set()
    for _ in range(150):
        spec, _ = _spec(random_problem(rng))
        designs.add(pool.context(spec)["design"])
    assert {"lanes", "window", "simple"} <= designs


# ------------------------------------------------------------------------------------------------------- GPU tier


def _split(out):
    """(values or None, indices or None) of a model's result."""
    if isinstance(out, tuple):
        return out[0], out[1]
    return (None, out) if out.dtype == torch.int64 else (out, None)


def check_against_pytorch(source: str, x: torch.Tensor | None = None, grad_sum: bool = False):
    """Forward values, int64 indices and the input gradient of ModelNew against the problem's Model."""
    model, new, ns, user = reference_and_new(source)
    with torch.device("meta"):
        meta = user["get_inputs"]()[0]
    if x is None:
        torch.manual_seed(0)
        x = torch.rand(tuple(meta.shape), device="cuda").to(meta.dtype)
    tol = TOLERANCE[meta.dtype][0]
    x_ref, x_new = x.detach().clone().requires_grad_(True), x.detach().clone().requires_grad_(True)
    ref_v, ref_i = _split(model(x_ref))
    poison_cuda_allocator(4 * x.numel() + 4096)
    new_v, new_i = _split(new(x_new))
    if ref_v is not None:
        assert new_v.dtype == ref_v.dtype and new_v.shape == ref_v.shape
        torch.testing.assert_close(new_v, ref_v, atol=tol, rtol=tol, equal_nan=True)
    if ref_i is not None:
        assert new_i.dtype == torch.int64 and torch.equal(new_i, ref_i)
    if ref_v is not None and x.numel():
        if grad_sum:
            ref_v.sum().backward()
            new_v.sum().backward()
        else:
            g = torch.randn(ref_v.shape, device="cuda").to(ref_v.dtype)
            ref_v.backward(g)
            poison_cuda_allocator(4 * x.numel() + 4096)
            new_v.backward(g)
        torch.testing.assert_close(x_new.grad, x_ref.grad, atol=tol, rtol=tol, equal_nan=True)
    return new, x_new


def _max2d(**kw):
    return pool_problem("max", 2, (2, 3, 11, 12), dict(kernel_size=3, stride=2, padding=1, return_indices=True, **kw))


def _max2d_of(dtype: str) -> str:
    return _max2d().replace("torch.rand(2, 3, 11, 12)", f"torch.rand(2, 3, 11, 12, dtype=torch.{dtype})")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_propagates_and_the_last_nan_wins(dtype):
    # 2-byte types scan packed pairs and hand an item with a NaN to the float scan: both paths run here
    x = torch.rand(2, 3, 11, 12, device="cuda")
    x[0, 0, 2, 3] = float("nan")
    x[0, 0, 3, 4] = float("nan")  # the same windows: PyTorch keeps the last NaN in scan order
    x[1, 2, :, 5] = float("nan")
    check_against_pytorch(_max2d_of(dtype), x.to(getattr(torch, dtype)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_signed_zero_ties_keep_pytorchs_element(dtype):
    # -0.0 == +0.0: the first in scan order is the max, its sign included (assert_close cannot see the sign)
    x = torch.where(torch.rand(2, 3, 11, 12, device="cuda") < 0.5, -0.0, 0.0).to(getattr(torch, dtype))
    model, new, _, _ = reference_and_new(_max2d_of(dtype))
    (ref_v, ref_i), (new_v, new_i) = model(x), new(x)
    assert torch.signbit(ref_v).any() and not torch.signbit(ref_v).all()
    assert torch.equal(torch.signbit(new_v), torch.signbit(ref_v)) and torch.equal(new_i, ref_i)


@pytest.mark.gpu
@pytest.mark.parametrize("value", [0.0, float("-inf")])
def test_ties_and_minus_inf_pick_pytorchs_element(value):
    x = torch.full((2, 3, 11, 12), value, device="cuda")
    check_against_pytorch(_max2d(), x)
    check_against_pytorch(pool_problem("max", 3, (1, 2, 5, 6, 7), dict(kernel_size=3, stride=1, padding=1, dilation=(1, 1, 2), return_indices=True)),
                          torch.full((1, 2, 5, 6, 7), value, device="cuda"))
    check_against_pytorch(pool_problem("adaptive_max", 2, (2, 3, 9, 11), dict(output_size=(4, 5), return_indices=True)),
                          torch.full((2, 3, 9, 11), value, device="cuda"))


def _split_max1d() -> str:
    """Adaptive max bins of 138 elements: the simple forward's 16-lane groups (each lane every 16th element)."""
    src = pool_problem("adaptive_max", 1, (2, 3, 1500), dict(output_size=11, return_indices=True))
    spec, _ = _spec(src)
    assert pool.plan(spec)["tiling"] == {"split": 16, "row_split": 1, "col_batch": pool.COL_BATCH,
                                         "row_split_fill": pool.ROW_SPLIT_FILL, "unroll": False}
    return src


@pytest.mark.gpu
@pytest.mark.parametrize("value", [0.0, float("-inf")])
def test_split_windows_ties_pick_pytorchs_element(value):
    """The lane groups combine to the sequential scan's element: a tie across lanes keeps the first in scan order,
    and a bin that is all 0 or all -inf keeps PyTorch's initial index."""
    x = torch.rand(2, 3, 1500, device="cuda")
    x[0, 1, 140] = x[0, 1, 150] = x[0, 1, 141] = 2.0  # bin 1 (136-273): lanes 4, 14 and 5
    x[1, 2, 300:420] = 3.0  # every lane of bin 2 holds the maximum
    check_against_pytorch(_split_max1d(), x)
    check_against_pytorch(_split_max1d(), torch.full((2, 3, 1500), value, device="cuda"))


@pytest.mark.gpu
def test_split_windows_nan_is_the_last_in_scan_order():
    """NaNs in one bin on different lanes: the group keeps the last in scan order, as PyTorch's scan does."""
    x = torch.rand(2, 3, 1500, device="cuda")
    x[0, 0, 5] = x[0, 0, 7] = x[0, 0, 100] = float("nan")  # bin 0: lanes 5, 7 and 4
    x[1, 1, 1400] = float("nan")
    check_against_pytorch(_split_max1d(), x)


def _row_split_max2d() -> str:
    """Adaptive max bins of 10-11 rows x 3-4 columns: too narrow to split columns, so one lane a row at a large
    batch and 4 lanes (contiguous row ranges) where the call has few outputs."""
    src = pool_problem("adaptive_max", 2, (2, 3, 41, 10), dict(output_size=(4, 3), return_indices=True))
    spec, _ = _spec(src)
    assert pool.plan(spec)["tiling"] == {"split": 1, "row_split": 4, "col_batch": pool.COL_BATCH,
                                         "row_split_fill": pool.ROW_SPLIT_FILL, "unroll": False}
    return src


def _one_lane_batch(source: str) -> int:
    """A batch whose outputs times SPLIT fill at least 1 / ROW_SPLIT_FILL of any GPU's resident threads (SMs x the
    most threads an SM holds), so the launcher keeps one group of SPLIT lanes an output."""
    spec, _ = _spec(source)
    props = torch.cuda.get_device_properties(0)
    per_sample = spec.C * math.prod(spec.out) * pool.plan(spec)["tiling"]["split"]
    return -(-props.multi_processor_count * props.max_threads_per_multi_processor // (pool.ROW_SPLIT_FILL * per_sample))


@pytest.mark.gpu
def test_row_split_ties_and_nan_follow_pytorchs_scan():
    """Row ranges on different lanes: a tie keeps the first element in scan order, the last NaN wins, an all-equal
    bin keeps PyTorch's initial index; the same at a batch that takes the one-lane launch."""
    src = _row_split_max2d()
    x = torch.rand(2, 3, 41, 10, device="cuda")
    x[0, 0, 1, 2] = x[0, 0, 5, 0] = x[0, 0, 9, 1] = 2.0  # bin (0, 0), rows 0-10: lanes 0, 2 and 3
    x[0, 1, 2, 1] = x[0, 1, 8, 0] = float("nan")  # lanes 1 and 3
    x[1, 2, 20:31, 6:10] = 0.5  # every lane of bin (2, 2)
    check_against_pytorch(src, x)
    big = torch.rand(_one_lane_batch(src), 3, 41, 10, device="cuda")
    big[:2] = x
    check_against_pytorch(src, big)


def _takes_row_split(source: str) -> bool:
    pl = pool.plan(_spec(source)[0])
    return pl["forward"] == "simple" and pl["tiling"]["row_split"] > 1


ROW_SPLIT_CASES = [(cid, src) for cid, src in CASES if _takes_row_split(src)]


def test_row_split_cases_cover_the_simple_forwards_lane_shapes():
    """The CASES that reach the simple forward's row split (at their own small shapes, every GPU test of CASES runs
    that launch): one lane a row, column lanes too, 32 row lanes, max with indices and average."""
    tilings = {(t["split"], t["row_split"]) for t in (pool.plan(_spec(src)[0])["tiling"] for _, src in ROW_SPLIT_CASES)}
    assert len(ROW_SPLIT_CASES) >= 5 and (1, 32) in tilings and any(s > 1 for s, _ in tilings), tilings
    ops = {next(o for o in ("adaptive_avg", "adaptive_max", "avg", "max") if cid.startswith(o)) for cid, _ in ROW_SPLIT_CASES}
    assert ops >= {"adaptive_avg", "adaptive_max", "max"}, ops


def _ties_and_nan(shape) -> torch.Tensor:
    """Random values with a tie across rows 1, 5 and 9 of bin (0, 0) of plane 0, NaNs on rows 2 and 8 of plane 1's,
    and one constant bin in the last plane (adaptive (4, 3) bins of a 41 x 10 plane)."""
    x = torch.rand(shape)
    x[0, 0, 1, 2] = x[0, 0, 5, 0] = x[0, 0, 9, 1] = 2.0
    x[0, 1, 2, 1] = x[0, 1, 8, 0] = float("nan")
    x[-1, -1, 20:31, 6:10] = 0.5
    return x


HOST_SIMPLE = [(cid, src, None) for cid, src in ROW_SPLIT_CASES if "float32" in cid] + [
    ("ties_and_nan", _row_split_max2d(), _ties_and_nan((2, 3, 41, 10)))]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
@pytest.mark.parametrize("cid,source,x", HOST_SIMPLE, ids=[c for c, _, _ in HOST_SIMPLE])
def test_simple_forward_on_the_host_matches_pytorch_in_both_launches(tmp_path, cid, source, x):
    """GPU-free: the simple forward's text run on the CPU under the host shim (tests/host_pool.py), launched with one
    lane group of SPLIT lanes an output (RS = 1) and with the rows split too (RS = ROW_SPLIT): values and int64
    indices against PyTorch (max: exactly, ties and NaN by PyTorch's scan; average: within float32 rounding)."""
    from kgen import emit
    from tests.host_pool import run_simple_forward

    gen = emit.generate(write_problem(source))
    spec, problem = _spec(source)
    model = problem.namespace["Model"](*problem.namespace["get_init_inputs"]())
    if x is None:
        torch.manual_seed(0)
        x = torch.randn(problem.namespace["get_inputs"]()[0].shape)
    ref = model(x)
    ref_y, ref_i = ref if isinstance(ref, tuple) else (ref, None)
    for rs in (1, pool.plan(spec)["tiling"]["row_split"]):
        y, idx = run_simple_forward(gen.files["kernel.cu"], gen.name, rs, ref_i is not None, x, tuple(ref_y.shape),
                                    tmp_path / f"rs{rs}")
        torch.testing.assert_close(y, ref_y, atol=1e-6, rtol=1e-5, equal_nan=True, msg=lambda m: f"RS={rs}: {m}")
        if ref_i is not None:
            assert torch.equal(idx, ref_i), f"RS={rs}: indices differ at {(idx != ref_i).nonzero()[:5].tolist()}"


# Small windows the simple forward scans unrolled (pool.UNROLL_WINDOW_MAX): padding, dilation and ceil_mode clipping,
# disjoint 1-d windows, adaptive bins narrower than the widest one, and average pooling's divisors
HOST_UNROLL = [
    ("max2d_k3s2p1_d12_ceil_idx", pool_problem("max", 2, (2, 3, 13, 17), dict(kernel_size=3, stride=2, padding=1,
                                               dilation=(1, 2), ceil_mode=True, return_indices=True))),
    ("max1d_k2s3p1_idx", pool_problem("max", 1, (2, 3, 50), dict(kernel_size=2, stride=3, padding=1, return_indices=True))),
    ("adaptive_max2d_4x5_idx", pool_problem("adaptive_max", 2, (2, 3, 9, 11), dict(output_size=(4, 5), return_indices=True))),
    ("avg1d_k3s5p1_exclude_pad", pool_problem("avg", 1, (2, 3, 61), dict(kernel_size=3, stride=5, padding=1,
                                                                            count_include_pad=False))),
    ("adaptive_avg2d_4x6", pool_problem("adaptive_avg", 2, (2, 3, 10, 13), dict(output_size=(4, 6)))),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
@pytest.mark.parametrize("cid,source", HOST_UNROLL, ids=[c for c, _ in HOST_UNROLL])
def test_unrolled_window_scan_on_the_host_matches_pytorch(tmp_path, cid, source):
    """GPU-free: the simple forward's unrolled window (every load first, then the scan) run under the host shim
    against PyTorch, values and int64 indices exactly (average: within float32 rounding), on random inputs and, for
    max pooling, on ties inside a window, NaN and all -inf planes; the rolled scan (UNROLL_WINDOW_MAX = 0) gives the
    same bits."""
    from kgen import emit
    from tests.host_pool import run_simple_forward

    spec, problem = _spec(source)
    pl = pool.plan(spec)
    assert pl["forward"] == "simple" and pl["tiling"]["unroll"], pl["tiling"]
    gen = emit.generate(write_problem(source))
    assert "the whole window unrolled" in gen.files["kernel.cu"]
    model = problem.namespace["Model"](*problem.namespace["get_init_inputs"]())
    torch.manual_seed(0)
    shape = problem.namespace["get_inputs"]()[0].shape
    inputs = [torch.randn(shape)]
    if "max" in cid:
        x = torch.randint(0, 3, shape).float()  # ties in most windows
        x.view(-1)[7] = float("nan")
        x[-1, -1] = float("-inf")
        inputs.append(x)
    for i, x in enumerate(inputs):
        ref = model(x)
        ref_y, ref_i = ref if isinstance(ref, tuple) else (ref, None)
        y, idx = run_simple_forward(gen.files["kernel.cu"], gen.name, 1, ref_i is not None, x, tuple(ref_y.shape),
                                    tmp_path / f"in{i}")
        torch.testing.assert_close(y, ref_y, atol=1e-6, rtol=1e-5, equal_nan=True)
        if ref_i is not None:
            assert torch.equal(idx, ref_i), f"indices differ at {(idx != ref_i).nonzero()[:5].tolist()}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool, "UNROLL_WINDOW_MAX", 0)
        rolled = emit.generate(write_problem(source))
    assert "the whole window unrolled" not in rolled.files["kernel.cu"]
    y2, idx2 = run_simple_forward(rolled.files["kernel.cu"], rolled.name, 1, ref_i is not None, inputs[-1],
                                  tuple(ref_y.shape), tmp_path / "rolled")
    assert torch.equal(y2.view(-1).nan_to_num(), y.view(-1).nan_to_num()) and torch.equal(idx2, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("cid,source", ROW_SPLIT_CASES, ids=[c for c, _ in ROW_SPLIT_CASES])
def test_simple_forward_one_lane_launch_at_a_batch_that_fills_the_gpu(cid, source):
    """The simple forward's other launch (one group of SPLIT lanes an output, rows not split), values, indices and
    gradients against PyTorch, on the CASES whose own shapes take the row split."""
    spec, _ = _spec(source)
    assert spec.batched
    x = torch.randn(_one_lane_batch(source), spec.C, *spec.size, device="cuda").to(getattr(torch, spec.dtype))
    check_against_pytorch(source, x)


@pytest.mark.gpu
@pytest.mark.parametrize("op,shape,kw,dtype", [
    ("max", (2, 3, 13, 10, 16), dict(kernel_size=3, stride=2, padding=1), "float32"),  # 7 output slices: 3, 3, 1
    ("max", (1, 2, 11, 9, 12), dict(kernel_size=(2, 3, 3), stride=(1, 2, 2), return_indices=True), "float32"),
    ("max", (1, 2, 12, 8, 10), dict(kernel_size=2, stride=2, dilation=(2, 1, 1), ceil_mode=True), "float32"),
    ("avg", (2, 2, 13, 9, 12), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), "float32"),
    ("avg", (1, 3, 10, 9, 16), dict(kernel_size=(2, 3, 3), stride=(1, 1, 2), padding=(1, 1, 0)), "bfloat16"),
])
def test_walked_windows_match_pytorch(monkeypatch, op, shape, kw, dtype):
    """The walk on small shapes (the threshold lifted, runs of 3 slices): values, indices and grad_x; max pooling
    also on ties across slices, NaN and -inf."""
    monkeypatch.setattr(pool, "WALK_MIN_ITEMS", 0)
    monkeypatch.setattr(pool, "WALK_SLICES", 3)
    source = pool_problem(op, 3, shape, kw, dtype=dtype)
    spec, _ = _spec(source)
    assert pool.context(spec)["walk"] == 3
    check_against_pytorch(source)
    if op == "max":
        torch.manual_seed(1)
        x = torch.randint(0, 3, shape, device="cuda").float()  # many ties, within and across slices
        x.view(-1)[::97] = float("nan")
        x.view(-1)[5::89] = float("-inf")
        check_against_pytorch(source, x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_half_type_ties_match_pytorch(dtype):
    x = (torch.randint(0, 4, (2, 3, 11, 12), device="cuda").to(getattr(torch, dtype)))  # many ties
    check_against_pytorch(_max2d_of(dtype), x)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [0, 10, 12, 14, 22, 27, 36])  # 10, 14: the tile backward's grouped loads (t_gq)
def test_gradient_of_sum_reads_the_broadcast_grad(case):
    check_against_pytorch(CASES[case][1], grad_sum=True)


@pytest.mark.gpu
def test_unbatched_input():
    check_against_pytorch(pool_problem("max", 2, (4, 21, 24), dict(kernel_size=3, stride=2, padding=1, return_indices=True)))
    check_against_pytorch(pool_problem("adaptive_avg", 1, (3, 17), dict(output_size=5)))


@pytest.mark.gpu
@pytest.mark.parametrize("case", [6, 12, 15, 24])
def test_batch_is_a_runtime_value_and_may_be_zero(case):
    source = CASES[case][1]
    model, new, ns, user = reference_and_new(source)
    with torch.device("meta"):
        meta = user["get_inputs"]()[0]
    for n in (5, 0):
        x = torch.rand((n,) + tuple(meta.shape[1:]), device="cuda").to(meta.dtype)
        check_against_pytorch(source, x)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [9, 12, 15, 6, 31])
def test_backward_is_deterministic(case):
    source = CASES[case][1]
    new, x = check_against_pytorch(source)
    grads = []
    for _ in range(2):
        x.grad = None
        v, _ = _split(new(x))
        v.backward(torch.ones_like(v) * 0.37)
        grads.append(x.grad.clone())
    assert torch.equal(grads[0], grads[1])


@pytest.mark.gpu
def test_non_contiguous_and_channels_last_inputs():
    source = CASES[12][1]
    x = torch.rand(3, 4, 24, 21, device="cuda").transpose(2, 3)
    check_against_pytorch(source, x)
    check_against_pytorch(source, torch.rand(3, 4, 21, 24, device="cuda").to(memory_format=torch.channels_last))
    check_against_pytorch(source, torch.rand(3 * 4 * 21 * 24 + 1, device="cuda")[1:].view(3, 4, 21, 24))  # misaligned


@pytest.mark.gpu
@pytest.mark.parametrize("case", [14, 3])
def test_opcheck_and_compile_fullgraph(case):
    model, new, ns, user = reference_and_new(CASES[case][1])
    with torch.device("meta"):
        meta = user["get_inputs"]()[0]
    x = torch.rand(tuple(meta.shape), device="cuda").to(meta.dtype).requires_grad_(True)
    torch.library.opcheck(getattr(torch.ops, ns["KGEN_NAMESPACE"]).forward, (x,))
    compiled = torch.compile(new, fullgraph=True)
    got, want = _split(compiled(x)), _split(new(x))
    for a, b in zip(got, want):
        if a is not None:
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    v = got[0]
    v.float().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


# ------------------------------------------------------------------------------------ full size (GPU, slow)


@pytest.mark.gpu
@pytest.mark.slow
def test_bundled_problem_full_size():
    """16x64x2048x2048 (4.3 G elements): forward against PyTorch at full size; backward against PyTorch's
    backward on batch slices (PyTorch's own backward fails at this size)."""
    ns = generate_module(open("kgen/problems/avg_pool2d.py").read(), name="avg_pool2d")
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    ref = torch.nn.AvgPool2d(11)
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
@pytest.mark.parametrize("op", ["avg", "max"])
def test_output_over_2_31_elements(op):
    """Stride-1 pooling whose output has more than 2^31 elements, forward and backward, against PyTorch on slices."""
    shape, kw = (2, 64, 4096, 4100), dict(kernel_size=2, stride=1)
    ns = generate_module(pool_problem(op, 2, shape, kw, "module", None, "float32"))
    model = ns["ModelNew"](*ns["get_init_inputs"]()).cuda()
    ref = torch.nn.AvgPool2d(**kw) if op == "avg" else torch.nn.MaxPool2d(**kw)
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

