"""Family conv2d_epilogue: nn.Conv2d on the input, then any program of pointwise ops, fused, forward and backward.

Scope:
- nn.Conv2d on the model's single NCHW float32 input: any channels, kernel, stride, dilation, padding (ints, pairs,
  'valid', 'same', also where 'same' pads one more on the bottom/right), groups (1, general, depthwise), bias on or
  off; padding_mode 'zeros' (others are refused);
- then a pointwise program (kgen/pointwise.py's table): a DAG where each op may use any earlier value, with Python
  numbers, 0-d tensor constants and float32 parameters / buffers that are scalars or per-channel ((C,1,1), (1,C,1,1),
  or (C,) read through a view: self.b.view(1, -1, 1, 1)) as the other operands; nothing at all (a lone convolution) is in scope too.
- then stages, each a shape-changing op and the pointwise program after it: 2-d pooling (avg / max with every
  argument, adaptive avg / max to any size), reductions (sum, mean, amax, amin, logsumexp, max/min over a dim
  (values), max/min of all) over any dims with or without keepdim, and views (squeeze, flatten, view, reshape) that
  keep the batch as dim 0 (where PyTorch would not at another batch size, the module refuses that size: batch_rule).
  Anything else is refused naming the op.

Kernels (templates/conv2d_epilogue/kernel.cu.j2, which includes one file per part: gemm, forward, halo, adjoint,
grad_x, grad_w, direct, launch): implicit GEMMs on tensor cores, 3xTF32 accumulated in float32 registers when
torch.backends.cudnn.allow_tf32 is off, plain TF32 when it is on (as cuDNN), picked at call time; operands from
halo tiles where the shape allows (halo_plan, halo_dx_plan, halo_w_plan), else an im2col loader. The forward
applies the program to the accumulator; training saves the conv output z only when the program's derived backward
reads it (recomputing z would cost a second convolution, so storing always wins when it is read at all).
Stages after the convolution (templates/conv2d_epilogue/tail.cu.j2) are separate kernels over the conv program's
output, each with its program fused; their backward gathers (no atomics), so every gradient is deterministic.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn as nn

from kgen import cudnn_tf32
from kgen.errors import Unsupported
from kgen.family import (REPLAY_LOCK, attr_expr, conv2d_default_init, holder_modules, registered_tensors,
                         template_context)
from kgen.geometry import ceil_div, conv_out_size, pool_out_size, windows_disjoint
from kgen.ops import CONV_FUNCS, Op, attribute, between, normalize, pointwise_program, tensor_view_source, where
from kgen.pointwise import Names, Program, derive_backward, emit_backward, emit_forward
from kgen.problem import Problem

NAME = "conv2d_epilogue"
TEMPLATES = {"kernel.cu": "conv2d_epilogue/kernel.cu.j2", "binding.cpp": "conv2d_epilogue/binding.cpp.j2"}
MODEL_TEMPLATE = "conv2d_epilogue/model_new.py.j2"

BK = 16  # k slice of every GEMM tile
STAGES = 3  # cp.async pipeline depth
WG_TARGET_CTAS = 1024  # grad_w: split (n, oh, ow) until about this many CTAs run
WG_MIN_CHUNK = 256  # ... but never below this many (n, oh, ow) values per split
EB_TARGET_BLOCKS = 1024  # the adjoint kernel: about this many (channel, image range) blocks
DIRECT_TAPS_MAX = 49  # one input channel per group and at most this many taps: the direct kernels (registers per tap)
DIRECT_DX_TAPS_4BLOCKS = 16  # direct grad_x: at most this many taps at 4 blocks an SM (its register cap: 64)
DIRECT_ROWS_OUT = 8  # output rows per thread of the direct forward (one load of each input row serves them all)
TAB_MAX = 4096  # tap tables (8 bytes a tap, two per module) up to this many taps live in constant memory


@dataclass(frozen=True)
class Param:
    """A tensor the program reads: its qualified attribute name, 'scalar' or 'channel', shape, and what it is on
    Model ('parameter', 'buffer', 'buffer_np' (not persistent) or 'attribute' (a plain tensor attribute))."""

    name: str
    broadcast: str
    shape: tuple[int, ...]
    kind: str


@dataclass(frozen=True)
class Spec:
    CI: int
    H: int
    W: int
    CO: int
    G: int
    KH: int
    KW: int
    SH: int
    SW: int
    PH: int  # top / left padding ('same' may pad one more at the bottom / right: HO, WO say how far outputs go)
    PW: int
    PH_END: int  # bottom / right padding: equal to PH / PW except for 'same' with an even reach
    PW_END: int
    DH: int
    DW: int
    HO: int
    WO: int
    HAS_BIAS: bool
    weight_name: str
    bias_name: str | None
    program: Program
    params: tuple[Param, ...]
    stages: tuple["Stage", ...] = ()
    dtype: str = "float32"


REDUCE_KINDS = ("sum", "mean", "amax", "amin", "logsumexp", "max_dim", "min_dim", "max_all", "min_all")
SHAPE_KINDS = frozenset(REDUCE_KINDS) | {"pool", "view"}


@dataclass(frozen=True)
class Stage:
    """A shape-changing op after the convolution (2-d pooling, a reduction or a view) and the pointwise program that
    follows it, up to the next such op or the output. Shapes are the traced ones; while `batched`, dim 0 is the batch
    (a run-time size). Reductions: REDUCE_KINDS, plus window_max (adaptive max pooling to 1x1: the first maximum,
    the last NaN, as PyTorch's pooling kernels)."""

    kind: str  # pool | reduce | view
    op: str  # pool: avg | max | adaptive_avg | adaptive_max; reduce: REDUCE_KINDS or window_max; view: view, or
    #          squeeze_batch / fixed_batch (a view of the batched value that PyTorch would apply differently at a batch
    #          of 1 / at any batch but the traced one)
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    in_batched: bool
    out_batched: bool
    window: tuple[int, ...] = ()  # avg / max pooling: KH, KW, SH, SW, PH, PW, DH, DW
    ceil_mode: bool = False  # avg / max pooling (out_shape already says where the windows end)
    count_include_pad: bool = True
    divisor: int = 0  # avg pooling's divisor_override (0: none)
    dims: tuple[int, ...] = ()  # reductions
    keepdim: bool = False
    program: Program = Program(())
    params: tuple[Param, ...] = ()


# ------------------------------------------------------------------------------------------------------ matching


def _conv_node(gm: fx.GraphModule) -> fx.Node | None:
    """The convolution that reads the model's only input, when that is the input's only use: an nn.Conv2d call, or
    F.conv2d / torch.conv2d of the input (ops.normalize checks that its weight and bias are the model's tensors)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1 or len(placeholders[0].users) != 1:
        return None
    user = next(iter(placeholders[0].users))
    if user.op == "call_module" and type(gm.get_submodule(user.target)) is nn.Conv2d:
        return user
    if user.op == "call_function" and user.target in CONV_FUNCS and user.args and user.args[0] is placeholders[0]:
        return user
    return None


def _meta_model(problem: Problem) -> nn.Module:
    with torch.device("meta"):
        return problem.namespace["Model"](*problem.init_args)


def _param_kind(model: nn.Module, name: str) -> str:
    owner_path, _, leaf = name.rpartition(".")
    owner = model.get_submodule(owner_path) if owner_path else model
    if leaf in owner._parameters:
        return "parameter"
    if leaf in owner._buffers:
        return "buffer_np" if leaf in owner._non_persistent_buffers_set else "buffer"
    return "attribute"


def _params(program: Program, model: nn.Module, shape: tuple[int, ...], at: str) -> tuple[Param, ...]:
    """The program's tensors as Params, each checked against the value shape it is applied to."""
    out = []
    for ref in program.params:
        t = attribute(model, ref.name)
        out.append(Param(ref.name, ref.broadcast, tuple(t.shape), _param_kind(model, ref.name)))
        if ref.broadcast == "channel" and t.numel() != shape[1]:
            raise Unsupported(f"{at}: self.{ref.name} of shape {tuple(t.shape)} is read per channel but the value it "
                              f"applies to has {shape[1]} channels")
    return tuple(out)


def _stage(op: Op, in_shape: tuple[int, ...], batched: bool) -> Stage:
    """The shape-changing op as a Stage (its program is filled in by the caller)."""
    out_shape = tuple(op.shape)
    if op.kind == "view":
        if batched and (not out_shape or out_shape[0] != in_shape[0]):
            raise Unsupported(f"{op.where}: {op.label} gives shape {out_shape} from {in_shape}, moving the batch dim; "
                              f"the {NAME} family keeps the batch as dim 0 until a reduction removes it")
        # Where PyTorch's own result would move the batch dim at another batch size, the binding refuses that size
        # (BATCH_NOT_ONE, BATCH_EXACT): squeeze() also drops a batch of 1; view(2, -1) keeps 2 rows at any batch.
        kind = ("squeeze_batch" if op.params.get("squeeze_dim0") else "fixed_batch" if op.params.get("fixed_dim0")
                else "view") if batched else "view"
        return Stage("view", kind, in_shape, out_shape, batched, batched)
    if op.kind == "pool":
        p = op.params
        if p["nd"] != 2 or len(in_shape) != 4:
            raise Unsupported(f"{op.where}: {op.label} on a {len(in_shape)}-d value; after the convolution the {NAME} "
                              "family pools (N, C, H, W) values in 2-d")
        if p["op"].startswith("adaptive") and p["output_size"] == (1, 1):  # PyTorch: a mean / max over (H, W)
            kind = "mean" if p["op"] == "adaptive_avg" else "window_max"
            return Stage("reduce", kind, in_shape, out_shape, batched, batched, dims=(2, 3), keepdim=True)
        if p["op"].startswith("adaptive"):
            return Stage("pool", p["op"], in_shape, out_shape, batched, batched)
        window = tuple(v for pair in (p["kernel"], p["stride"], p["padding"], p["dilation"]) for v in pair)
        want = tuple(pool_out_size(s, k, st, pd, p["ceil_mode"], d) for s, k, st, pd, d in
                     zip(in_shape[2:], p["kernel"], p["stride"], p["padding"], p["dilation"]))
        if want != out_shape[2:]:
            raise AssertionError(f"kgen's pool output size {want} disagrees with PyTorch's {out_shape[2:]}")
        return Stage("pool", p["op"], in_shape, out_shape, batched, batched, window=window, ceil_mode=p["ceil_mode"],
                     count_include_pad=p["count_include_pad"], divisor=int(p["divisor_override"] or 0))
    p = op.params
    if p.get("dtype") not in (None, torch.float32):
        raise Unsupported(f"{op.where}: {op.label} with dtype={p['dtype']}; the {NAME} family reduces in float32")
    if not in_shape:
        raise Unsupported(f"{op.where}: {op.label} of a 0-d value; drop it (it returns its input)")
    if op.kind in ("max_dim", "min_dim") and len(p["dims"]) != 1:
        raise Unsupported(f"{op.where}: {op.label} over dims {p['dims']}")
    return Stage("reduce", op.kind, in_shape, out_shape, batched, batched and 0 not in p["dims"], dims=p["dims"],
                 keepdim=p["keepdim"])


def _meta_read(n: fx.Node) -> bool:
    """x.size(...), x.shape, x.dim() and indexing into them: reads of the traced shape, not of the data."""
    if n.op == "call_method" and n.target in ("size", "dim"):
        return True
    if n.op == "call_function" and n.target is getattr and n.args[1:] == ("shape",):
        return True
    return n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], fx.Node) \
        and _meta_read(n.args[0])


def _tail(gm: fx.GraphModule, conv: fx.Node, conv_shape: tuple[int, ...], out: fx.Node, model: nn.Module
          ) -> tuple[Program, tuple[Stage, ...]]:
    """The conv's own program and the stages after it: the graph from the convolution to the output must be
    pointwise programs separated by shape-changing ops (2-d pooling, reductions, views), each fed by the one before."""
    calls = [n for n in list(gm.graph.nodes)[list(gm.graph.nodes).index(conv) + 1:]
             if n.op in ("call_module", "call_function", "call_method") and not _meta_read(n)
             and tensor_view_source(n) is None]  # a view of a model tensor is read as that tensor (ops._operand)
    ops = {n: normalize(n, gm) for n in calls}
    shape_nodes = [n for n in calls if ops[n].kind in SHAPE_KINDS]
    covered: set[fx.Node] = set(shape_nodes)
    cur, shape, batched = conv, conv_shape, True
    programs: list[Program] = []
    stages: list[Stage] = []
    for node in shape_nodes:
        op = ops[node]
        inp = node.args[0] if node.args else None
        if not isinstance(inp, fx.Node):
            raise Unsupported(f"{op.where}: {op.label} does not take a value computed from the convolution")
        if inp.op == "get_attr":
            raise Unsupported(f"{op.where}: {op.label} of the model's tensor self.{inp.target}: the {NAME} family reads "
                              "model tensors as registered; register it in the shape it is used in (a scalar, or one "
                              "value per channel shaped to broadcast)")
        if len([u for u in inp.users if not _meta_read(u)]) != 1:
            raise Unsupported(f"{op.where}: the value {op.label} reads is also used elsewhere; after the convolution the "
                              f"{NAME} family takes pointwise programs joined by pooling, reductions and views")
        if inp is not cur:
            covered |= set(between(gm, cur, inp))
        programs.append(_program(gm, cur, inp))
        stage = _stage(op, shape, batched)
        end = node
        pair_out = op.kind == "pool" and (op.params.get("returns_tuple") or op.params.get("return_indices"))
        if op.kind in ("max_dim", "min_dim") or pair_out:
            # (values, indices): only the values may be read on ([0], .values); a pooling module or call with
            # return_indices=True read through [0] is the pooling without them
            users = list(node.users)
            picks = [u for u in users if (u.target is operator.getitem and u.args[1:] == (0,))
                     or (u.target is getattr and u.args[1:] == ("values",))]
            if len(users) != 1 or len(picks) != 1:
                raise Unsupported(f"{op.where}: {op.label} is used other than through its values ([0] or .values); "
                                  f"the {NAME} family does not return indices")
            end = picks[0]
            covered.add(end)
        stages.append(stage)
        cur, shape, batched = end, stage.out_shape, stage.out_batched
    if out is not cur:
        covered |= set(between(gm, cur, out))
    programs.append(_program(gm, cur, out))
    for n in calls:
        if n not in covered:
            raise Unsupported(f"{ops[n].where}: {ops[n].label} is not on the path from the convolution to the output")
    stages = [dataclasses.replace(st, program=programs[i + 1],
                                  params=_params(programs[i + 1], model, st.out_shape, "after the convolution"))
              for i, st in enumerate(stages)]
    return programs[0], tuple(stages)


def _program(gm: fx.GraphModule, start: fx.Node, end: fx.Node) -> Program:
    try:
        return pointwise_program(gm, start, end)
    except Unsupported as exc:
        raise Unsupported(f"{exc} (the {NAME} family takes nn.Conv2d followed by pointwise ops, 2-d pooling, "
                          "reductions and views: README's Families table lists each op it takes; write the block with "
                          "those, or keep this model in PyTorch)") from None


def match(ops: list[Op] | None, problem: Problem) -> Spec | None:
    gm = problem.gm
    node = _conv_node(gm)
    if node is None:
        return None
    conv = normalize(node, gm)
    c = conv.params
    if c["padding_mode"] != "zeros":
        raise Unsupported(f"{conv.where}: nn.Conv2d with padding_mode={c['padding_mode']!r}: only 'zeros' is supported")
    if len(conv.in_shape) != 4:
        raise Unsupported(f"{conv.where}: Conv2d on a {len(conv.in_shape)}-d input; the {NAME} family takes NCHW input")
    if conv.dtype != torch.float32:
        raise Unsupported(f"{conv.where}: the {NAME} family takes float32 input, got {conv.dtype}; convert the input "
                          "with .float() in get_inputs()")
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    if not isinstance(out, fx.Node):
        raise Unsupported(f"{conv.where}: Model.forward does not return one tensor")
    model = _meta_model(problem)
    program, stages = _tail(gm, node, tuple(conv.shape), out, model)
    params = _params(program, model, tuple(conv.shape), where(out))
    seen = {p.name for p in params}
    for st in stages:
        for p in st.params:
            if p.name in seen:
                raise Unsupported(f"self.{p.name} is read both before and after a pooling / reduction / view; the "
                                  f"{NAME} family takes each parameter in one of those stages (use two parameters)")
            seen.add(p.name)
    N, CI, H, W = conv.in_shape
    _, CO, HO, WO = conv.shape
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = c["kernel"], c["stride"], c["padding"], c["dilation"]
    right = c["padding_end"]
    spec = Spec(CI=CI, H=H, W=W, CO=CO, G=c["groups"], KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, PH_END=right[0],
                PW_END=right[1], DH=DH, DW=DW,
                HO=HO, WO=WO, HAS_BIAS=c["bias"], weight_name=c["weight_name"], bias_name=c["bias_name"],
                program=program, params=params, stages=stages)
    want = (conv_out_size(H + right[0] - PH, KH, SH, PH, DH), conv_out_size(W + right[1] - PW, KW, SW, PW, DW))
    if want != (HO, WO):
        raise AssertionError(f"kgen's conv output size {want} disagrees with PyTorch's {(HO, WO)}")
    return spec


# ------------------------------------------------------------------------------------------------------ tiling


def _pow2(n: int, lo: int, hi: int) -> int:
    v = lo
    while v < n and v < hi:
        v *= 2
    return v


def gemm_tile(rows: int, cols: int, max_rows: int = 128, max_warps_n: int = 2) -> dict:
    """A CTA tile for a GEMM with `rows` x `cols` outputs: BM x BN (powers of two, BM 16..max_rows, BN 8..64), the
    warp grid (at most 4 x max_warps_n warps of MI m16 x NI n8 tiles) and the padded shared-memory row lengths (8 or
    24 mod 32 floats, so a warp's fragment loads hit 32 banks)."""
    bm, bn = _pow2(rows, 16, max_rows), _pow2(cols, 8, 64)
    wm, wn = min(4, bm // 16), min(max_warps_n, bn // 8)
    lda = bm + 8
    ldb = bn + (16 if bn == 8 else 8)
    return dict(BM=bm, BN=bn, WARPS_M=wm, WARPS_N=wn, LDA=lda, LDB=ldb, THREADS=32 * wm * wn)


HALO_SMEM_MAX = 96 * 1024  # the halo forward's shared memory (two stages): within every sm_80+ GPU's opt-in limit
HALO_CC = 8  # input channels per halo chunk
# A halo convolution's input channels a group that are not a multiple of HALO_CC: its last chunk is staged with zeros
# past them (HaloF::CPAD), from this many channels on (two chunks or more); fewer keep the im2col GEMM or the FMA
# forward (fma_fwd_plan: CIG <= 4). H200, TF32, random benchmark draws (thirty-fourth session), on the im2col GEMM
# before: the forward of Conv2d(76->176, 5, p3, dil 3) on 23x76x160x96 took 4.94 ms against cuDNN's 1.12, grad_x of
# Conv2d(48->46, 5, p1, dil 3) 2.72 against 0.58. From 5 channels (one padded chunk) the register-staged forward of
# Conv2d(5->16, 3, s2, p2, dil 2) on 2 x 4 warps (16-wide tiles) spilled 44-48 bytes on sm_80-90
HALO_PAD_MIN_CHANNELS = 9


def halo_chunks(channels: int) -> int:
    """HALO_CC-channel units of `channels` input channels a group (the last one padded): a halo chunk is one or more
    of them (halo_cc), and the tile and CTA-count rules (halo_warp_tile, halo_tf32_ctas) count the k depth in them."""
    return ceil_div(channels, HALO_CC)


def halo_channels_ok(channels: int) -> bool:
    """Does a halo convolution take this many input channels a group: a multiple of HALO_CC, or HALO_PAD_MIN_CHANNELS
    or more (the last chunk padded with zeros)?"""
    return channels % HALO_CC == 0 or channels >= HALO_PAD_MIN_CHANNELS


# A halo convolution's chunk: HALO_CC input channels (one k8 step a tap), wider where the kernel has few taps, so that
# a chunk holds at least HALO_MIN_KSTEPS k8 steps (a 1x1 kernel: up to 64 channels a chunk; 3x3 and larger keep 8):
# each chunk pays a barrier, its copies' latency and, in the single-pass instances, a wgmma pipe drain, which 1 or 2 k
# steps a chunk do not cover. H200, forward ms, 8-channel chunks -> these (thirty-fifth session, one run): lone
# Conv2d(64->64, 1) on 32x64x128x128 TF32 0.154 -> 0.100 (eager 0.183), TF32 off 0.153 -> 0.099; Conv2d(128->256, 1)
# -> relu TF32 off 0.596 -> 0.434, TF32 even (0.383 -> 0.393); Conv2d(96->384, (2, 1), p1, dil (3, 1)) -> 4 pointwise
# -> mean over (C, H) TF32 off 2.50 -> 2.13, TF32 even (1.53 -> 1.57: 3 CTAs an SM instead of 4, its epilogue's expm1f
# the larger cost); Conv2d(64->128, (1, 3)) -> gelu TF32 0.186 -> 0.176, off 0.364 -> 0.319
HALO_MIN_KSTEPS = 8
HALO_CC_MAX = 64


def halo_cc(channels: int, taps: int, stage_bytes: Callable[[int], int]) -> int:
    """The halo chunk's input channels for `channels` a group and `taps` taps: the fewest multiple of HALO_CC (at most
    HALO_CC_MAX) that gives HALO_MIN_KSTEPS k8 steps a chunk, no wider than the group's channels padded to HALO_CC,
    dividing them (a wider chunk pads no more than HALO_CC's), and whose two stages (stage_bytes(cc) each) fit
    HALO_SMEM_MAX where it leaves more than one chunk; narrower where it does not."""
    padded = halo_chunks(channels) * HALO_CC
    want = min(HALO_CC * ceil_div(ceil_div(HALO_MIN_KSTEPS * 8, taps), HALO_CC), HALO_CC_MAX, padded)
    for cc in range(want, HALO_CC, -HALO_CC):
        if padded % cc == 0 and (2 if padded > cc else 1) * stage_bytes(cc) <= HALO_SMEM_MAX:
            return cc
    return HALO_CC


# The register-staged halo (REG): a thread loads RB groups of HV floats before it stores any, RB *
# REG_GROUP_REGS[HV] <= REG_STAGE_REGS. 48 floats (RB 12) took 130 registers in Conv2d(8->32, 5, s2)'s forward on
# sm_90a, 3 CTAs an SM, 4% slower than RB 8; 32 one-float groups spilled 44 bytes on sm_80-90 (mma.sync)
REG_STAGE_REGS = 48
# A group's registers: its floats and its address, and for 1- and 2-float groups also its bounds predicate and store
# offset, live across the batch. Counted at HV + 2 (RB 16 and 12), such groups spilled 32-88 bytes at 128 registers in
# the TF32 forwards of stride-2 convolutions on 2 x 4 warp tiles, sm_80-90a (a compile sweep's draw, seed 4703, then a
# grid: Conv2d(8->128, 4, s2, p2) on 25x29 and Conv2d(8->32, 5, s2) on 97x99 one-float groups, Conv2d(16->128, 5, s2,
# p2) on 40x41 one-float, on 40x42 two-float; test_compile's REG_HALOS); at 5 (RB 9) none of 20 such convolutions
# spilled (66-126 registers). 4-float groups keep HV + 2 (RB 8, timed)
REG_GROUP_REGS = {4: 6, 2: 5, 1: 5}
# Where a stride exceeds 2 a group keeps one register more live (its rows' and columns' offsets step by the stride):
# counted as above, the wgmma instances of such forwards spilled 4-56 bytes at 128 registers on sm_90a (a compile
# sweep's draw, seed 4905: Conv2d(16->40, 3, s3, dil 3) on 36x16; then a grid of strides (3, 3), (3, 2), (2, 3) over
# 16-128 out channels, 4- and 2-float groups); with one more (RB 6 and 8) none of the grid's 211 register-staged
# convolutions (strides 1-4) spilled on sm_90a
REG_WIDE_STRIDE_EXTRA = 1
NOFLUSH_K_MAX = 2304  # the halo forward / grad_x with TF32 allowed: longest reduction accumulated without a flush
# The TF32 main loops of grad_x from halo tiles and of the halo forward's staged training instance unroll all taps up to
# this many (3x3), else one row of them, as the folded kernels do: unrolling all 25 of a 5x5 kernel spilled 28 bytes on
# sm_80-89 in the staged forward (Conv2d(16->co, 5)), and 4 bytes on sm_90 in grad_x with fragment-ordered weights
# (2 x 4 warps, 128 registers; halo_ci32_k5_wide_onestage_silu_mean_hw).
FULL_UNROLL_MAX = 9


def tap_unroll(kh: int, kw: int) -> int:
    """Taps a TF32 main loop unrolls where FULL_UNROLL_MAX bounds it: all kh*kw up to it, else one row (kw)."""
    return kw if kh * kw > FULL_UNROLL_MAX else kh * kw


def _bank_pad(floats: int, bank: int) -> int:
    """A staged channel's floats: `floats` padded up to `bank` mod 32, so that a fragment's loads over 4 (or 8)
    channels at once hit 32 distinct banks."""
    return floats + (bank - floats % 32) % 32


def _halo_window(positions: int, wout: int, k: tuple[int, int], stride: tuple[int, int], dil: tuple[int, int],
                 bank: int) -> tuple[int, int, int, int, int]:
    """A halo CTA's output block and the input it reads: TH x TW = positions output rows x columns (TW 32, 16 or 8 as
    the output is wide), the HH x HW input rows x columns under them, and HCS, a staged channel's floats: HH*HW padded
    to `bank` mod 32 so that a fragment's loads hit 32 distinct banks."""
    tw = 32 if wout >= 28 else 16 if wout >= 12 else 8
    th = positions // tw
    hh, hw = (th - 1) * stride[0] + (k[0] - 1) * dil[0] + 1, (tw - 1) * stride[1] + (k[1] - 1) * dil[1] + 1
    return th, tw, hh, hw, _bank_pad(hh * hw, bank)


def _halo(cin: int, hin: int, win: int, cin_g: int, hout: int, wout: int, cout_g: int, k: tuple[int, int],
          stride: tuple[int, int], pad: tuple[int, int], dil: tuple[int, int], tile: dict, flip: bool,
          phase: tuple[int, int, int, int, int, int, int, int] = (0, 1, 0, 1, 0, 1, 0, 1)) -> dict | None:
    """A convolution from halo tiles: input (n, cin, hin, win) in groups of cin_g channels, output (n, ., hout, wout)
    in groups of cout_g, kernel k, stride, top / left padding pad (negative: the first output reads from row -pad on),
    dilation; flip: weight tap (kh, kw) is w's (KH-1-kh, KW-1-kw) with its in / out channels swapped (grad_x as a
    convolution of gz; `phase`: grad_x's stride phase, below). A CTA computes TH x TW output positions of one image;
    per chunk of CC input channels (halo_cc: HALO_CC, wider for few taps) it stages the input rows / columns they read
    and the chunk's weights, double-buffered unless there is one chunk (cin_g <= CC: a 5x5 kernel on 8 channels then
    fits) or two buffers would not fit. None when one would not
    fit HALO_SMEM_MAX. phase = (KH0, KSH, KW0, KSW, OH0, OSH, OW0, OSW): flipped tap (u, v) is w's (KH0 + KSH *
    (k[0]-1-u), KW0 + KSW * (k[1]-1-v)) and output (i, j) lands on (OH0 + OSH * i, OW0 + OSW * j) (halo_dx_plan;
    identity for the forward and at stride 1)."""
    th, tw, hh, hw, _ = _halo_window(tile["BM"], wout, k, stride, dil, 8)
    # 16-byte halo copies where every input row starts 16-byte aligned (win % 4 == 0), else 8-byte ones where rows start
    # 8-byte aligned (win % 2 == 0: grad_x of every unpadded odd kernel on an even-width image reads 2 mod 4 wide rows):
    # a CTA's first column iwb = ow0 * SW - pad is pad's residue off alignment (ow0 is a multiple of TW, 8 or more), so
    # rows are staged from LOFF columns before it, HROW floats a row, and each HV-column group of the image is all inside
    # or all outside it. H200, TF32, Nsight (nineteenth session): grad_x of the hardswish problem took 1.77 ms on
    # 254-wide gz rows (4-byte copies) against 1.55 on 256-wide ones (16-byte)
    hv = next(v for v in (4, 2, 1) if win % v == 0 and (tw * stride[1]) % v == 0)
    loff = (-pad[1]) % hv
    hrow = ceil_div(loff + hw, hv) * hv
    # one chunk: nothing to prefetch behind it, so no second buffer. Several chunks whose two buffers do not fit (large
    # kernels: a 5x5 kernel's weights for 64 out channels take 57 KB a chunk) load each chunk after the previous one's
    # mmas into one buffer; the SM's other CTAs cover the load. H200, TF32 allowed, Conv2d(16->64, 5, p2) on
    # 64x16x192x192: the im2col GEMM it replaces took 2.87 ms, eager 2.27
    def stage_bytes(row: int, cc: int) -> int:  # a chunk's staged input (channels HCS floats apart) and its weights
        return (cc * _bank_pad(hh * row, 8) + k[0] * k[1] * cc * tile["BN"]) * 4

    # (hrow + hrow % 2: the widest the row can become below, where a stride-2 register-staged row takes whole phases)
    cc = halo_cc(cin_g, k[0] * k[1], lambda c: stage_bytes(hrow + hrow % 2, c))
    stages = 1 if cin_g <= cc or 2 * stage_bytes(hrow, cc) > HALO_SMEM_MAX else 2
    # REG: the single-pass TF32 instances stage a one-buffer halo through registers (load, round to TF32, store), not
    # cp.async: nothing runs behind a lone buffer's copies, and it saves the separate rounding pass over shared memory
    # and its barrier. Stride-2 columns are then stored split by phase (PHS = 2: a row's even columns, then its odd
    # ones, HP floats each), so that a fragment's loads read consecutive floats: stride-2 loads from one row hit only
    # even (or odd) banks, a 2-way conflict on every A load of every tap (Nsight: 37% of the shared wavefronts). H200,
    # TF32, Conv2d(8->32, 5, s2) -> gelu -> global average, with the wgmma A loads two taps ahead: 0.499 -> 0.459 ms
    # (-> relu: 0.468 -> 0.389); 3xTF32 instances keep cp.async (they lost 6% staged this way); grad_x (flip) too.
    reg = not flip and stages == 1
    phs = 2 if reg and stride[1] == 2 else 1
    hrow += hrow % phs  # whole phases (only 4-byte copies can leave an odd row)
    hp = hrow // phs
    hcs = _bank_pad(hh * hrow, 8)  # an A fragment: 4 channels x 8 positions, 32 distinct banks
    stage = stage_bytes(hrow, cc)  # weights in fragment order, unpadded
    smem = stages * stage
    # the register staging's batches: RB groups (HV floats each) a thread loads before it stores any, NB batches
    groups = cc * hh * (hrow // hv)
    per_thread = ceil_div(groups, tile["THREADS"])
    rb = min(per_thread, REG_STAGE_REGS // (REG_GROUP_REGS[hv] + (REG_WIDE_STRIDE_EXTRA if max(stride) > 2 else 0)))
    if smem > HALO_SMEM_MAX:
        return None
    # FLUSH_TF32: with TF32 allowed, the mmas accumulate on acc directly unless the reduction is long. The tensor core
    # truncates its sum (flush_acc's reason): at most an ulp of |acc| per mma.sync, k / 8 of them, so up to about
    # k / 16 * 2^-23 relative on average, 1.4e-5 at NOFLUSH_K_MAX. Without `part` and its flush the forward and grad_x
    # save 32 registers and an add per accumulator a chunk (H200, TF32 allowed: relu + bias forward 0.901 -> 0.883
    # ms, hardswish 1.156 -> 1.127)
    # TAP_UNROLL: taps unrolled with TF32 allowed (single-pass mma), all of them: each tap's shared-memory offsets
    # become immediates (PTX of the relu + bias forward: 58 instructions per tap for 8 mma.sync -> 4.97 per mma.sync);
    # the 3xTF32 path keeps its taps rolled (registers). grad_x (flip) and 256-thread forward tiles (4 x 2 warps, 128
    # registers a thread at 2 CTAs an SM): tap_unroll. Unrolled in full there, the 25 taps of a 5x5 kernel spilled 4
    # bytes on sm_90: Conv2d(32->64, 5, groups=2) (mma.sync; a random draw, seed 3002), Conv2d(16->64, 5, p2) (wgmma)
    unroll = tap_unroll(*k) if flip or tile["THREADS"] > 128 else k[0] * k[1]
    flush = cin_g * k[0] * k[1] > NOFLUSH_K_MAX
    # WGMMA: the forward's single-pass TF32 instances on sm_90a run on wgmma where the tile allows (wgmma_tile_ok); the
    # accumulators of a flushed chain would need twice the registers, and grad_x (flip) keeps mma.sync
    wgmma = not flip and not flush and wgmma_tile_ok(tile)
    wg_n = tile["BN"] // tile["WARPS_N"] if wgmma else 0  # a warpgroup's n (a warp column's out channels)
    # WGMMA_X3 (HaloF::X3WG): the 3xTF32 inference instances on wgmma too, in sm_90a builds (HALO_X3_WGMMA_SMEM_MAX's
    # comment). B's low halves are staged beside its high ones. STAGES_X3: one buffer (HALO_X3_ONE_STAGE_CTAS' comment)
    # on 4 x 1 warp tiles where two leave fewer than that many CTAs an sm_90 SM and one would not (counted on the
    # instance's dynamic shared memory, x3_smem: the larger of SMEM_X3 and the single-pass instance's)
    def x3_bytes(n: int) -> int:
        return n * (stage + k[0] * k[1] * cc * tile["BN"] * 4)

    def ctas(n: int) -> int:
        return SM90_SMEM_PER_SM // (max(x3_bytes(n), smem) + 1024)

    one = stages == 2 and tile["THREADS"] == 128 and ctas(2) < HALO_X3_ONE_STAGE_CTAS <= ctas(1)
    stages_x3 = 1 if one else stages
    smem_x3 = x3_bytes(stages_x3)
    wgmma_x3 = wgmma and 3 * cin_g * k[0] * k[1] <= NOFLUSH_K_MAX and smem_x3 <= HALO_X3_WGMMA_SMEM_MAX
    kh0, ksh, kw0, ksw, oh0, osh, ow0, osw = phase
    return dict(CIN=cin, HIN=hin, WIN=win, CING=cin_g, HOUT=hout, WOUT=wout, COUTG=cout_g, SH=stride[0], SW=stride[1],
                PH=pad[0], PW=pad[1], FLIP=flip, KH=k[0], KW=k[1], DH=dil[0], DW=dil[1],
                KH0=kh0, KSH=ksh, KW0=kw0, KSW=ksw, OH0=oh0, OSH=osh, OW0=ow0, OSW=osw,
                TH=th, TW=tw, HH=hh, HW=hw, HV=hv, LOFF=loff, HROW=hrow, HCS=hcs, CC=cc,
                REG=reg, PHS=phs, HP=hp, RB=rb, NB=ceil_div(per_thread, rb),
                STAGES=stages, SMEM_BYTES=smem, FLUSH_TF32=flush,
                TILES_H=ceil_div(hout, th), TILES_W=ceil_div(wout, tw), TAP_UNROLL=unroll,
                WGMMA=wgmma, WGMMA_N=wg_n, WGMMA_REGS=wg_n // 2, WGMMA_X3=wgmma_x3, SMEM_X3=smem_x3, STAGES_X3=stages_x3,
                X3_CTAS=HALO_X3_ONE_STAGE_CTAS if one else 2)


# The halo forward's single-pass TF32 instances on sm_90a (H100 / H200 builds, the "9.0a" target) run their k steps
# on warpgroup wgmma (m64 x n x k8, A from registers in the m16n8k8 layout the halo loads already produce, B read by
# the tensor core from shared memory through a matrix descriptor in the canonical K-major no-swizzle layout) instead
# of mma.sync. A warpgroup is a warp column of the 4 x WARPS_N warp tile (its n: that column's BN / WARPS_N out
# channels); warp w's m16 tile mi is rows (w * MI + mi) * 16 of the CTA, so the accumulators keep mma.sync's fragment
# layout and every epilogue and fold reads them unchanged. H200, scaling_min_c's GEMM (tests/dev/wgmma_tile.py,
# twenty-eighth session): mma.sync warp tile 0.347 ms, wgmma 0.228. Forward ms, TF32, 4 x 2 warp tiles (1-2 input
# chunks) mma.sync -> wgmma (thirtieth session, one run): the hardswish -> MaxPool2d -> mish example 1.183 -> 1.174,
# Conv2d(8->32, 5, s2) -> gelu -> global average 0.747 -> 0.710, KernelBench L2 problem 25 (min over C) 1.321 ->
# 1.297, Conv2d(8->64) -> gelu -> global average 2.780 -> 2.775, but the unfolded Conv2d(16->64) -> hardswish 1.179 ->
# 1.220 (as conv3x3_relu_bias on 4 x 1 tiles, +4%: unfolded forwards over few chunks, not understood).
WGMMA_N_MAX = 256  # wgmma's widest n


def wgmma_tile_ok(tile: dict) -> bool:
    """The halo forward's tile runs on wgmma (sm_90a): 4 x WARPS_N warps, each warp column one warpgroup (its 4 warps
    are warp_m 0..3), whose BN / WARPS_N out channels are one wgmma's n (a multiple of 8, at most WGMMA_N_MAX)."""
    n = tile["BN"] // tile["WARPS_N"]
    return (tile["WARPS_M"] == 4 and tile["THREADS"] == 128 * tile["WARPS_N"] and n * tile["WARPS_N"] == tile["BN"]
            and n % 8 == 0 and n <= WGMMA_N_MAX)


# The halo forward's epilogue stages the CTA's z = conv + bias in shared memory, [BN][TH * TW + EPI_PAD] (the pad puts
# the four column pairs of an mma fragment's stores in different banks), then writes y (and z for training) a tile row
# at a time, consecutive threads on consecutive columns. Stored straight from the fragments, a warp wrote 8-column
# pieces of four channels; where rows are not a multiple of 8 columns long each piece splits two 32-byte sectors.
# H200, Conv2d(16->64, 3) -> -0.5 -> hardswish on 64x16x256x256 (254-wide rows), TF32 allowed, Nsight Compute: the
# training forward (y and z) took 3.03 ms, wrote 116 M L2 sectors for 2.1 GB and read 0.5 GB back from DRAM to merge
# the partial ones; with padding 1 (256-wide rows) it took 1.06 ms, the inference forward 1.11 against 0.95.
EPI_PAD = 4
# The staged instance's TF32 main loop unrolls its taps as tap_unroll says.
# Only for the training instance (z written: the L2's merges from DRAM came with the second output; staging the
# inference forward made it 8% slower, 1.126 -> 1.216 ms) and only where rows split sectors (WO % 8 != 0): on
# whole-sector rows the direct stores write each sector once.


# The halo forward's single-pass TF32 instances (no flush: acc only) on 4 x 1 warps over at least
# HALO_TF32_CTAS_MIN_CHUNKS 8-channel units (halo_chunks) ask ptxas for HALO_TF32_CTAS CTAs an SM on sm_90 (<= 128
# registers a thread instead of 146) where that many CTAs' shared memory fits an sm_90 SM: 16 warps an SM instead of
# 12. Other architectures keep 2 (not measured; an sm_86/89 or sm_120 SM fits one such CTA's stages, an A100's three).
# H200, TF32 allowed, forward ms (twenty-seventh session, the eight 64->128 / 32->64 / 8->64 level-2 blocks):
# 64 input channels (8 chunks) 0.353 -> 0.339, 2.587 -> 2.323, 2.523 -> 2.431, 2.308 -> 2.298, 2.257 -> 2.162,
# 2.639 -> 2.357; 32 (4 chunks, padding 1) 0.735 -> 0.768; 8 (one chunk, 2 x 4 warps) 2.769 -> 2.807: those keep 2.
# The 3xTF32 instances keep 2 (196 registers; at 3 CTAs the TF32-off forwards moved -3% .. +2%).
HALO_TF32_CTAS = 4
HALO_TF32_CTAS_MIN_CHUNKS = 8
# ... and only up to this many taps unrolled (the blocks measured were 3x3): a stride-2 3x5 kernel's 15 unrolled taps
# (Conv2d(64->128, (3, 5), stride=2, padding=1); a random benchmark draw's shape) spilled 64-140 bytes on sm_90 at 128
# registers
HALO_TF32_CTAS_MAX_TAPS = 9
HALO_TF32_CTAS_POOL_SAVE_MAX = 3  # the folded pool's training instance: its saved winners spilled 8 bytes at 128 registers
SM90_SMEM_PER_SM = 228 * 1024  # an sm_90 SM's shared memory; each resident CTA also reserves 1 KB of it
# The halo forward's 3xTF32 (TF32 off) inference instances on sm_90a run on wgmma as the single-pass ones do (above),
# three wgmmas a k step (A's low half x B's high, A's high x B's low, high x high, as kg_mma3): A is split in registers
# as it is loaded, B's halves are arranged once per call and both staged, so a CTA's shared memory grows by one more
# copy of its weights. Where the mma.sync instances flush a chunk's products into acc (flush_acc), these accumulate
# on acc, so _halo takes them (WGMMA_X3) only where the unflushed reduction, 3 * CIG * KH * KW products, is within
# NOFLUSH_K_MAX (the single-pass rule's bound on the tensor core's truncated sums), and where two CTAs an SM (the
# 3xTF32 instances' launch bound) fit their shared memory: at most this much. mma.sync on an H100 has half wgmma's TF32
# rate; H100, TF32 off (forty-second session): the min-over-C example's forward 0.622 -> 0.383 ms, MaxPool -> mish
# 1.676 -> 1.178, gelu -> global average 0.924 -> 0.734.
HALO_X3_WGMMA_SMEM_MAX = SM90_SMEM_PER_SM // 2 - 1024
# STAGES_X3: the X3WG instance of a 128-thread tile stages one buffer where two would leave fewer than this many
# CTAs an SM and one would not; the SM's other CTAs then cover the lone buffer's loads, and the instance asks for them
# in its launch bound (HALO_X3_CTAS: 168 registers a thread). 256-thread tiles fill the register file at 2 CTAs, so one
# stage buys them no CTA. H100, TF32 off, forward (forty-third session, same run): MaxPool -> mish 1.186 -> 1.012 ms
# (two buffers: 88.6 KB, 2 CTAs an SM), relu + bias 1.046 -> 0.985; hardswish (4 x 2 warps) lost 1.265 -> 1.663
# ms with one stage (its 128-register bound then spilled 20 bytes), so it keeps two
HALO_X3_ONE_STAGE_CTAS = 3


def halo_tf32_ctas(halo: dict | None, tile: dict, fwd_smem: int, folds: tuple) -> int:
    """CTAs an SM the halo forward's TF32 instances ask for on sm_90 (HALO_TF32_CTAS's comment): the largest
    shared memory of its instances (fwd_smem: operand stages or the staged epilogue, halo_fwd_smem; the folded stage
    of `folds`, the fused pool / reduce plans with the halo forward) decides whether they fit; 2 elsewhere, as the
    3xTF32 instances."""
    # Where chunks are wider than HALO_CC channels (few taps: halo_cc), more than 2 only where the inference instance
    # runs on wgmma (an sm_90a image of a Hopper-path build, KGEN_WGMMA_ARCH; derive's HALO_TF32_CTAS_WGMMA_ONLY), where
    # wide chunks came in and were timed. A plain sm_90 image (TORCH_CUDA_ARCH_LIST "9.0", or a list with an sm_80-89
    # target: KGEN_SM90=0) runs that instance on mma.sync, whose fully unrolled k steps of a wide chunk sat at 124-128
    # registers at 4 CTAs and spilled 32 bytes for Conv2d(128->256, 1) on 96x96 (the thirty-seventh session's finding):
    # it keeps 2 CTAs there, and so does every image where wide chunks would not run on wgmma at all
    if (halo is None or tile["THREADS"] != 128 or halo["FLUSH_TF32"] or halo_chunks(halo["CING"]) < HALO_TF32_CTAS_MIN_CHUNKS
            or halo["TAP_UNROLL"] > HALO_TF32_CTAS_MAX_TAPS or (halo["CC"] > HALO_CC and not halo["WGMMA"])):
        return 2
    smem = max([fwd_smem] + [f["SMEM_BYTES"] for f in folds if f])
    return HALO_TF32_CTAS if HALO_TF32_CTAS * (smem + 1024) <= SM90_SMEM_PER_SM else 2


def halo_fwd_smem(halo: dict | None, tile: dict, staged: bool) -> int:
    """The halo forward's shared memory: its operand stages, or its staged epilogue (EPI_STAGED) where that is
    larger."""
    if halo is None:
        return 0
    smem = max(halo["SMEM_BYTES"], tile["BN"] * (halo["TH"] * halo["TW"] + EPI_PAD) * 4 if staged else 0)
    assert smem <= HALO_SMEM_MAX, "the staged epilogue is within every GPU's opt-in limit"
    return smem


HALO_WIDE_MIN_CHUNKS = 3  # the halo forward's warps own all BN out channels from this many input-channel chunks on


def halo_tile(spec: Spec, wide: bool = False) -> dict:
    """The halo forward's CTA tile: 128 positions x BN out channels like the im2col forward's (TileF), but from
    HALO_WIDE_MIN_CHUNKS chunks of input channels on each warp owns all BN channels of 32 positions (4 x 1 warps, 128
    threads: a 32 x 64 warp tile loads 1.5 shared floats a mma.sync instead of 2, and does half the epilogue's index
    math an output). H200, forward ms, 2 x 4 warps -> 4 x 1 (fourteenth session), TF32 allowed: 3 chunks
    (Conv2d(24->48, 3)) 0.602 -> 0.505; 4 (relu + bias) 0.881 -> 0.813, (32->32) 0.620 -> 0.444, (32->64, 5) 0.882 ->
    0.810; 8 (64->64) 0.358 -> 0.306, the dilated (64->128) 0.964 -> 0.865; TF32 off: relu + bias 1.721 -> 1.702, 3
    chunks 1.036 -> 0.893, 8 chunks 0.756 -> 0.721. With 2 chunks it went either way: Conv2d(16->64, 3, padding=1)
    -3% or even, without padding (254-wide outputs) +23-30% (not understood), so fewer chunks keep 2 x 4 warps (one
    chunk gained 3-10%: a candidate once the 2-chunk loss is understood). Out channels that are not a power of two
    take a trimmed tile (trim_halo_n). wide: 4 x 1 warps whatever the chunks (halo_fold_tile)."""
    cols = spec.CO // spec.G
    tile = halo_warp_tile(cols, halo_chunks(spec.CI // spec.G), wide)
    st = spec.stages[0] if spec.stages else None
    if st is not None and st.kind == "reduce" and tuple(st.dims) == (2, 3):  # the (H, W) fold: BN lanes a power of two
        return tile
    return trim_halo_n(tile, cols)


HALO_TRIM_N = 16  # a trimmed halo tile's BN: a multiple of this (an even count of n8 tiles a warp: 16-byte weight loads)


def trim_halo_n(tile: dict, cols: int) -> dict:
    """A 4 x 1 warp halo tile narrowed to the group's out channels: the CTILES tiles that `cols` needs at the
    power-of-two width, each HALO_TRIM_N * ceil(cols / (HALO_TRIM_N * CTILES)) wide, so 48 out channels take one
    48-wide tile (6 n8 tiles a warp) instead of 64 (8, two of them padding), and 80 take two of 48 instead of two of
    64: the mmas, weight loads and epilogue of the padding columns are gone. 2 x 4 warp tiles keep their width."""
    if tile["WARPS_N"] != 1:
        return tile
    ctiles = ceil_div(cols, tile["BN"])
    bn = HALO_TRIM_N * ceil_div(cols, HALO_TRIM_N * ctiles)
    if bn >= tile["BN"]:
        return tile
    return dict(tile, BN=bn, LDB=bn + 8)  # LDB: 8 or 24 mod 32 (the Tile struct's check; the halo kernels read no Bs)


def halo_warp_tile(cols: int, chunks: int, wide: bool = False) -> dict:
    """A halo convolution's CTA tile over 128 positions x `cols` channels, reading `chunks` 8-channel chunks: 4 x 1
    warps from HALO_WIDE_MIN_CHUNKS chunks on (or wide), else 2 x 4 (halo_tile says why)."""
    return gemm_tile(1 << 20, cols, max_warps_n=1 if wide or chunks >= HALO_WIDE_MIN_CHUNKS else 2)


def halo_fold_tile(spec: Spec, tile: dict) -> dict:
    """The halo forward's tile where it folds its first stage into its epilogue (fused_pool, fused_reduce,
    fused_creduce): 4 x 1 warps from one input chunk on, if the fold still applies on it. One tile serves every
    instance (training's too). H200, TF32 inference forward ms, 2 x 4 -> 4 x 1 warps (thirty-first session, same run,
    wgmma): hardswish -> MaxPool2d(2) -> mish (16 -> 64, 2 chunks) 0.802 -> 0.738, Conv2d(8->32, 5, s2) -> gelu ->
    global average 0.623 -> 0.523, Conv2d(8->64) -> gelu -> global average 2.287 -> 2.075, Conv2d(8->64) -> tanh ->
    MaxPool2d(4) 1.851 -> 1.632, problem 25 (16 -> 64, min over C) 1.257 -> 1.037; unfolded forwards keep 2 x 4 below
    HALO_WIDE_MIN_CHUNKS (Conv2d(16->64) -> hardswish lost 12% on 4 x 1)."""
    if tile["WARPS_N"] == 1:
        return tile
    wide = halo_tile(spec, wide=True)
    halo = halo_plan(spec, wide)
    if halo is None:
        return tile
    if fused_pool(spec, halo, wide) or fused_reduce(spec, halo, wide, None) or fused_creduce(spec, halo, wide):
        return wide
    return tile


FMA_FWD_CIG_MAX = 4  # the forward with float32 FMAs (fma_fwd_plan) for at most this many input channels a group
FMA_FWD_PXW = 4  # its consecutive output columns a thread (the store transpose assumes 4: one float4 a thread)
FMA_FWD_UNROLL_TAPS = 8  # its kernel rows are unrolled up to this many taps (KH * KW)
FMA_FWD_SMEM_FLOATS = 12288  # its staged weights (one out-channel tile of a group) and store transpose: 48 KB static


def fma_fwd_plan(spec: Spec, halo: dict | None) -> dict | None:
    """The forward with float32 FMAs where the group has at most FMA_FWD_CIG_MAX input channels (a 3-channel image:
    the halo forward takes HALO_PAD_MIN_CHANNELS or more): the implicit GEMM's k would be CIG*KH*KW taps padded to BK, loaded
    one 4-byte copy an element with its index math, for a few dozen MACs an output. Each thread computes PXW
    consecutive output columns of one row for CT out channels (a channel tile, grid.y), loading each input row's SPAN
    columns once per (input channel, kernel row) and the tile's weights from shared memory as float4s; its outputs
    go out through a per-warp transpose in shared memory, so a warp stores row segments (lanes 4 columns apart made
    the training forward, which writes z too, 3x slower than the inference forward on the H200). CT = 16 where the
    group has more than 8 out channels: each loaded value feeds 16 FMAs (H200, TF32 off: the ResNet stem's forward
    0.424 ms at CT = 8, 0.349 at 16, the implicit GEMM's 0.381). None: the direct kernels, the halo forward, more
    input channels, or weights beyond the shared memory."""
    s = spec
    cig, cog = s.CI // s.G, s.CO // s.G
    threads, pxw = 256, FMA_FWD_PXW
    # the widest tile whose weights fit beside the store transpose (threads * pxw floats)
    ct = next((c for c in (16, 8, 4) if c <= max(4, 1 << (cog - 1).bit_length())
               and cig * s.KH * s.KW * c + threads * pxw <= FMA_FWD_SMEM_FLOATS), None)
    if direct(s) or halo is not None or cig > FMA_FWD_CIG_MAX or ct is None:
        return None
    ctiles = ceil_div(cog, ct)
    if s.G * ctiles > 65535:
        return None
    # kernel rows unrolled only for small kernels: unrolled, ptxas hoists every row's loads (7x7 taps spilled about
    # 900 bytes on sm_90)
    kh_unroll = s.KH if s.KH * s.KW <= FMA_FWD_UNROLL_TAPS else 1
    return dict(THREADS=threads, PXW=pxw, CT=ct, CTILES=ctiles, CIG_MAX=FMA_FWD_CIG_MAX, GW=ceil_div(s.WO, pxw),
                SPAN=(pxw - 1) * s.SW + (s.KW - 1) * s.DW + 1, KH_UNROLL=kh_unroll)


def halo_plan(spec: Spec, tile: dict) -> dict | None:
    """The forward from halo tiles, or None where the implicit GEMM's im2col loader stays: the direct path, input
    channels per group that halo_channels_ok refuses, a stride larger than the kernel (the halo would stage skipped
    pixels), or more than HALO_SMEM_MAX of shared memory."""
    s = spec
    if direct(s) or not halo_channels_ok(s.CI // s.G) or tile["BM"] != 128 or s.SH > s.KH or s.SW > s.KW:
        return None
    return _halo(s.CI, s.H, s.W, s.CI // s.G, s.HO, s.WO, s.CO // s.G, (s.KH, s.KW), (s.SH, s.SW), (s.PH, s.PW),
                 (s.DH, s.DW), tile, False)


def halo_dx_tile(spec: Spec) -> dict:
    """grad_x's CTA tile: 128 input positions x BN in channels; where grad_x runs from halo tiles over
    HALO_WIDE_MIN_CHUNKS or more chunks of gz channels, each warp owns all BN channels of 32 positions (4 x 1 warps),
    as the halo forward's tile (halo_tile). The im2col grad_x keeps 2 x 4 warps."""
    tile = gemm_tile(1 << 20, spec.CI // spec.G)
    if halo_dx_plan(spec, tile) is None:
        return tile
    return halo_warp_tile(spec.CI // spec.G, halo_chunks(spec.CO // spec.G))


def _dx_axis(r: int, k: int, st: int, dil: int, pad: int) -> tuple[int, int, int, int] | None:
    """One axis of grad_x's stride phase r (input rows i0 + st * i with (i0 + pad) % st == r): the taps that reach it,
    kh = kh0 + step * t (t < taps, step = st / gcd(dil, st)), form a stride-1 convolution of gz with dilation step *
    dil / st; flipped, its tap u reads gz row i - pad' + u * dil' for pad' = (taps - 1) * dil' - (i0 + pad - kh0 * dil) /
    st. (kh0, step, taps, dil', pad'), or None where no tap reaches the phase."""
    khs = [kh for kh in range(k) if kh * dil % st == r]
    if not khs:
        return None
    i0 = (r - pad) % st
    step = st // math.gcd(dil, st)
    dil_p = step * dil // st
    return khs[0], step, len(khs), dil_p, (len(khs) - 1) * dil_p - (i0 + pad - khs[0] * dil) // st


# grad_x from halo tiles for at most this many stride phases (one launch each; stride 2 x 2 is 4). H200, TF32, step
# ms (random benchmark draws, thirty-fourth session, one run): Conv2d(64->512, (3, 5), stride 2, p1) 3.21 -> 1.21
# (its im2col grad_x took 2.29 ms against cuDNN's 0.12); Conv2d(16->80, 5, stride 3, dil 2) on 11x16x192x128 (9
# phases, 5 x 5 taps spread over them) 0.42 -> 0.69 in the same runs: stride 3 x 3 keeps the im2col phases
HALO_DX_MAX_PHASES = 4


def halo_dx_plan(spec: Spec, tile: dict) -> dict | None:
    """grad_x from halo tiles: at stride 1, grad_x = conv(gz, w flipped and transposed) with padding DH*(KH-1) - PH
    (likewise columns); at larger strides, one such stride-1 convolution a stride phase (stride_phases: rows ih0 + SH*i,
    columns iw0 + SW*j, reached by the taps of _dx_axis only), each its own kernel instance and arranged weights,
    writing its rows and columns of grad_x. Out channels per group that halo_channels_ok takes (gz's channels are its
    input). The first phase's plan with PHASES, every phase's (S: its struct's name). None: the per-phase im2col GEMMs
    stay (the direct path, other channel counts, more than HALO_DX_MAX_PHASES phases, a phase no tap reaches, too much
    shared memory)."""
    s = spec
    table = stride_phases(s)
    if direct(s) or not halo_channels_ok(s.CO // s.G) or tile["BM"] != 128 or len(table) > HALO_DX_MAX_PHASES:
        return None
    phases = []
    for rh, rw, ih0, iw0, hp, wp in table:
        ah, aw = _dx_axis(rh, s.KH, s.SH, s.DH, s.PH), _dx_axis(rw, s.KW, s.SW, s.DW, s.PW)
        if ah is None or aw is None:
            return None
        plan = _halo(s.CO, s.HO, s.WO, s.CO // s.G, hp, wp, s.CI // s.G, (ah[2], aw[2]), (1, 1), (ah[4], aw[4]),
                     (ah[3], aw[3]), tile, True, (ah[0], ah[1], aw[0], aw[1], ih0, s.SH, iw0, s.SW))
        if plan is None:
            return None
        phases.append(dict(plan, S="HaloD" + (str(len(phases)) if phases else "")))
    return dict(phases[0], PHASES=phases)


HALO_W_WARPS = 8  # grad_w from halo tiles: warps of a CTA (WARPS_M over its out channels, WARPS_K over positions)
HALO_W_TAPS = 9  # ... and at most this many taps per CTA (the warp's n8 tiles: registers)


def halo_w_plan(spec: Spec, gz_is_gy: bool) -> dict | None:
    """grad_w from halo tiles: a CTA owns BM out channels x (a chunk of CC input channels, NTAP taps) of grad_w and
    runs over a range of TH x TW output-position tiles; per tile it stages gz's BM x TH*TW block and the chunk's input
    halo, then every tap's GEMM slice (k = positions) from shared memory. Warps split the out channels (WARPS_M) and
    the tile's positions (WARPS_K; their sums are added in a fixed order at the end). None where the im2col GEMM
    stays: the direct path, a stride larger than the kernel, or more than HALO_SMEM_MAX of shared memory."""
    s = spec
    if direct(s) or s.SH > s.KH or s.SW > s.KW:
        return None
    cig, cog, kk = s.CI // s.G, s.CO // s.G, s.KH * s.KW
    tg = ceil_div(kk, HALO_W_TAPS)  # tap groups
    ntap = ceil_div(kk, tg)
    # few taps: a CTA takes CSUB groups of 8 input channels, so that its NT = NTAP * CSUB n8 tiles (a tap's 8 channels
    # each) come near HALO_W_TAPS and gz's tile is staged once per CC = 8 * CSUB channels, not once per 8. H200, TF32,
    # torch.profiler (thirty-fifth session): a (2, 1) kernel on 96 -> 384 channels (35x96x96x96) spent 2.26 ms a step
    # here with CSUB 1 (gz staged 12 times) against cuDNN's 0.30; with CSUB the step fell 6.82 -> 6.20 ms (eager 7.05;
    # TF32 off 10.20 -> 8.76, eager 12.17) and a (1, 3) kernel on 64 -> 80 channels' 1.34 -> 1.14 (eager 1.60; the
    # thirty-sixth session's A/B). CC divides the group's channels padded to HALO_CC; the widest that fits is taken
    units = halo_chunks(cig)
    csubs = [c for c in range(max(1, HALO_W_TAPS // ntap) if tg == 1 else 1, 0, -1) if units % c == 0]
    # a B fragment: 8 channels x 4 positions
    th, tw, hh, hw, hcs = _halo_window(128, s.WO, (s.KH, s.KW), (s.SH, s.SW), (s.DH, s.DW), 4)
    ldp = th * tw + 4  # gz rows: 4 mod 32, an A fragment's 8 channels x 4 positions hit 32 banks
    # BM: up to 64 out channels a CTA, fewer where two stages of a wide halo (a dilated 5x5 kernel's, a stride-2
    # kernel's) would not fit with 64 channels' gz beside it. H200, TF32, a step (random benchmark draws, thirty-fourth
    # session): Conv2d(76->176, 5, p3, dil 3) on 23x76x160x96 and Conv2d(48->46, 5, p1, dil 3) on 93x48x128x64 fell to
    # the im2col grad_w at 64 (113 KB), 7.08 and 2.86 ms against cuDNN's 2.24 and 1.17
    for bm, csub in itertools.product((b for b in (64, 32, 16) if b <= _pow2(cog, 16, 64)), csubs):
        cc, nt = HALO_CC * csub, ntap * csub
        stage = bm * ldp + cc * hcs
        # m16 tiles a warp with TF32 allowed (below); one at column strides > 1, where two spilled 48 bytes on sm_90 (a
        # Conv2d(14->53, 3, stride (1, 2)) of a sweep: the halo offsets of 4*SW columns take registers)
        mi_tf32 = 2 if bm >= 32 and s.SW == 1 else 1
        red = HALO_W_WARPS * 16 * mi_tf32 * nt * 8  # the warps' partial sums over positions, staged for the fixed-order add
        smem = max(2 * stage, red) * 4
        if smem <= HALO_SMEM_MAX:
            break
    else:
        return None
    wm = bm // 16
    # gz positions a cp.async copies (4, 2 or 1): WO % GZV == 0 keeps a copy inside one row of the plane or all past
    # its right edge; TW, LDP and the stage size keep it aligned in shared memory
    gzv = next(v for v in (4, 2, 1) if s.WO % v == 0 and tw % v == 0 and ldp % v == 0 and stage % v == 0)
    # k steps unrolled with TF32 allowed: with one tap group the unrolled steps' fragment addresses are immediates
    # (a warp's positions are consecutive, so each k step adds a constant halo offset). By 4 since the copy loops
    # became per-thread strided rows (twenty-third session); all 8 steps of a 64-channel tile spilled 4 bytes on sm_90.
    # By 2 where gz copies are narrower than 4 positions on tiles narrower than 32 columns: by 4, Conv2d(24 -> 64 or
    # 80, 3, padding=1) on 14 x 18 inputs (GZV 2, 8 x 16 tiles) spilled 48-60 bytes on sm_90 at 128 registers
    # (twenty-eighth session; by 2: 120 registers, none)
    unroll = (4 if gzv == 4 or tw >= 32 else 2) if tg == 1 else 1
    # taps a flush group: one group's mmas run on `part`, so acc and part together hold NT + PT taps' accumulators
    # (TF32: all taps, the A fragment loaded once a k step; 3xTF32, whose split fragments hold more: half of them)
    pt_tf32, pt_x3 = nt, ceil_div(nt, 2)
    # TF32 allowed: two m16 tiles a warp where BM allows (each A fragment feeds 2 NT mmas; 72 accumulators a thread at
    # 9 taps, no `part`), so each thread's chain on one accumulator is bounded instead: a split covers at most
    # CHAIN_TILES position tiles, NOFLUSH_K_MAX positions of a warp's share (the halo forward's bound without a flush)
    kpw_tf32 = th * tw // (HALO_W_WARPS // (bm // (16 * mi_tf32)))
    chain_tiles = max(1, NOFLUSH_K_MAX // kpw_tf32)
    # the copy widths instantiated: GZV, and one float a copy beside it where gz is the incoming gy (gz_is_gy: no
    # adjoint kernel writes gz into kgen's workspace), whose alignment the caller decides
    vecs = [gzv, 1] if gz_is_gy and gzv > 1 else [gzv]
    return dict(BM=bm, WARPS_M=wm, WARPS_K=HALO_W_WARPS // wm, THREADS=32 * HALO_W_WARPS, NT=nt, NTAP=ntap, TGROUPS=tg,
                GZV=gzv, GZ_VECS=vecs, UNROLL_TF32=unroll, PT_TF32=pt_tf32, PT_X3=pt_x3, MI_TF32=mi_tf32, CHAIN_TILES=chain_tiles,
                TH=th, TW=tw, HH=hh, HW=hw, HCS=hcs, LDP=ldp, CC=cc, MTILES=ceil_div(cog, bm),
                NCH=ceil_div(cig, cc), TILES_H=ceil_div(s.HO, th), TILES_W=ceil_div(s.WO, tw), SMEM_BYTES=smem)


# grad_w on wgmma (sm_90a builds, single-pass TF32): per output-position tile a CTA multiplies A = the input's im2col
# columns (rows j = (input channel, tap) of grad_w's flattened KTOT, gathered from the staged halo into registers, as
# the halo forward loads its A fragments) by B = gz (TP positions x BN out channels, staged by cp.async in wgmma's
# canonical K-major layout and rounded to TF32 in place by the threads that copied it): D = grad_w^T's BM x BN block,
# a warpgroup's m64 x BN x k8 wgmma a k step, accumulated over the split's tiles in registers (no cross-warp sum).
# H200, TF32, torch.profiler over 5 steps (thirty-third session): with the mma.sync kernel the lone Conv2d(64->128,
# (3, 5), dilation (2, 1)) on 16x64x200x160 spent 1.92 ms a step in grad_w against cuDNN's 0.81, the 64->128 block on
# 128x64x128x128 3.37 ms against 2.03. A/B, step ms (eager 3.18 / 16.5 / 1.40 / 6.15): mma.sync 3.77 / 10.31 / 1.32 /
# 3.61; this kernel with 2 warpgroups a CTA 3.31 / 11.50 / 1.51 / 4.40, 4: 3.02 / 10.61 / 1.38 / 4.15, without the
# rounding pass over gz 3.05 / 10.30 / 1.33 / 4.22 (those four: the lone conv, the 64->128 block, a 64->128 block on
# 64x64x64x64, Conv2d(32->64) -> relu + bias, where n = 64 wgmmas lose: WG_COG_MIN).
WG_TP = 64  # positions a tile (k of a tile's GEMM): 2 x 32, so that two CTAs' stages fit an SM
WG_BN_MAX = 128  # out channels a CTA (wgmma's n; 128 keeps B's shared-memory reads at half the tensor rate)
WG_SMEM_MAX = 112 * 1024  # two stages, two CTAs an sm_90 SM (228 KB, 1 KB reserved a CTA)
WG_WARPGROUPS_MAX = 4  # warpgroups (64 rows each) a CTA: 4 (1 CTA an SM) against 2 (2 CTAs): lone conv step 3.31 -> 3.02 ms
WG_COG_MIN = 96  # out channels a group from which grad_w takes wgmma (below, n <= 64 wgmmas lost to mma.sync: B's reads)
# grad_w on wgmma: positions a split's chain on one accumulator covers. Gradients are held to TF32's 1e-3 (the forward
# to 1e-4, NOFLUSH_K_MAX's bound): truncating each k step's sum, 4x as long a chain stays near 6e-5 relative, and the
# splits (each writes a whole partial grad_w) are 4x fewer: the 64->128 block wrote 896 partials (264 MB)
WG_CHAIN_MAX = 4 * NOFLUSH_K_MAX


def halo_wg_plan(spec: Spec, halo_w: dict | None, gz_is_gy: bool) -> dict | None:
    """grad_w on wgmma (the comment above): where grad_w runs from halo tiles (halo_w) and the plan's two operand
    stages fit WG_SMEM_MAX. BM = 64 (one warpgroup) or 128 rows of the group's CIG * KK, BN out channels (a multiple of
    8: CT tiles of equal width), a tile TH x TW = WG_TP output positions over CCM staged input channels (the most a
    BM-row window of (channel, tap) rows touches), input rows HWS floats apart (8 mod 16) and channels HCS (24 mod 32):
    a 3x3 kernel's A loads then hit 32 distinct banks. gz_is_gy: as halo_w_plan's (one float a copy beside GZV)."""
    s = spec
    cig, cog, kk = s.CI // s.G, s.CO // s.G, s.KH * s.KW
    if halo_w is None or cog < WG_COG_MIN:
        return None
    ct = ceil_div(cog, WG_BN_MAX)
    bn = 8 * ceil_div(ceil_div(cog, ct), 8)
    th, tw, hh, hw, _ = _halo_window(WG_TP, s.WO, (s.KH, s.KW), (s.SH, s.SW), (s.DH, s.DW), 8)
    hws = hw + (8 - hw % 16) % 16  # 8 mod 16
    hcs = _bank_pad(hh * hws, 24)
    # as few row tiles as WG_WARPGROUPS_MAX allows (each restages gz), their m64 tiles spread evenly over them; fewer
    # warpgroups where the CCM channels a wide halo stages for BM rows would not fit (a stride-2 or dilated 5x5 kernel)
    m64 = ceil_div(cig * kk, 64)
    for wgs in range(WG_WARPGROUPS_MAX, 0, -1):
        bm = 64 * ceil_div(m64, ceil_div(m64, wgs))
        ccm = min(cig, (bm - 1) // kk + 2)
        stage = bn * WG_TP + ccm * hcs
        smem = 2 * stage * 4
        if smem <= WG_SMEM_MAX:
            break
    else:
        return None
    # gz positions a cp.async copies: a copy stays in one row of the plane (WO) and of the tile (TW)
    gzv = next(v for v in (4, 2, 1) if s.WO % v == 0 and tw % v == 0)
    return dict(BM=bm, BN=bn, CT=ct, JT=ceil_div(cig * kk, bm), THREADS=2 * bm, TH=th, TW=tw, HH=hh, HW=hw, HWS=hws,
                HCS=hcs, CCM=ccm, GZV=gzv, GZ_VECS=[gzv, 1] if gz_is_gy and gzv > 1 else [gzv],
                # ROUNDS: the kernel rounds gz itself (gz is gy, or grad_x reads it unrounded), and, where kgen's
                # adjoint kernel writes gz, also reads it pre-rounded (both gradients in TF32: ADJOINT_ROUNDS)
                ROUNDS=[True] if gz_is_gy else [True, False],
                CHAIN_TILES=max(1, WG_CHAIN_MAX // WG_TP), TILES_H=ceil_div(s.HO, th), TILES_W=ceil_div(s.WO, tw),
                SMEM_BYTES=smem, WGMMA_REGS=bn // 2)


# grad_w of a pointwise convolution (1x1, stride 1, no padding): per group a plain GEMM, grad_w = gz x^T over every
# image's positions, whose k is contiguous in both operands. H200, TF32, torch.profiler over 5 steps (thirty-seventh
# session): the halo kernels spent 295 us a step on Conv2d(64->48, 1) on 32x64x128x128 (mma.sync, 16 input channels a
# CTA: its 4-byte halo copies and 64 x 16 output tile made it issue-bound) and 406 us on Conv2d(128->256, 1) on
# 32x128x96x96 (wgmma), against cuBLAS's 61 and 121 us for the same GEMMs; this kernel 113 and 240 us (steps 0.79 ->
# 0.61 ms, eager 0.77; 1.65 -> 1.52, eager 1.36). Where kgen's adjoint kernel writes gz for grad_x from halo tiles too,
# it writes gz rounded to TF32 and neither kernel rounds it again (the 256-channel grad_x: 225 -> 185 us). Tried:
# each thread rounding what it copied in place, once, instead of every warp its fragments: 240 -> 270 us.
PW_BK = 32  # positions a slice (the GEMM's k step through shared memory)
PW_STAGES = 3  # cp.async pipeline depth
PW_BM = (16, 32, 48, 64, 96, 128)  # out channels a CTA: m16 tiles over WARPS_M <= 4 warps, at most 2 a warp
PW_BN = (8, 16, 32, 48, 64)  # input channels a CTA: n8 tiles over WARPS_N <= 2 warps, at most 4 a warp
PW_TARGET_CTAS = 512  # splits of the positions until about this many CTAs (each split writes a whole partial grad_w)
PW_MIN_SLICES = 8  # ... each split at least this many slices


def pointwise(spec: Spec) -> bool:
    """A 1x1 convolution at stride 1 without padding: its input and output planes are the same positions."""
    s = spec
    return (s.KH, s.KW, s.SH, s.SW, s.PH, s.PW, s.PH_END, s.PW_END) == (1, 1, 1, 1, 0, 0, 0, 0)


def pw_w_plan(spec: Spec, gz_pre_rounded: bool) -> dict | None:
    """grad_w of a pointwise convolution as a GEMM (the comment above): a CTA owns grad_w[BM out channels][BN input
    channels] of one group and runs over a split's slices of BK consecutive positions of an image, staging gz's BM x BK
    and x's BN x BK blocks (V floats a cp.async; rows LDS floats apart, 8 mod 32: a half-warp's 64-bit fragment reads
    hit 32 banks). gz_pre_rounded: kgen's adjoint kernel may write gz rounded to TF32 (for grad_x from halo tiles as
    well), so an instance that does not round it again is built. None unless the convolution is 1x1, stride 1,
    unpadded (then x's and gz's planes match) and not the direct path's."""
    s = spec
    if direct(s) or not pointwise(s):
        return None
    cig, cog = s.CI // s.G, s.CO // s.G
    # the fewest tiles of the widest block, each as narrow as that allows (an even split: 96 = one tile of 96)
    bm = min(b for b in PW_BM if b >= ceil_div(cog, ceil_div(cog, PW_BM[-1])))
    bn = min(b for b in PW_BN if b >= ceil_div(cig, ceil_div(cig, PW_BN[-1])))
    wm = max(d for d in (1, 2, 3, 4) if (bm // 16) % d == 0 and bm // (16 * d) <= 2)
    wn = max(d for d in (1, 2) if (bn // 8) % d == 0)
    v = next(v for v in (4, 2, 1) if (s.H * s.W) % v == 0)
    lds = PW_BK + 8
    smem = PW_STAGES * (bm + bn) * lds * 4
    assert smem <= HALO_SMEM_MAX, "the pointwise grad_w's stages exceed the opt-in shared memory"
    threads = 32 * wm * wn
    return dict(BM=bm, BN=bn, WARPS_M=wm, WARPS_N=wn, THREADS=threads, MIN_CTAS=max(1, min(4, 512 // threads)),
                BK=PW_BK, STAGES=PW_STAGES, LDS=lds, V=v, MTILES=ceil_div(cog, bm), NTILES=ceil_div(cig, bn),
                SPI=ceil_div(s.H * s.W, PW_BK), FLUSH_TF32=NOFLUSH_K_MAX // PW_BK, TARGET_CTAS=PW_TARGET_CTAS,
                MIN_SLICES=PW_MIN_SLICES, SMEM_BYTES=smem, ROUNDS=[True, False] if gz_pre_rounded else [True])


def fold_stage_ld(halo: dict) -> int:
    """A folded stage's staged channel in floats (its PLD): the CTA's TH x TW outputs plus EPI_PAD, which puts the four
    column pairs of an mma fragment's stores in different banks (EPI_PAD's comment)."""
    return halo["TH"] * halo["TW"] + EPI_PAD


def fused_pool(spec: Spec, halo: dict | None, tile: dict) -> dict | None:
    """The halo forward with the first stage folded in, when that stage is avg / max pooling with the window equal to
    the stride, no padding or dilation, and no partial windows, whose windows fall inside a CTA's TH x TW tile: the
    conv program's output then never reaches global memory. Inference and training alike: the training kernel (SAVE)
    also writes what the backward reads, z = conv + bias where the program's backward needs it, the pooled value
    before the stage's program and max pooling's winners, as the stage's own kernel would have saved them."""
    if halo is None or not spec.stages:
        return None
    st = spec.stages[0]
    if st.kind != "pool" or st.op not in ("avg", "max"):
        return None
    kh, kw, sh, sw, ph, pw, dh, dw = st.window
    if (kh, kw) != (sh, sw) or (ph, pw) != (0, 0) or (dh, dw) != (1, 1) or halo["TH"] % kh or halo["TW"] % kw:
        return None
    if st.ceil_mode and (spec.HO % kh or spec.WO % kw):
        return None
    pld = fold_stage_ld(halo)
    ps = tile["BN"] * pld * 4  # the CTA's conv outputs, staged for pooling
    # the folded kernel unrolls one row of taps at a time with TF32 allowed: all of them spilled on sm_80 (its pooling
    # epilogue holds registers of its own)
    return dict(op=st.op, KH=kh, KW=kw, PHO=st.out_shape[2], PWO=st.out_shape[3], divisor=st.divisor or kh * kw,
                PLD=pld, SMEM_BYTES=max(halo["SMEM_BYTES"], ps), TAP_UNROLL=spec.KW)


FOLD_REDUCE_PASS = {"sum": "SUM", "mean": "SUM", "amax": "MAX", "amin": "MIN", "window_max": "MAX"}
FOLD_NEUTRAL = {"SUM": "0.0f", "MAX": "-INFINITY", "MIN": "INFINITY"}


def fused_reduce(spec: Spec, halo: dict | None, tile: dict, fma_fwd: dict | None) -> dict | None:
    """Inference (no autograd) through the halo forward, or the forward on FMAs, with a first stage that reduces over
    (H, W) folded in: sum, mean, amax, amin, and adaptive avg / max pooling to 1x1 (window_max; inference needs only
    its value, the maximum with NaN propagating). Halo: each CTA stages its program outputs in shared memory and
    reduces each channel's TH x TW of them in a fixed order (LANES threads a channel, then a shuffle tree) into one
    partial per (image, channel, tile). FMAs: a block covers THREADS column groups of one image (TILES blocks an
    image); each thread combines its columns in order, then a shuffle tree and the warps in order. A finishing kernel
    combines an (image, channel)'s TILES partials in a fixed order and applies the stage's program. The conv output
    never reaches global memory, and the result is the same bits run to run."""
    if (halo is None and fma_fwd is None) or not spec.stages:
        return None
    st = spec.stages[0]
    if st.kind != "reduce" or st.op not in FOLD_REDUCE_PASS or st.dims != (2, 3):
        return None
    fold = FOLD_REDUCE_PASS[st.op]
    if halo is None:
        tiles = ceil_div(spec.HO * fma_fwd["GW"], fma_fwd["THREADS"])
        return dict(PASS=fold, NEUTRAL=FOLD_NEUTRAL[fold], MEAN=st.op == "mean", TILES=tiles)
    lanes = tile["THREADS"] // tile["BN"]
    if tile["THREADS"] % tile["BN"] or lanes > 32 or lanes & (lanes - 1) or (halo["TH"] * halo["TW"]) % lanes:
        return None
    pld = fold_stage_ld(halo)
    ps = tile["BN"] * pld * 4  # the CTA's program outputs, staged for the reduction
    return dict(PASS=fold, NEUTRAL=FOLD_NEUTRAL[fold], MEAN=st.op == "mean", LANES=lanes,
                TILES=halo["TILES_H"] * halo["TILES_W"], PLD=pld, SMEM_BYTES=max(halo["SMEM_BYTES"], ps),
                TAP_UNROLL=spec.KW)


FOLD_CREDUCE_PASS = {"sum": "SUM", "mean": "SUM", "amax": "MAX", "amin": "MIN", "max_dim": "MAX", "min_dim": "MIN",
                     "logsumexp": "LSE"}
FOLD_CREDUCE_MIN_CHANNELS = 4  # a channel reduction's partials: at least this many channels each (else no fold)


def fused_creduce(spec: Spec, halo: dict | None, tile: dict, fma_fwd: dict | None = None) -> dict | None:
    """Inference (no autograd) through the halo forward, or the forward on FMAs, with a first stage that reduces over
    the channel dim only
    (dims (1,), keepdim or not) folded in: sum, mean, amax, amin, logsumexp, and max / min over dim 1 (inference
    needs only their values, NaN propagating as PyTorch's). The combine runs in registers: each thread applies the
    program to its fragment's columns of a row and combines them in channel order, then the row's 4 lanes by shuffles;
    on tiles of several warp columns (2 x 4 warps) the columns' partials go through shared memory and one thread a
    position combines them in warp-column (channel) order (logsumexp: the maximum, then the sum of exp(v - shift),
    shift = 0 where the maximum is infinite, as PyTorch's). Where one CTA holds every channel (G = 1 and COG <= BN: PARTS = 1) it applies the
    stage's program and writes the stage's output; else each of the G x CTILES channel slices writes one partial per
    position ([n][PARTS][HO*WO]; logsumexp a (maximum, sum) pair) and cfold_finish combines them in channel order.
    FMAs: each thread combines its CT channels for each of its PXW columns in registers and writes one partial per
    (channel tile, position); cfold_finish always runs (FINISH; it applies the stage's program, so the FMA kernel
    takes no stage parameters). The conv output (CO values a position) never reaches global memory; the result is the
    same bits run to run. None: neither kernel, another first stage, or slices under FOLD_CREDUCE_MIN_CHANNELS
    channels."""
    if (halo is None and fma_fwd is None) or not spec.stages:
        return None
    st = spec.stages[0]
    if st.kind != "reduce" or st.op not in FOLD_CREDUCE_PASS or tuple(st.dims) != (1,) or not st.in_batched:
        return None
    common = dict(PASS=FOLD_CREDUCE_PASS[st.op], MEAN=st.op == "mean", PAIR=st.op == "logsumexp")
    if halo is None:
        cog, ct = spec.CO // spec.G, fma_fwd["CT"]
        if min(cog, ct) < FOLD_CREDUCE_MIN_CHANNELS:
            return None
        return dict(common, PARTS=spec.G * fma_fwd["CTILES"], FINISH=True, SMEM_BYTES=0, TAP_UNROLL=0)
    cog, bn = spec.CO // spec.G, tile["BN"]
    ctiles = ceil_div(cog, bn)
    if min(cog, bn) < FOLD_CREDUCE_MIN_CHANNELS or tile["BM"] != halo["TH"] * halo["TW"] or tile["THREADS"] < tile["BM"]:
        return None
    # taps unrolled (on mma.sync; its wgmma instance takes the forward's TAP_UNROLL) as tap_unroll says: all of a 3x3
    # kernel (a kernel row at a time, the folded pool's choice, spilled 16 bytes at 128 registers on sm_90:
    # scaling_min_c's TF32 instance at 4 CTAs an SM), a row of larger ones (all 20 taps of Conv2d(8->40, (4, 5), s (1, 2),
    # dil 2) -> logsumexp over C spilled 76 bytes on sm_80 and sm_90 at 2 CTAs: a compile sweep's draw, seed 5004); the
    # warp columns' partials (2 x 4 warps) reuse the operands' shared memory (the template's static_assert checks they fit)
    return dict(common, PARTS=spec.G * ctiles, FINISH=spec.G * ctiles > 1, SMEM_BYTES=halo["SMEM_BYTES"],
                TAP_UNROLL=tap_unroll(spec.KH, spec.KW))


def fold_pool_backward(spec: Spec) -> dict | None:
    """Training: when the first stage is 2-d pooling (any kind), the convolution's adjoint kernel gathers that stage's
    input gradient itself (tail.cu.j2's pool_grad per conv output element) instead of reading it from a tensor the
    size of the conv output that the stage's backward would write. None: no such stage."""
    if not spec.stages or spec.stages[0].kind != "pool":
        return None
    st = spec.stages[0]
    return dict(OH=st.out_shape[2], OW=st.out_shape[3])


def direct(spec: Spec) -> dict | None:
    """Direct kernels (float32 FMA per output, input gradient and weight tap) instead of GEMMs: one input channel per
    group (depthwise, or a one-channel input), where the GEMM's reduction would be only the KH*KW taps. The forward
    gives each thread a strip of RO output rows of one column (at most DIRECT_ROWS_OUT, split evenly over HO), which
    reads its ROWS input rows once each."""
    if spec.CI // spec.G != 1 or spec.KH * spec.KW > DIRECT_TAPS_MAX:
        return None
    strips = ceil_div(spec.HO, DIRECT_ROWS_OUT)
    ro = ceil_div(spec.HO, strips)
    # grad_x unrolls every tap: 4 blocks an SM (64 registers) up to DIRECT_DX_TAPS_4BLOCKS taps, else 2 (a 5 x 5 kernel
    # at stride (2, 2), dilation 3 spilled 4 bytes at 64)
    dx_blocks = 4 if spec.KH * spec.KW <= DIRECT_DX_TAPS_4BLOCKS else 2
    return dict(RO=ro, ROWS=(ro - 1) * spec.SH + (spec.KH - 1) * spec.DH + 1, STRIPS=ceil_div(spec.HO, ro),
                DX_MIN_BLOCKS=dx_blocks)


FMA_DX_CIG_MAX = 4  # grad_x with float32 FMAs (fma_dx_plan) for at most this many input channels a group
FMA_DX_WS_FLOATS = 12288  # its staged weights: 48 KB of static shared memory
FMA_DX_PXW = 4  # its input pixels a thread, consecutive in a phase row


def fma_dx_plan(spec: Spec) -> dict | None:
    """grad_x with float32 FMAs where the group has at most FMA_DX_CIG_MAX input channels, so an implicit GEMM's n8
    columns would be mostly padding while its loader gathers gz as often (the ResNet stem's 7x7 / 2 conv on 3
    channels: 2.7 ms for grad_x on the H200 against cuDNN's 0.48), and so would a halo convolution's (derive() asks
    this first). Each thread: PXW input pixels of a stride phase's row, every input channel of the group; the weights
    of CO_CHUNK out channels staged as [co][tap][CIGP] (CIGP: CIG padded to a vector width). None: the direct
    kernels, more input channels, or weights beyond the shared memory."""
    s = spec
    cig = s.CI // s.G
    cigp = 1 << (cig - 1).bit_length()
    if direct(s) or cig > FMA_DX_CIG_MAX or s.KH * s.KW * cigp > FMA_DX_WS_FLOATS:
        return None
    phases = [dict(ih0=ih0, iw0=iw0, hp=hp, wp=wp) for _, _, ih0, iw0, hp, wp in stride_phases(s)]
    cog, most = s.CO // s.G, FMA_DX_WS_FLOATS // (s.KH * s.KW * cigp)
    # PXW consecutive pixels of a phase row a thread: per (out channel, row tap) it loads the PXW + span columns they
    # read once instead of PXW x (column taps) loads
    pxw = FMA_DX_PXW
    return dict(THREADS=256, PXW=pxw, CIGP=cigp, CIG_MAX=FMA_DX_CIG_MAX, PHASES=phases,
                CO_CHUNK=ceil_div(cog, ceil_div(cog, most)),  # equal chunks of at most `most` out channels
                MAX_GROUPS=max(ph["hp"] * ceil_div(ph["wp"], pxw) for ph in phases))


def tap_table(channels: int, spec: Spec, tile_k: int) -> list[tuple[int, int]]:
    """Taps k = (c, kh, kw) in reduction order as (c, kh*DH << 16 | kw*DW), padded with zeros to a multiple of the
    GEMM tiles' k extent (which also bounds grad_w's j tiles); empty when there are more than TAB_MAX taps."""
    n = channels * spec.KH * spec.KW
    if n > TAB_MAX or (spec.KH - 1) * spec.DH >= 1 << 15 or (spec.KW - 1) * spec.DW >= 1 << 16:
        return []
    rows = [(c, (kh * spec.DH) << 16 | kw * spec.DW) for c in range(channels) for kh in range(spec.KH) for kw in range(spec.KW)]
    return rows + [(0, 0)] * (ceil_div(n, tile_k) * tile_k - n)


TAIL_THREADS = 256  # every kernel after the convolution
RED_TARGET_BLOCKS = 1024  # reductions along the innermost dim: split each output's range until about this many blocks
RED_MIN_CHUNK = 2048  # ... but never below this many elements per block
# reductions that keep the innermost dim (one output a thread): split each output's range until the blocks (T outputs
# each) times the splits reach about RED_TARGET_BLOCKS, never below this many elements a thread. H200, TF32, mean over
# (C, H) of a 35x384x95x98 conv output (3430 outputs of 36480 elements; a random benchmark draw): one thread an output
# over the whole range took 3.72 ms, 14 blocks on 132 SMs
RED_MIN_THREAD_CHUNK = 64
# a reduction's finish from this many splits on: one block an output, its threads striding the splits, then a fixed
# tree (block_combine); below, one thread an output combines them in order. H200: amax over all of an 11x80x62x41
# conv output (1 output, 1024 splits) took 92 us in one thread's loop
FINISH_WIDE_SPLITS = 32
IDX_OPS = frozenset({"max", "adaptive_max", "max_dim", "min_dim", "window_max"})  # keep the winner's index for backward
READS_INPUT = frozenset({"amax", "amin", "max_all", "min_all", "logsumexp"})  # backward reads the input and result
REDUCE_PASS = {"sum": "SUM", "mean": "SUM", "amax": "MAX", "amin": "MIN", "max_all": "MAX", "min_all": "MIN",
               "max_dim": "ARGMAX", "min_dim": "ARGMIN", "window_max": "ARGMAX_NANLAST", "logsumexp": "SUMEXP"}
COUNT_PASS = {"amax": "COUNT_EQ", "amin": "COUNT_EQ", "max_all": "COUNT_EQ_NAN", "min_all": "COUNT_EQ_NAN"}


def all_params(spec: Spec) -> list[Param]:
    """Every tensor the model reads besides the conv's: the conv program's first, then each stage's."""
    return list(spec.params) + [p for st in spec.stages for p in st.params]


def _tensor(shape: tuple[int, ...], batched: bool) -> dict:
    """A value after the convolution: C++ / Python shape expressions with the batch `n` as dim 0 while batched,
    its element count, and its (outer, channel, inner) split for per-channel parameters."""
    dims = (["n"] + [str(d) for d in shape[1:]]) if batched else [str(d) for d in shape]
    per = math.prod(shape[1:]) if batched else math.prod(shape)
    rank = len(shape)
    return dict(
        rank=rank, shape_cpp="{" + ", ".join(dims) + "}", shape_py="(" + ", ".join(dims) + ("," if rank == 1 else "") + ")",
        numel=f"n * {per}LL" if batched else f"{per}LL",
        C=shape[1] if rank >= 2 else 1, INNER=math.prod(shape[2:]) if rank >= 2 else 1,
        outer=("n" if batched else f"{shape[0]}LL") if rank >= 1 else "1LL",
    )


def _offset_lines(var: str, dims: list[int], shape: tuple[int, ...], strides: list[int], out: str) -> list[str]:
    """C++ statements setting `out` to the element offset of flat index `var` over `dims` (outermost first; the
    outermost takes the rest, so a run-time batch size there needs no constant)."""
    if not dims:
        return [f"const long long {out} = 0;"]
    lines = [f"long long {out} = 0, {out}_t = {var};"]
    for d in reversed(dims[1:]):
        lines.append(f"{out} += ({out}_t % {shape[d]}LL) * {strides[d]}LL; {out}_t /= {shape[d]}LL;")
    lines.append(f"{out} += {out}_t * {strides[dims[0]]}LL;")
    return lines


def _split_lines(shape: tuple[int, ...], kept: list[int]) -> list[str]:
    """C++ statements splitting flat input index i into o (the output's flat index over the kept dims) and j (the
    flat index over the reduced dims)."""
    lines = ["long long t = i, o = 0, j = 0;"]
    mult = {"o": 1, "j": 1}
    for d in range(len(shape) - 1, 0, -1):
        v = "o" if d in kept else "j"
        lines.append(f"{v} += (t % {shape[d]}LL) * {mult[v]}LL; t /= {shape[d]}LL;")
        mult[v] *= shape[d]
    if shape:
        v = "o" if 0 in kept else "j"
        lines.append(f"{v} += t * {mult[v]}LL;")
    return lines


def _size_expr(dims: list[int], shape: tuple[int, ...], batched: bool) -> str:
    return " * ".join(["n" if d == 0 and batched else f"{shape[d]}LL" for d in dims]) or "1LL"


def _stage_context(k: int, st: Stage, first: int) -> dict:
    """Everything the templates need for stage k (its params are p{first}, p{first+1}, ...)."""
    cnames = {p.name: f"p{first + i}" for i, p in enumerate(st.params)}
    names = Names(x="pv", g="gv", params={p.name: f"{cnames[p.name]}[{'c' if p.broadcast == 'channel' else '0'}]"
                                          for p in st.params}, prefix="t")
    backward = derive_backward(st.program)
    fwd, bwd = emit_forward(st.program, names), emit_backward(backward, names)
    grads = dict(bwd.param_grads)
    has_program = bool(st.program.live())
    ctx = dict(
        k=k, kind=st.kind, op=st.op, has_program=has_program, params_first=first, has_idx=st.op in IDX_OPS,
        needs_in=st.op in READS_INPUT,
        needs_pre=st.op in READS_INPUT or (has_program and any(r.kind in ("input", "node") for r in backward.needs)),
        IN=_tensor(st.in_shape, st.in_batched), OUT=_tensor(st.out_shape, st.out_batched),
        fwd_lines=list(fwd.lines), fwd_result=fwd.result, bwd_lines=list(bwd.lines), bwd_result=bwd.result,
        params=[dict(c=cnames[p.name], name=p.name, scalar=p.broadcast == "scalar") for p in st.params],
        red_terms=[grads[p.name] for p in st.params],
    )
    if st.kind == "pool":
        n0 = "n" if st.in_batched else f"{st.in_shape[0]}LL"
        ctx.update(C=st.in_shape[1], H=st.in_shape[2], W=st.in_shape[3], OH=st.out_shape[2], OW=st.out_shape[3],
                   planes=f"{n0} * {st.in_shape[1]}LL", count_include_pad=st.count_include_pad, divisor=st.divisor,
                   DISJOINT=False)
        if st.window:
            kh, kw, sh, sw, ph, pw, dh, dw = st.window
            ctx.update(KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw, DH=dh, DW=dw,
                       DISJOINT=windows_disjoint((kh, kw), (sh, sw), (dh, dw)))
    elif st.kind == "reduce":
        shape, rank = st.in_shape, len(st.in_shape)
        kept = [d for d in range(rank) if d not in st.dims]
        strides = [math.prod(shape[d + 1:]) for d in range(rank)]
        ctx.update(
            PASS=REDUCE_PASS[st.op], COUNT_PASS=COUNT_PASS.get(st.op, ""), BLOCK_MODE=(rank - 1) in st.dims,
            nout=_size_expr(kept, shape, st.in_batched), nred=_size_expr(list(st.dims), shape, st.in_batched),
            base_lines=_offset_lines("o", kept, shape, strides, "base"),
            joff_lines=_offset_lines("j", list(st.dims), shape, strides, "joff"),
            split_lines=_split_lines(shape, kept),
        )
    return ctx


def dgrad_phases(spec: Spec, cog: int) -> tuple[list[dict], list[tuple[int, int]]]:
    """grad_x's sub-problems and its tap table. With stride SH x SW, the input rows with (ih + PH) % SH == rh are
    reached only by the taps kh with kh*DH % SH == rh (likewise columns), so each such phase is a dense GEMM over its
    own taps instead of one GEMM over every tap with most of them zero (a 4x waste at stride 2). A phase is
    (ih0, iw0: its first row / column; hp, wp: its rows / columns; koff, k: its taps' slice of the table). Without a
    table (more than TAB_MAX taps) or at stride 1: one phase of every tap, taps computed."""
    s = spec
    single = ([dict(ih0=0, iw0=0, hp=s.H, wp=s.W, koff=0, k=cog * s.KH * s.KW)], tap_table(cog, s, BK))
    if (s.SH, s.SW) == (1, 1) or not single[1] or cog * s.KH * s.KW + s.SH * s.SW * BK > TAB_MAX:
        return single
    phases: list[dict] = []
    table: list[tuple[int, int]] = []
    for rh, rw, ih0, iw0, hp, wp in stride_phases(s):
        khs = [kh for kh in range(s.KH) if kh * s.DH % s.SH == rh]
        kws = [kw for kw in range(s.KW) if kw * s.DW % s.SW == rw]
        taps = [(co, (kh * s.DH) << 16 | kw * s.DW) for co in range(cog) for kh in khs for kw in kws]
        phases.append(dict(ih0=ih0, iw0=iw0, hp=hp, wp=wp, koff=len(table), k=len(taps)))
        table += taps + [(0, 0)] * (ceil_div(len(taps), BK) * BK - len(taps))
    return phases, table


def stride_phases(spec: Spec) -> list[tuple[int, int, int, int, int, int]]:
    """The stride phases of the input plane that hold pixels, in (rh, rw) order: (rh, rw, ih0, iw0, hp, wp), the rows
    ih0 + SH*i (i < hp) with (ih + PH) % SH == rh, reached only by the taps kh with kh*DH % SH == rh, likewise columns."""
    s = spec
    out = []
    for rh in range(s.SH):
        ih0 = (rh - s.PH) % s.SH
        for rw in range(s.SW):
            iw0 = (rw - s.PW) % s.SW
            hp, wp = len(range(ih0, s.H, s.SH)), len(range(iw0, s.W, s.SW))
            if hp and wp:
                out.append((rh, rw, ih0, iw0, hp, wp))
    return out


def _names(spec: Spec) -> Names:
    return Names(x="z", g="g", params={p.name: f"p{i}[{'co' if p.broadcast == 'channel' else '0'}]"
                                       for i, p in enumerate(spec.params)})


def derive(spec: Spec) -> dict:
    s = spec
    cig, cog = s.CI // s.G, s.CO // s.G
    backward = derive_backward(s.program)
    needs_z = any(r.kind in ("input", "node") for r in backward.needs)
    names = _names(s)
    fwd = emit_forward(s.program, names)
    bwd = emit_backward(backward, names)
    grads = dict(bwd.param_grads)
    red_terms = ([bwd.result] if s.HAS_BIAS else []) + [grads[p.name] for p in s.params]
    red_outputs = ([dict(out="gb", scalar=False)] if s.HAS_BIAS else []) + \
        [dict(out=f"gp{i}", scalar=p.broadcast == "scalar") for i, p in enumerate(s.params)]
    tiles = dict(F=gemm_tile(1 << 20, cog), HF=halo_fold_tile(s, halo_tile(s)), D=halo_dx_tile(s), WG=gemm_tile(cog, cig * s.KH * s.KW))
    phases, phase_table = dgrad_phases(s, cog)
    halo = halo_plan(s, tiles["HF"])
    fma_fwd = fma_fwd_plan(s, halo)
    # few input channels a group: grad_x on FMAs even where it is a halo convolution (the halo GEMM's n8 columns would
    # be mostly padding)
    fma_dx = fma_dx_plan(s)
    halo_dx = None if fma_dx else halo_dx_plan(s, tiles["D"])
    fold = fold_pool_backward(s)
    write_gz = bool(s.program.live()) or fold is not None  # gz in kgen's workspace; else the backward reads gy
    # a pointwise convolution's grad_w is a plain GEMM: the halo kernels' where it is not
    pw_w = pw_w_plan(s, write_gz and halo_dx is not None)
    halo_w = None if pw_w else halo_w_plan(s, not write_gz)
    halo_wg = halo_wg_plan(s, halo_w, not write_gz)
    fpool = fused_pool(s, halo, tiles["HF"])
    stages, first, nsaved = [], len(s.params), 1  # saved[0]: the conv's z
    for k, st in enumerate(s.stages, start=1):
        ctx = _stage_context(k, st, first)
        # a first pooling stage folded into the halo forward (inference and training) has no forward kernel of its own
        ctx["own_forward"] = not (k == 1 and fpool is not None)
        for what in ("in", "pre", "idx"):  # where training keeps what the stage's backward reads (-1: nothing)
            wanted = ctx["has_idx"] if what == "idx" else ctx[f"needs_{what}"]
            ctx[f"save_{what}"] = nsaved if wanted else -1
            nsaved += int(wanted)
        stages.append(ctx)
        first += len(st.params)
    freduce = fused_reduce(s, halo, tiles["HF"], fma_fwd)
    fcreduce = fused_creduce(s, halo, tiles["HF"], fma_fwd)
    epi_staged = bool(halo) and s.WO % 8 != 0  # rows that split 32-byte sectors (EPI_PAD's comment)
    fwd_smem = halo_fwd_smem(halo, tiles["HF"], epi_staged)
    tf32_ctas = halo_tf32_ctas(halo, tiles["HF"], fwd_smem, (fpool, freduce, fcreduce))
    # Does the training forward do more than inference's: write z, a stage's pre-program value or winners, or give up
    # the folded reduction? Then the binding's save policy may leave that work to the backward (recompute).
    train_extra = needs_z or freduce is not None or fcreduce is not None or any(
        st["save_pre"] >= 0 or st["save_idx"] >= 0 for st in stages if st["kind"] != "view")
    for key, t in tiles.items():
        ctiles = ceil_div(cog if key in ("F", "HF") else cig, t["BN"])
        if key != "WG" and s.G * ctiles > 65535:
            raise Unsupported(f"groups={s.G} with {ctiles} channel tiles per group exceeds the grid's 65535 rows")
    return dict(
        CIG=cig, COG=cog, KK=s.KH * s.KW, KTOT=cig * s.KH * s.KW, KDG=cog * s.KH * s.KW, XPLANE=s.H * s.W,
        YPLANE=s.HO * s.WO, BK=BK, STAGES=STAGES, WG_TARGET_CTAS=WG_TARGET_CTAS, WG_MIN_CHUNK=WG_MIN_CHUNK,
        EB_TARGET_BLOCKS=EB_TARGET_BLOCKS, **tiles,
        fwd_lines=list(fwd.lines), fwd_result=fwd.result, bwd_lines=list(bwd.lines), bwd_result=bwd.result,
        needs_z=needs_z, write_gz=write_gz, FOLD_POOL_BWD=fold, NRED=len(red_terms), red_terms=red_terms,
        red_outputs=red_outputs, TAB_MAX=TAB_MAX, DIRECT=direct(s),
        tap_tables=[dict(name="X", entries=tap_table(cig, s, max(BK, tiles["WG"]["BN"]))),
                    dict(name="Y", entries=[] if halo_dx or fma_dx else phase_table)],
        HALO=halo, FMA_FWD=fma_fwd, HALO_DX=halo_dx, FMA_DX=fma_dx, HALO_W=halo_w, HALO_WG=halo_wg, PW_W=pw_w, EPI_PAD=EPI_PAD,
        HALO_FWD_SMEM=fwd_smem, EPI_STAGED=epi_staged, HALO_TF32_CTAS=tf32_ctas,
        HALO_TF32_CTAS_POOL_SAVE=min(tf32_ctas, HALO_TF32_CTAS_POOL_SAVE_MAX),
        EPI_TAP_UNROLL=tap_unroll(s.KH, s.KW),
        # the halo loaders' 16-byte copies read x (forward) and, where grad_x reads it directly, grad_y aligned; so
        # do the pointwise grad_w's vector copies
        ALIGN16_X=bool(halo and halo["HV"] > 1) or bool(pw_w and pw_w["V"] > 1),
        ALIGN16_GY=bool(not write_gz and ((halo_dx and halo_dx["HV"] > 1) or (pw_w and pw_w["V"] > 1))),
        FUSED_POOL=fpool, FUSED_REDUCE=freduce, FUSED_CREDUCE=fcreduce, TRAIN_EXTRA=train_extra,
        # the halo forward's folded instance applies the first stage's program itself (takes its parameters): a folded
        # pool, or a channel fold without a finishing kernel
        FOLD_SPARAMS=bool(fpool) or bool(fcreduce and not fcreduce["FINISH"]),
        dg_phases=phases, DG_MAX_PIXELS=max(ph["hp"] * ph["wp"] for ph in phases),
        params=[dict(c=f"p{i}", name=p.name, shape=list(p.shape)) for i, p in enumerate(all_params(s))],
        conv_params=[dict(c=f"p{i}", name=p.name, shape=list(p.shape)) for i, p in enumerate(s.params)],
        stages=stages, NSAVED=nsaved, TAIL_THREADS=TAIL_THREADS, RED_TARGET_BLOCKS=RED_TARGET_BLOCKS, RED_MIN_CHUNK=RED_MIN_CHUNK,
        RED_MIN_THREAD_CHUNK=RED_MIN_THREAD_CHUNK, FINISH_WIDE_SPLITS=FINISH_WIDE_SPLITS,
        HALO_TF32_CTAS_WGMMA_ONLY=tf32_ctas > 2 and halo["CC"] > HALO_CC,  # halo_tf32_ctas's comment
        OUT=_tensor((1, s.CO, s.HO, s.WO), True) if not stages else stages[-1]["OUT"],
        TF32_RULES=cudnn_tf32.rules(dict(CI=s.CI, CO=s.CO, G=s.G, KH=s.KH, KW=s.KW, SH=s.SH, SW=s.SW, PH=s.PH, PW=s.PW,
                                         DH=s.DH, DW=s.DW, H=s.H, W=s.W, HO=s.HO, WO=s.WO)),
    )


def batch_rule(spec: Spec) -> dict:
    """Batch sizes the generated module refuses, where a view would make PyTorch's result differ from kgen's (which
    keeps the batch as dim 0 at every size): BATCH_NOT_ONE (a squeeze that drops a batch of 1 too), BATCH_EXACT (the
    one batch size a view with a constant dim 0 allows; 0: any)."""
    return {"BATCH_NOT_ONE": any(st.op == "squeeze_batch" for st in spec.stages),
            "BATCH_EXACT": next((st.in_shape[0] for st in spec.stages if st.op == "fixed_batch"), 0)}


def context(spec: Spec) -> dict:
    return template_context({k: v for k, v in vars(spec).items() if k not in ("program", "params", "stages")},
                            {**derive(spec), **batch_rule(spec)})


def _describe_stage(st: Stage) -> str:
    if st.kind == "pool":
        what = f"{st.op} pooling" + (f" window {st.window[:2]} stride {st.window[2:4]} padding {st.window[4:6]}"
                                    f"{' dilation %s' % (st.window[6:],) if st.op == 'max' else ''}"
                                    f"{' ceil_mode' if st.ceil_mode else ''}" if st.window else "")
    elif st.kind == "reduce":
        what = f"{st.op} over dims {list(st.dims)}{' (keepdim)' if st.keepdim else ''}"
    else:
        what = "view"
    prog = f", then {st.program}" if st.program.live() else ""
    return f"then {what}: {st.in_shape} -> {st.out_shape}{prog}"


def _describe_stages(spec: Spec) -> list[str]:
    if not spec.stages:
        return []
    return [_describe_stage(st) for st in spec.stages] + [
        "each stage after the convolution is its own kernel (one thread per output for pooling; reductions one output",
        "per thread, or blocks over the reduced range with partials combined in order); backward gathers per input",
        "element (the windows or the output holding it), with the saved winner indices for max pooling and max/min.",
    ]


def describe(spec: Spec) -> list[str]:
    d = derive(spec)
    f, dg = d["F"], d["D"]
    program = [f"program after the convolution: {spec.program}" if spec.program.nodes else
               ("no program: a lone convolution" if not spec.stages else "no program on the convolution's output")]
    program += _describe_stages(spec)
    if d["FUSED_POOL"]:
        program.append("the halo forward folds the first stage (pooling, then its program) in, for inference and "
                       "training: the conv program's output is not written (training writes z only where the backward reads it)")
    if d["FUSED_REDUCE"]:
        program.append(f"inference folds the first stage's reduction over (H, W) into the halo forward: one partial "
                       f"per (image, channel, {d['FUSED_REDUCE']['TILES']} tiles), combined in a fixed order by a finishing kernel")
    if d["FUSED_CREDUCE"]:
        parts = d["FUSED_CREDUCE"]["PARTS"]
        program.append(f"inference folds the first stage's reduction over channels into the {'halo forward' if d['HALO'] else 'forward on FMAs'}: " +
                       ("each CTA holds every channel and writes the stage's output" if not d["FUSED_CREDUCE"]["FINISH"] else
                        f"one partial per (position, channel slice), {parts} slice(s) combined in order by a finishing kernel"))
    if d["DIRECT"]:
        return program + [
            f"one input channel per group ({spec.G} groups of {d['COG']} out channels, {spec.KH}x{spec.KW} taps): direct",
            "kernels with float32 FMAs (a GEMM's reduction would be only the taps), in both TF32 modes as cuDNN's depthwise",
            f"kernels: forward {d['DIRECT']['RO']} output rows of a column per thread (each input row read once), the "
            "program applied; grad_x one thread per input element;",
            "grad_w per (channel, image range) block sums reduced in a fixed order, then added over ranges in order.",
            f"Training saves z = conv(x) + bias only when the derived backward reads it ({'it does' if d['needs_z'] else 'it does not'} here).",
        ]
    h = d["HALO"]
    hf = d["HF"]
    how = (f"from halo tiles ({h['TH']}x{h['TW']} positions x {hf['BN']} out channels a CTA of {hf['WARPS_M']}x"
           f"{hf['WARPS_N']} warps, the input rows they read staged once per {h['CC']}-channel chunk, {h['STAGES']} "
           f"buffer(s))" if h else
           f"float32 FMAs ({d['CIG']} input channels a group: {d['FMA_FWD']['PXW']} output columns x {d['FMA_FWD']['CT']} "
           f"out channels a thread)" if d["FMA_FWD"] else
           f"an implicit GEMM (positions x {d['COG']} out channels x {d['KTOT']}) per group, {f['BM']}x{f['BN']} CTA tiles")
    return program + [
        f"forward: {how},",
        "the program applied to the accumulator; 3xTF32 tensor-core math when torch.backends.cudnn.allow_tf32 is off,",
        "one TF32 product per term when it is on (read at each call, as cuDNN). Training saves z = conv(x) + bias only when",
        f"the derived backward reads it ({'it does' if d['needs_z'] else 'it does not'} here).",
        f"backward: dL/dz elementwise with fixed-order per-channel sums (grad_bias, parameter gradients), grad_x " +
        (f"with float32 FMAs ({d['CIG']} input channels a group: {d['FMA_DX']['PXW']} pixels of a stride phase's row a thread)"
         if d["FMA_DX"] else "from halo tiles (a stride-1 convolution of gz with the flipped weights" +
         (f", one for each of {len(d['HALO_DX']['PHASES'])} stride phases)" if len(d["HALO_DX"]["PHASES"]) > 1 else ")")
         if d["HALO_DX"]
         else f"as an implicit GEMM over (co, kh, kw) ({dg['BM']}x{dg['BN']} tiles)") + ",",
        _describe_grad_w(d),
        "split over positions; a second kernel adds the partials in order: bit-identical run to run.",
    ]


def _describe_grad_w(d: dict) -> str:
    """describe()'s line on grad_w's kernel: the pointwise GEMM, halo tiles (and wgmma), or the im2col GEMM."""
    if d["PW_W"]:
        w = d["PW_W"]
        return (f"grad_w of the pointwise convolution as a GEMM gz x^T over every position ({w['BM']}x{w['BN']} tiles "
                f"of {w['BK']}-position slices),")
    if d["HALO_W"]:
        w = d["HALO_W"]
        wgmma = "; on wgmma with TF32 allowed in sm_90a builds" if d["HALO_WG"] else ""
        return (f"grad_w from halo tiles ({w['BM']} out channels x {w['CC']} input channels x {w['NTAP']} taps a "
                f"CTA{wgmma}),")
    return f"grad_w as an im2col GEMM over (n, oh, ow) ({d['WG']['BM']}x{d['WG']['BN']} tiles),"


# ------------------------------------------------------------------------------------------------ initialization


def _literals(v: float) -> list[float]:
    """Short decimals near v (1 to 9 significant digits), shortest first, then v itself: the literal a user wrote
    is among them."""
    out: list[float] = []
    for digits in range(1, 10):
        c = float(f"{v:.{digits}g}")
        if c not in out:
            out.append(c)
    if v not in out:  # a computed value (1 / math.sqrt(fan_in)) written at full precision
        out.append(v)
    return out


SEEDS = (0, 1)  # Model's initialization is replayed under two seeds: a recipe must reproduce both


def _options(target: torch.Tensor, state: torch.Tensor) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """Candidate recipes for target (drawn from the global generator at `state` under the first seed): a constant
    fill, torch.randn / torch.rand scaled and shifted by short literals fitted to the first seed's draw, the usual
    nn.init calls on weights, and nn.init.normal_ / uniform_ with fitted literals. Each is (expression text, a
    function computing exactly that expression from the global generator)."""
    shape = tuple(target.shape)
    flat = target.detach().flatten()
    if target.dtype != torch.float32:  # an unused tensor of another dtype (a BatchNorm's num_batches_tracked): a fill
        v = flat[0].item() if flat.numel() and bool((flat == flat[0]).all()) else None
        return [] if v is None else [(f"torch.full({shape!r}, {v!r}, dtype={target.dtype})",
                                      lambda: torch.full(shape, v, dtype=target.dtype))]
    out: list[tuple[str, Callable[[], torch.Tensor]]] = []
    fitted: list[tuple[str, Callable[[], torch.Tensor]]] = []
    if flat.numel() and float(flat.max() - flat.min()) <= 1e-3 * float(flat.abs().max()):
        # one value (the shortest literal that rounds to it first), or nearly one: a constant added to drawn values
        # (the target is then their difference, rounded)
        out += [(f"torch.full({shape!r}, {v!r})", lambda v=v: torch.full(shape, v)) for v in
                _literals(float(flat[0] if bool((flat == flat[0]).all()) else flat.mean()))]
    for name in ("randn", "rand"):
        base = getattr(torch, name)
        call = f"torch.{name}({shape!r})"
        torch.set_rng_state(state)
        rf = base(shape).flatten()
        out.append((call, lambda base=base: base(shape)))
        if not rf.numel():
            continue
        if rf.numel() >= 2 and float(rf.double().var()) > 0.0:  # least squares over every element, in float64
            r, t = rf.double(), flat.double()
            a0 = float(((r - r.mean()) * (t - t.mean())).sum() / ((r - r.mean()) ** 2).sum())
            b0 = float(t.mean()) - a0 * float(r.mean())
        else:  # one element: a scale alone or a shift alone
            a0 = float(flat[0]) / float(rf[0]) if float(rf[0]) != 0.0 else 1.0
            b0 = float(flat[0]) - float(rf[0])
        scales = [a for a in _literals(a0) if a != 0.0]  # a zero scale is a constant: no draw
        out += [(f"{call} * {a!r}", lambda base=base, a=a: base(shape) * a) for a in scales]
        out += [(f"{call} + {b!r}", lambda base=base, b=b: base(shape) + b) for b in _literals(b0)]
        if rf.numel() >= 2:
            out += [(f"{call} * {a!r} + {b!r}", lambda base=base, a=a, b=b: base(shape) * a + b)
                    for a in scales for b in _literals(b0)]
        if rf.numel() >= 2:  # nn.init.normal_ / uniform_ as written on a tensor (their own rounding of the scale)
            fitted += _init_options(shape, "normal_" if name == "randn" else "uniform_", a0, b0, rf[:2], flat[:2])
    if target.dim() >= 2:  # the initializers of weights: nn.Conv2d's and nn.Linear's own (kaiming_uniform_ with
        # a=sqrt(5)) and the usual re-initializations; last, so the simpler recipes above win where both give the
        # same values, as with one input per output
        out += [(f"nn.init.{call}(torch.empty({shape!r}){args})",
                 lambda call=call, kw=kw: getattr(nn.init, call)(torch.empty(shape), **kw)) for call, args, kw in WEIGHT_INITS]
    return out + fitted  # last: kaiming_uniform_ is a uniform_ whose bounds it computes


# nn.init calls that re-draw a weight, tried as recipes: (function, its arguments as written, as keywords)
WEIGHT_INITS = [
    ("kaiming_uniform_", ", a=math.sqrt(5)", dict(a=math.sqrt(5))),
    ("xavier_uniform_", "", {}),
    ("xavier_normal_", "", {}),
    ("kaiming_normal_", "", {}),
    ("kaiming_uniform_", "", {}),
    ("kaiming_normal_", ", mode='fan_out', nonlinearity='relu'", dict(mode="fan_out", nonlinearity="relu")),
    ("kaiming_uniform_", ", nonlinearity='relu'", dict(nonlinearity="relu")),
    ("kaiming_normal_", ", nonlinearity='relu'", dict(nonlinearity="relu")),
]


def _init_options(shape: tuple, call: str, a0: float, b0: float, draw: torch.Tensor, target: torch.Tensor
                  ) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """nn.init.normal_(t, mean, std) / nn.init.uniform_(t, low, high) with short literals fitted to scale a0 and shift
    b0 of the matching plain draw (randn * std + mean; rand * (high - low) + low), kept where they give the target's
    first two values from the draw's (so only near-exact pairs are drawn and compared in full)."""
    pairs = ([(m, sd) for sd in _literals(a0) if sd > 0 for m in _literals(b0)] if call == "normal_" else
             [(lo, hi) for lo in _literals(b0) for hi in _literals(a0 + b0) if lo < hi])
    d = draw.double()
    near = [(p, q) for p, q in pairs
            if torch.allclose(p + q * d if call == "normal_" else p + (q - p) * d, target.double(), rtol=1e-6, atol=1e-9)]
    return [(f"nn.init.{call}(torch.empty({shape!r}), {p!r}, {q!r})",
             lambda p=p, q=q: getattr(nn.init, call)(torch.empty(shape), p, q)) for p, q in near]


def _recipe(targets: list[torch.Tensor], states: list[torch.Tensor], bases: list[torch.Tensor] | None = None
            ) -> tuple[str, list[torch.Tensor]] | None:
    """The first candidate that, run from each seed's generator state, gives that seed's target (added to that seed's
    base, where bases are given); with the states after it (None when no candidate does)."""
    bases = bases or [None] * len(targets)
    first = targets[0] if bases[0] is None else targets[0] - bases[0]
    for expr, draw in _options(first, states[0]):
        after = []
        for target, state, base in zip(targets, states, bases):
            torch.set_rng_state(state)
            got = draw()
            if not torch.equal(got if base is None else base + got, target):
                break
            after.append(torch.get_rng_state())
        else:
            return expr, after
    return None


def _adjustment(bases: list[torch.Tensor], targets: list[torch.Tensor], states: list[torch.Tensor]
                ) -> tuple[str, str, list[torch.Tensor]] | None:
    """How Model changed a tensor nn.Conv2d had drawn (bases -> targets, one per seed): re-drawn in place (an nn.init
    call or any recipe: op "copy_"), scaled by a literal ("mul_"), or shifted by a constant or a draw ("add_"); with the
    generator states after it. None when none of these gives every seed's target."""
    got = _recipe(targets, states)
    if got is not None:
        return "copy_", got[0], got[1]
    b, t = bases[0].flatten(), targets[0].flatten()
    nonzero = (b != 0).nonzero()
    if len(nonzero):
        i = int(nonzero[0])
        for a in _literals(float(t[i]) / float(b[i])):
            if all(torch.equal(base * a, target) for base, target in zip(bases, targets)):
                return "mul_", repr(a), states
    got = _recipe(targets, states, bases)
    return None if got is None else ("add_", got[0], got[1])


def _conv_adjustments(spec: Spec, drawn: list[dict], wants: list[dict], states: list[torch.Tensor]
                      ) -> tuple[list[dict], list[torch.Tensor]] | None:
    """The steps after nn.Conv2d's own draws that turn its weight and bias into Model's (`nn.init.xavier_uniform_(
    self.conv.weight)`, `self.conv.bias = nn.Parameter(self.conv.bias + torch.ones_like(self.conv.bias) * 0.02)`):
    one "adjust" step per tensor Model changed, in the order whose draws match; with the generator states after them.
    None when a changed tensor has no adjustment."""
    changed = [n for n in conv_tensor_names(spec)
               if not all(torch.equal(d[n], w[n]) for d, w in zip(drawn, wants))]
    for order in itertools.permutations(changed):
        steps, after = [], states
        for name in order:
            got = _adjustment([d[name] for d in drawn], [w[name] for w in wants], after)
            if got is None:
                break
            steps.append(dict(kind="adjust", name=name, op=got[0], expr=got[1]))
            after = got[2]
        else:
            return steps, after
    return None


def conv_tensor_names(spec: Spec) -> list[str]:
    """The convolution's weight and (where it has one) bias, by their names in Model."""
    return [n for n in (spec.weight_name, spec.bias_name) if n]


def _model_order(model: nn.Module) -> Callable[[str], int]:
    """A sort key: a tensor name's place among the model's registered tensors (names that are plain attributes
    last)."""
    place = {n: i for i, n in enumerate(registered_tensors(model))}
    return lambda name: place.get(name, len(place))


def unused_tensors(spec: Spec, model: nn.Module) -> list[str]:
    """Model's parameters and buffers that its forward does not read (an unused nn.Linear, a module's statistics):
    ModelNew holds and draws them too, so that its state_dict and its draws from the generator are Model's."""
    used = set(conv_tensor_names(spec)) | {p.name for p in all_params(spec)}
    return [n for n in registered_tensors(model) if n not in used]


def _model_tensors(spec: Spec, problem: Problem, seed: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Model's tensors built under the seed (the conv's and the program's in float32, the unused ones as they are),
    and their names in the order Model's __init__ registered them (first registration; read through PyTorch's global
    registration hooks, matched to this model's own modules)."""
    events: list[tuple[nn.Module, str]] = []

    def hook(module: nn.Module, name: str, tensor: Any) -> None:
        events.append((module, name))
    handles = [nn.modules.module.register_module_parameter_registration_hook(hook),
               nn.modules.module.register_module_buffer_registration_hook(hook)]
    try:
        torch.manual_seed(seed)
        model = problem.namespace["Model"](*problem.init_args)
    finally:  # the hooks are global: none outlives this construction
        for h in handles:
            h.remove()
    paths = {id(mod): path for path, mod in model.named_modules()}
    core = conv_tensor_names(spec) + [p.name for p in all_params(spec)]
    names = core + unused_tensors(spec, model)
    order = []
    for mod, leaf in events:
        if id(mod) in paths:
            name = f"{paths[id(mod)]}.{leaf}" if paths[id(mod)] else leaf
            if name in names and name not in order:
                order.append(name)
    order += [n for n in names if n not in order]  # attributes that are not registered tensors
    tensors = {}
    for name in names:
        t = attribute(model, name).detach()
        tensors[name] = t.float() if name in core else t.clone()
    return tensors, order


def init_plan(spec: Spec, problem: Problem) -> list[dict] | None:
    with REPLAY_LOCK:
        return _init_plan(spec, problem)


def _init_plan(spec: Spec, problem: Problem) -> list[dict] | None:
    """The order of draws that reproduces Model's parameters under any seed: 'conv' (weight, then bias, drawn as
    nn.Conv2d draws them, then any 'adjust' step Model applied to them) and one expression per program tensor, found
    by replaying Model's draws under two seeds (None when no order and no recipes match)."""
    numel = spec.CO * spec.CI // spec.G * spec.KH * spec.KW
    if numel > 1 << 26:
        return None
    saved = torch.get_rng_state()
    built = [_model_tensors(spec, problem, seed) for seed in SEEDS]
    wants, created = [b[0] for b in built], built[0][1]
    convs, program = conv_tensor_names(spec), [p.name for p in all_params(spec)]
    params = program + [n for n in created if n not in convs and n not in program]  # then the unused tensors
    found = None
    # nn.Conv2d's parameters are drawn together, as it draws them; F.conv2d's tensors may be too (a copy of its
    # reset_parameters), or each by its own recipe. First the order Model's __init__ created them in (the conv's
    # draws where its weight was registered), then every other order of a few items
    together = [n for n in created if n not in convs[1:]]
    together[together.index(convs[0])] = "conv"
    functional = _conv_node(problem.gm).op == "call_function"
    lists = [["conv"] + params] + ([convs + params] if functional else [])
    orders = [tuple(together)] + ([tuple(created)] if functional else []) + [
        order for items in lists for order in (itertools.permutations(items) if len(items) <= 5 else [tuple(items)])]
    for order in orders:
        states = []
        for seed in SEEDS:
            torch.manual_seed(seed)
            states.append(torch.get_rng_state())
        plan: list[dict] = []
        for item in order:
            if item == "conv":
                drawn, after = [], []
                for state in states:
                    torch.set_rng_state(state)
                    drawn.append(dict(zip(convs, conv2d_default_init(
                        spec.CO, spec.CI // spec.G, spec.KH, spec.KW, spec.HAS_BIAS))))
                    after.append(torch.get_rng_state())
                got = _conv_adjustments(spec, drawn, wants, after)
                if got is None:
                    break
                plan += [dict(kind="conv")] + got[0]
                states = got[1]
                continue
            got = _recipe([want[item] for want in wants], states)
            if got is None:
                break
            plan.append(dict(kind="tensor", name=item, expr=got[0]))
            states = got[1]
        else:
            found = plan
            break
    torch.set_rng_state(saved)
    return found


def module_context(spec: Spec, problem: Problem) -> dict:
    plan = init_plan(spec, problem)
    model = _meta_model(problem)
    unused = unused_tensors(spec, model)
    if plan is None:
        warnings.warn(f"{problem.path.name}: kgen could not reproduce how Model initializes its parameters "
                      f"({', '.join([spec.weight_name] + [p.name for p in all_params(spec)] + unused)}); ModelNew draws "
                      "the conv as nn.Conv2d does, the program's tensors with torch.randn and unused ones as zeros, so "
                      "load Model's state_dict into it for equal parameters", stacklevel=2)
        plan = [dict(kind="conv")] + [dict(kind="tensor", name=p.name, expr=f"torch.randn({p.shape!r})")
                                      for p in all_params(spec)] + [
            dict(kind="tensor", name=n, expr=f"torch.zeros({tuple(attribute(model, n).shape)!r}, "
                                             f"dtype={attribute(model, n).dtype})") for n in unused]
    conv_tensors = conv_tensor_names(spec)
    kinds = {**{n: _param_kind(model, n) for n in conv_tensors + unused}, **{p.name: p.kind for p in all_params(spec)}}
    for step in plan:
        if step["kind"] == "tensor":
            owner, _, leaf = step["name"].rpartition(".")
            step.update(owner=owner, leaf=leaf, tensor_kind=kinds[step["name"]])
        elif step["kind"] == "adjust":
            step.update(target=attr_expr(step["name"]))
    conv_path = spec.weight_name.rpartition(".")[0]
    # nn.Conv2d's parameters are created on an empty module at its path; F.conv2d's weight and bias are the model's
    # own tensors under any names, each registered where Model holds it (as a parameter or a buffer)
    module = _conv_node(problem.gm).op == "call_module"
    return {
        "holders": holder_modules(sorted(conv_tensors + [p.name for p in all_params(spec)] + unused, key=_model_order(model))),
        "conv_module": module,
        "conv_path": conv_path,
        "conv_tensors": [dict(zip(("owner", "leaf"), n.rpartition(".")[::2]), kind=kinds[n]) for n in conv_tensors],
        "weight_expr": attr_expr(spec.weight_name),
        "bias_expr": attr_expr(spec.bias_name) if spec.bias_name else "None",
        "param_exprs": [attr_expr(p.name) for p in all_params(spec)],
        "init_plan": plan,
        "fan_in": spec.CI // spec.G * spec.KH * spec.KW,
    }


def traffic(spec: Spec, n: int) -> tuple[int, int]:
    """Fewest bytes moved: forward reads x and writes y (the model's output); a training step also writes z (the
    conv output) when the backward reads it, then reads grad_y, x (and z) and writes grad_x (weights are
    negligible). With pooling or reductions after the convolution this is the fused floor: the conv output is
    neither written nor read back."""
    x = 4 * n * spec.CI * spec.H * spec.W
    if spec.stages:
        last = spec.stages[-1]
        y = 4 * (n if last.out_batched else 1) * math.prod(last.out_shape[1:] if last.out_batched else last.out_shape)
    else:
        y = 4 * n * spec.CO * spec.HO * spec.WO
    z = y if derive(spec)["needs_z"] else 0
    return x + y, (x + y + z) + (y + x + z + x)
