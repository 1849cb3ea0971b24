"""Family conv2d_epilogue: nn.Conv2d on the input, then any program of pointwise ops, fused, forward and backward.

Scope:
- nn.Conv2d on the model's single NCHW float32 input: any channels, kernel, stride, dilation, padding (ints, pairs,
  'valid', 'same', also where 'same' pads one more on the bottom/right), groups (1, general, depthwise), bias on or
  off; padding_mode 'zeros' (others are refused);
- then a pointwise program (kgen/pointwise.py's table): a DAG where each op may use any earlier value, with Python
  numbers, 0-d tensor constants and float32 parameters / buffers that are scalars or per-channel ((C,1,1), (1,C,1,1))
  as the other operands; nothing at all (a lone convolution) is in scope too.
Pooling and reductions after the convolution are not yet in this family (issue 9); they are refused naming the op.

Kernels (templates/conv2d_epilogue/kernel.cu.j2): implicit GEMMs on tensor cores, 3xTF32 (float32 accuracy) when
torch.backends.cudnn.allow_tf32 is off, plain TF32 when it is on (as cuDNN), picked at call time. The forward
applies the program to the accumulator; training saves the conv output z only when the program's derived backward
reads it (recomputing z would cost a second convolution, so storing always wins when it is read at all).
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.fx as fx
import torch.nn as nn

from kgen.errors import Unsupported
from kgen.family import attr_expr, conv2d_default_init, holder_modules
from kgen.geometry import ceil_div, conv_out_size
from kgen.ops import Op, attribute, normalize, pointwise_program, where
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
    dtype: str = "float32"


# ------------------------------------------------------------------------------------------------------ matching


def _conv_node(gm: fx.GraphModule) -> fx.Node | None:
    """The nn.Conv2d call that reads the model's only input, when that is the input's only use."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1 or len(placeholders[0].users) != 1:
        return None
    user = next(iter(placeholders[0].users))
    if user.op != "call_module" or type(gm.get_submodule(user.target)) is not nn.Conv2d:
        return None
    return user


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
    try:
        program = pointwise_program(gm, node, out)
    except Unsupported as exc:
        raise Unsupported(f"{exc} (the {NAME} family takes nn.Conv2d followed by pointwise ops; pooling and "
                          "reductions after the convolution are not supported yet)") from None
    model = _meta_model(problem)
    params = []
    for ref in program.params:
        t = attribute(model, ref.name)
        params.append(Param(ref.name, ref.broadcast, tuple(t.shape), _param_kind(model, ref.name)))
        if ref.broadcast == "channel" and t.numel() != c["out_channels"]:
            raise Unsupported(f"{where(out)}: self.{ref.name} of shape {tuple(t.shape)} is read per channel but the "
                              f"convolution has {c['out_channels']} channels")
    N, CI, H, W = conv.in_shape
    _, CO, HO, WO = conv.shape
    (KH, KW), (SH, SW), (PH, PW), (DH, DW) = c["kernel"], c["stride"], c["padding"], c["dilation"]
    right = c["padding_end"]
    spec = Spec(CI=CI, H=H, W=W, CO=CO, G=c["groups"], KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, PH_END=right[0],
                PW_END=right[1], DH=DH, DW=DW,
                HO=HO, WO=WO, HAS_BIAS=c["bias"], weight_name=c["weight_name"], bias_name=c["bias_name"],
                program=program, params=tuple(params))
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


def gemm_tile(rows: int, cols: int, max_rows: int = 128) -> dict:
    """A CTA tile for a GEMM with `rows` x `cols` outputs: BM x BN (powers of two, BM 16..max_rows, BN 8..64), the
    warp grid (at most 4 x 2 warps of MI m16 x NI n8 tiles) and the padded shared-memory row lengths (8 or 24 mod 32
    floats, so a warp's fragment loads hit 32 banks)."""
    bm, bn = _pow2(rows, 16, max_rows), _pow2(cols, 8, 64)
    wm, wn = min(4, bm // 16), min(2, bn // 8)
    lda = bm + 8
    ldb = bn + (16 if bn == 8 else 8)
    return dict(BM=bm, BN=bn, WARPS_M=wm, WARPS_N=wn, LDA=lda, LDB=ldb, THREADS=32 * wm * wn)


def direct(spec: Spec) -> bool:
    """Direct kernels (float32 FMA per output, input gradient and weight tap) instead of GEMMs: one input channel per
    group (depthwise, or a one-channel input), where the GEMM's reduction would be only the KH*KW taps."""
    return spec.CI // spec.G == 1 and spec.KH * spec.KW <= DIRECT_TAPS_MAX


def tap_table(channels: int, spec: Spec, tile_k: int) -> list[tuple[int, int]]:
    """Taps k = (c, kh, kw) in reduction order as (c, kh*DH << 16 | kw*DW), padded with zeros to a multiple of the
    GEMM tiles' k extent (which also bounds grad_w's j tiles); empty when there are more than TAB_MAX taps."""
    n = channels * spec.KH * spec.KW
    if n > TAB_MAX or (spec.KH - 1) * spec.DH >= 1 << 15 or (spec.KW - 1) * spec.DW >= 1 << 16:
        return []
    rows = [(c, (kh * spec.DH) << 16 | kw * spec.DW) for c in range(channels) for kh in range(spec.KH) for kw in range(spec.KW)]
    return rows + [(0, 0)] * (ceil_div(n, tile_k) * tile_k - n)


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
    tiles = dict(F=gemm_tile(1 << 20, cog), D=gemm_tile(1 << 20, cig), WG=gemm_tile(cog, cig * s.KH * s.KW))
    for key, t in tiles.items():
        ctiles = ceil_div(cog if key == "F" else cig, t["BN"])
        if key != "WG" and s.G * ctiles > 65535:
            raise Unsupported(f"groups={s.G} with {ctiles} channel tiles per group exceeds the grid's 65535 rows")
    return dict(
        CIG=cig, COG=cog, KK=s.KH * s.KW, KTOT=cig * s.KH * s.KW, KDG=cog * s.KH * s.KW, XPLANE=s.H * s.W,
        YPLANE=s.HO * s.WO, BK=BK, STAGES=STAGES, WG_TARGET_CTAS=WG_TARGET_CTAS, WG_MIN_CHUNK=WG_MIN_CHUNK,
        EB_TARGET_BLOCKS=EB_TARGET_BLOCKS, **tiles,
        fwd_lines=list(fwd.lines), fwd_result=fwd.result, bwd_lines=list(bwd.lines), bwd_result=bwd.result,
        needs_z=needs_z, write_gz=bool(s.program.live()), NRED=len(red_terms), red_terms=red_terms,
        red_outputs=red_outputs, TAB_MAX=TAB_MAX, DIRECT=direct(s),
        tap_tables=[dict(name="X", entries=tap_table(cig, s, max(BK, tiles["WG"]["BN"]))),
                    dict(name="Y", entries=tap_table(cog, s, BK))],
        params=[dict(c=f"p{i}", name=p.name, shape=list(p.shape)) for i, p in enumerate(s.params)],
    )


def context(spec: Spec) -> dict:
    return {**{k: v for k, v in vars(spec).items() if k not in ("program", "params")}, **derive(spec)}


def describe(spec: Spec) -> list[str]:
    d = derive(spec)
    f, dg, wg = d["F"], d["D"], d["WG"]
    program = [f"program after the convolution: {spec.program}" if spec.program.nodes else "no program: a lone convolution"]
    if d["DIRECT"]:
        return program + [
            f"one input channel per group ({spec.G} groups of {d['COG']} out channels, {spec.KH}x{spec.KW} taps): direct",
            "kernels with float32 FMAs (a GEMM's reduction would be only the taps), in both TF32 modes as cuDNN's depthwise",
            "kernels: forward one thread per output with the program applied; grad_x one thread per input element;",
            "grad_w per (channel, image range) block sums reduced in a fixed order, then added over ranges in order.",
            f"Training saves z = conv(x) + bias only when the derived backward reads it ({'it does' if d['needs_z'] else 'it does not'} here).",
        ]
    return program + [
        f"forward: implicit GEMM (positions x {d['COG']} out channels x {d['KTOT']}) per group, {f['BM']}x{f['BN']} CTA tiles,",
        "the program applied to the accumulator; 3xTF32 tensor-core math when torch.backends.cudnn.allow_tf32 is off,",
        "one TF32 product per term when it is on (read at each call, as cuDNN). Training saves z = conv(x) + bias only when",
        f"the derived backward reads it ({'it does' if d['needs_z'] else 'it does not'} here).",
        f"backward: dL/dz elementwise with fixed-order per-channel sums (grad_bias, parameter gradients), grad_x as an",
        f"implicit GEMM over (co, kh, kw) ({dg['BM']}x{dg['BN']} tiles), grad_w as a GEMM over (n, oh, ow) split into",
        f"slices ({wg['BM']}x{wg['BN']} tiles) whose partials a second kernel adds in order: bit-identical run to run.",
    ]


# ------------------------------------------------------------------------------------------------ initialization


def _literals(v: float) -> list[float]:
    """Short decimals near v (1 to 9 significant digits), shortest first: the literal a user wrote is among them."""
    out: list[float] = []
    for digits in range(1, 10):
        c = float(f"{v:.{digits}g}")
        if c not in out:
            out.append(c)
    return out


SEEDS = (0, 1)  # Model's initialization is replayed under two seeds: a recipe must reproduce both


def _options(target: torch.Tensor, state: torch.Tensor) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """Candidate recipes for target (drawn from the global generator at `state` under the first seed): a constant
    fill, and torch.randn / torch.rand scaled and shifted by short literals fitted to the first seed's draw. Each is
    (expression text, a function computing exactly that expression from the global generator)."""
    shape = tuple(target.shape)
    flat = target.detach().flatten()
    out: list[tuple[str, Callable[[], torch.Tensor]]] = []
    if flat.numel() and bool((flat == flat[0]).all()):
        v = float(flat[0])
        out.append((f"torch.full({shape!r}, {v!r})", lambda: torch.full(shape, v)))
    for name in ("randn", "rand"):
        base = getattr(torch, name)
        call = f"torch.{name}({shape!r})"
        torch.set_rng_state(state)
        rf = base(shape).flatten()
        out.append((call, lambda base=base: base(shape)))
        if not rf.numel():
            continue
        if rf.numel() >= 2 and float(rf[1] - rf[0]) != 0.0:
            a0 = float(flat[1] - flat[0]) / float(rf[1] - rf[0])
            b0 = float(flat[0]) - a0 * float(rf[0])
        else:  # one element: a scale alone or a shift alone
            a0 = float(flat[0]) / float(rf[0]) if float(rf[0]) != 0.0 else 1.0
            b0 = float(flat[0]) - float(rf[0])
        out += [(f"{call} * {a!r}", lambda base=base, a=a: base(shape) * a) for a in _literals(a0)]
        out += [(f"{call} + {b!r}", lambda base=base, b=b: base(shape) + b) for b in _literals(b0)]
        if rf.numel() >= 2:
            out += [(f"{call} * {a!r} + {b!r}", lambda base=base, a=a, b=b: base(shape) * a + b)
                    for a in _literals(a0) for b in _literals(b0)]
    return out


def _recipe(targets: list[torch.Tensor], states: list[torch.Tensor]) -> tuple[str, list[torch.Tensor]] | None:
    """The first candidate that, run from each seed's generator state, gives that seed's target; with the states
    after it (None when no candidate does)."""
    for expr, draw in _options(targets[0], states[0]):
        after = []
        for target, state in zip(targets, states):
            torch.set_rng_state(state)
            if not torch.equal(draw(), target):
                break
            after.append(torch.get_rng_state())
        else:
            return expr, after
    return None


def _model_tensors(spec: Spec, problem: Problem, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = problem.namespace["Model"](*problem.init_args)
    names = [spec.weight_name] + ([spec.bias_name] if spec.bias_name else []) + [p.name for p in spec.params]
    return {name: attribute(model, name).detach().float() for name in names}


def init_plan(spec: Spec, problem: Problem) -> list[dict] | None:
    """The order of draws that reproduces Model's parameters under any seed: 'conv' (weight, then bias, drawn as
    nn.Conv2d draws them) and one expression per program tensor, found by replaying Model's draws under two seeds
    (None when no order and no recipes match)."""
    numel = spec.CO * spec.CI // spec.G * spec.KH * spec.KW
    if numel > 1 << 24:
        return None
    saved = torch.get_rng_state()
    wants = [_model_tensors(spec, problem, seed) for seed in SEEDS]
    items = ["conv"] + [p.name for p in spec.params]
    found = None
    for order in itertools.permutations(items) if len(items) <= 5 else [tuple(items)]:
        states = []
        for seed in SEEDS:
            torch.manual_seed(seed)
            states.append(torch.get_rng_state())
        plan: list[dict] = []
        for item in order:
            if item == "conv":
                after = []
                for want, state in zip(wants, states):
                    torch.set_rng_state(state)
                    w, b = conv2d_default_init(spec.CO, spec.CI // spec.G, spec.KH, spec.KW, spec.HAS_BIAS)
                    if not torch.equal(w, want[spec.weight_name]) or (b is not None and not torch.equal(b, want[spec.bias_name])):
                        break
                    after.append(torch.get_rng_state())
                else:
                    states = after
                    plan.append(dict(kind="conv"))
                    continue
                break
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
    if plan is None:
        warnings.warn(f"{problem.path.name}: kgen could not reproduce how Model initializes its parameters "
                      f"({spec.weight_name}{''.join(', ' + p.name for p in spec.params)}); ModelNew draws the conv as "
                      "nn.Conv2d does and the other tensors with torch.randn, so load Model's state_dict into it for "
                      "equal parameters", stacklevel=2)
        plan = [dict(kind="conv")] + [dict(kind="tensor", name=p.name, expr=f"torch.randn({p.shape!r})")
                                      for p in spec.params]
    kinds = {p.name: p.kind for p in spec.params}
    for step in plan:
        if step["kind"] == "tensor":
            owner, _, leaf = step["name"].rpartition(".")
            step.update(owner=owner, leaf=leaf, tensor_kind=kinds[step["name"]])
    return {
        "holders": holder_modules([spec.weight_name] + [p.name for p in spec.params]),
        "conv_path": spec.weight_name.rsplit(".", 1)[0],
        "conv_expr": attr_expr(spec.weight_name.rsplit(".", 1)[0]),
        "param_exprs": [attr_expr(p.name) for p in spec.params],
        "init_plan": plan,
        "fan_in": spec.CI // spec.G * spec.KH * spec.KW,
    }


def traffic(spec: Spec, n: int) -> tuple[int, int]:
    """Fewest bytes moved: forward reads x and writes y; a training step also writes z when the backward reads it,
    then reads grad_y, x (and z) and writes grad_x (weights are negligible)."""
    x = 4 * n * spec.CI * spec.H * spec.W
    y = 4 * n * spec.CO * spec.HO * spec.WO
    z = y if derive(spec)["needs_z"] else 0
    return x + y, (x + y + z) + (y + x + z + x)
