"""Family conv2d_avgpool_act_reduce: Conv2d -> AvgPool2d -> activation -> sum/mean over all non-batch dims.

Scope:
- nn.Conv2d: any in/out channels, kernel (int or pair), stride, padding (ints, pairs, 'valid', symmetric 'same'),
  dilation, bias on or off; groups = 1 and padding_mode 'zeros' (others are refused at generate time);
- then nn.AvgPool2d / F.avg_pool2d: any kernel and stride, padding 0, divisor_override allowed; ceil_mode only
  where it does not change the output size;
- then an optional activation: sigmoid, tanh, relu, gelu (exact or approximate='tanh');
- then torch.sum / torch.mean (function or method) over dims [1, 2, 3] (any order or sign), keepdim either way.
A chain that matches only partly is refused naming the first op that breaks the pattern.

Conv then average pool is one linear map, so the kernels pool first (a box sum of the input at each conv tap) and
run the remaining skinny GEMM (positions x out_channels x in_channels*KH*KW) on tensor cores: 3xTF32 (float32
accuracy) when torch.backends.cudnn.allow_tf32 is off, one TF32 pass on the rounded operands when it is allowed (as
cuDNN; PyTorch's default), read at each call. Every kernel is a template on that choice; both are built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kgen import cudnn_tf32
from kgen.errors import Unsupported
from kgen.family import (REPLAY_LOCK, attr_expr, conv2d_default_init, holder_modules, registered_tensors,
                         template_context)
from kgen.problem import Problem
from kgen.geometry import ceil_div, conv_out_size, pool_out_size
from kgen.ops import Op

NAME = "conv2d_avgpool_act_reduce"
TEMPLATES = {"kernel.cu": "conv2d_avgpool_act_reduce/kernel.cu.j2", "binding.cpp": "conv2d_avgpool_act_reduce/binding.cpp.j2"}
MODEL_TEMPLATE = "conv2d_avgpool_act_reduce/model_new.py.j2"
ACTIVATIONS = ("sigmoid", "tanh", "relu", "gelu")
# Spec.ACT -> its struct in templates/common/activation.cuh (forward and derivative): one row per activation
ACT_TYPES = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "gelu": "Gelu", "gelu_tanh": "GeluTanh",
             "none": "Identity"}
SMEM_LIMIT = 227 * 1024


@dataclass(frozen=True)
class Spec:
    CI: int
    H: int
    W: int
    CO: int
    KH: int
    KW: int
    SH: int
    SW: int
    PH: int
    PW: int
    DH: int
    DW: int
    PKH: int
    PKW: int
    PSH: int
    PSW: int
    DIV: int  # pool divisor: divisor_override or PKH*PKW
    ACT: str  # sigmoid | tanh | relu | gelu | gelu_tanh | none
    REDUCE: str  # sum | mean
    KEEPDIM: bool
    HAS_BIAS: bool
    weight_name: str  # state_dict names of the conv parameters, as in Model
    bias_name: str | None


def _breaks(op: Op, expected: str) -> Unsupported:
    return Unsupported(f"{op.where}: {op.label} breaks the {NAME} family's pattern (expected {expected} here)")


def match(ops: list[Op] | None, problem: Problem) -> Spec | None:
    """The spec when the problem is Conv2d -> AvgPool2d -> activation -> sum/mean in the form this family's fused
    kernels compute; None otherwise, also for the Conv2d -> AvgPool2d blocks outside that form (conv2d_epilogue,
    matched after this family, takes those or names what it cannot take)."""
    try:
        spec = _match(ops, problem)
        if spec is not None:
            derive(spec)  # the tiling fits
    except Unsupported:
        return None
    if spec is not None and not reference_init_matches(spec, problem):
        return None  # Model changes the conv's own draws: conv2d_epilogue replays that (init_plan)
    return spec


def _match(ops: list[Op] | None, problem: Problem) -> Spec | None:
    if not ops or ops[0].kind != "conv2d" or len(ops) < 2 or ops[1].kind != "pool" \
            or (ops[1].params["op"], ops[1].params["nd"]) != ("avg", 2):
        return None  # not Conv2d -> AvgPool2d: conv2d_epilogue's to take or refuse
    conv = ops[0]
    c = conv.params
    if c["padding_end"] != c["padding"]:
        raise Unsupported(f"{conv.where}: padding='same' pads {c['padding']} before and {c['padding_end']} after; the "
                          f"{NAME} family supports symmetric padding")
    if c["groups"] != 1:
        raise Unsupported(f"{conv.where}: nn.Conv2d with groups={c['groups']}: the {NAME} family supports groups=1 only")
    if c["padding_mode"] != "zeros":
        raise Unsupported(f"{conv.where}: nn.Conv2d with padding_mode={c['padding_mode']!r}: only 'zeros' is supported")
    if len(conv.in_shape) != 4:
        raise Unsupported(f"{conv.where}: Conv2d on a {len(conv.in_shape)}-d input; the {NAME} family takes NCHW input")
    if conv.dtype != torch.float32:
        raise Unsupported(f"{conv.where}: the {NAME} family takes float32 input, got {conv.dtype}")
    pool = ops[1]
    p = pool.params
    _, _, HO, WO = conv.shape
    if p["padding"] != (0, 0):
        raise Unsupported(f"{pool.where}: AvgPool2d padding={p['padding']}: the {NAME} family supports padding 0")
    plain = [pool_out_size(s, k, st, 0, False) for s, k, st in zip((HO, WO), p["kernel"], p["stride"])]
    if p["ceil_mode"] and plain != [pool_out_size(s, k, st, 0, True) for s, k, st in zip((HO, WO), p["kernel"], p["stride"])]:
        raise Unsupported(f"{pool.where}: AvgPool2d ceil_mode=True adds partial windows here; the {NAME} family supports full windows only")
    rest = ops[2:]
    act = "none"
    if rest and rest[0].kind in ACTIVATIONS:
        act = rest[0].kind
        if act == "gelu":
            approx = rest[0].params.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise Unsupported(f"{rest[0].where}: gelu approximate={approx!r} is not supported")
            act = "gelu_tanh" if approx == "tanh" else "gelu"
        rest = rest[1:]
    if not rest or rest[0].kind not in ("sum", "mean"):
        expected = "an activation (sigmoid, tanh, relu, gelu) or torch.sum/torch.mean over dims [1, 2, 3]"
        if not rest:
            raise Unsupported(f"{ops[-1].where}: the chain ends before a sum/mean over dims [1, 2, 3] ({NAME} reduces to one value per batch element)")
        raise _breaks(rest[0], expected)
    red = rest[0]
    if red.params["dims"] != (1, 2, 3) or red.params.get("dtype") is not None:
        raise Unsupported(f"{red.where}: {red.label} over dims {list(red.params['dims'])}: the {NAME} family reduces over dims [1, 2, 3] only")
    if len(rest) > 1:
        raise _breaks(rest[1], "the end of forward after the reduction")
    spec = Spec(
        CI=c["in_channels"], H=conv.in_shape[2], W=conv.in_shape[3], CO=c["out_channels"],
        KH=c["kernel"][0], KW=c["kernel"][1], SH=c["stride"][0], SW=c["stride"][1], PH=c["padding"][0], PW=c["padding"][1],
        DH=c["dilation"][0], DW=c["dilation"][1], PKH=p["kernel"][0], PKW=p["kernel"][1], PSH=p["stride"][0], PSW=p["stride"][1],
        DIV=p["divisor_override"] or p["kernel"][0] * p["kernel"][1], ACT=act, REDUCE=red.kind,
        KEEPDIM=red.params["keepdim"], HAS_BIAS=c["bias"], weight_name=c["weight_name"], bias_name=c["bias_name"],
    )
    d = derive(spec)
    if (d["PHO"], d["PWO"]) != tuple(pool.shape[2:]):
        raise AssertionError(f"kgen's pooled size {(d['PHO'], d['PWO'])} disagrees with PyTorch's {tuple(pool.shape[2:])}")
    return spec


# ------------------------------------------------------------------------------------------------------ tiling


def _r(a: int, b: int) -> int:
    """a rounded up to a multiple of b."""
    return ceil_div(a, b) * b


# Shared-memory budgets per block of each kernel path (built with -DKGEN_SM90=1 or 0; the template static_asserts
# the per-block maximum). Tile budgets (positions) are tried in order, within the largest K chunk that fits.
# SM90: 227 KB per block, 228 KB per SM, two blocks per SM at <= 113 KB each.
# SM80 (sm_80/86/89): sm_86/89 allow 99 KB per block; sm_80 has 164 KB per SM, so <= 81 KB keeps two forward blocks
# per SM there; 128-position tiles (8 m-tiles, one per warp) where they fit, smaller ones for wide CO; W staged
# unsplit (half the smem of the fragments).
PATHS = {
    "SM90": dict(fwd_budgets=(240,), bwd_budgets=(160, 256, 512, 1024, 4096), wfrag=1,
                 f_cap=200 * 1024, b_cap=200 * 1024, limit=SMEM_LIMIT),
    "SM80": dict(fwd_budgets=(128, 96, 64, 32, 16), bwd_budgets=(128, 96, 64, 48, 32, 16, 256, 512, 1024, 4096), wfrag=0,
                 f_cap=81 * 1024, b_cap=99 * 1024, limit=99 * 1024),
}
# Loop unrolls of the backward (box sums, grad_w position steps, GEMM3 k steps, cell gather): measured best on H200.
UNROLLS = dict(BSU=1, DWU=2, G3U=1, GU=1)


def smem_bytes(kk: int, co_all: int, wfrag: int, ci_chunk: int, f_mpad: int, b_mpad: int) -> tuple[int, int]:
    """The template's F_SMEM and B_SMEM: shared memory of the forward (W as pre-split fragments where wfrag, else plain;
    the box sums of f_mpad positions) and of the backward (b_mpad positions) at ci_chunk input channels a K chunk."""
    kc8 = _r(ci_chunk * kk, 8)
    kp = kc8 if kc8 % 16 == 8 else kc8 + 8  # row strides 8 mod 16 (the swizzled layout of gemm.cuh)
    fw = ((kc8 * co_all * 2 if wfrag else co_all * kp) + f_mpad * kp + 32 + co_all) * 4
    bw = (co_all * kp + b_mpad * kp + b_mpad * (co_all + 8) + b_mpad + co_all) * 4
    return fw, bw


def derive(spec: Spec) -> dict:
    """Everything the kernel template needs besides the problem constants: one tiling per kernel path
    (TILE_SM90, TILE_SM80), the loop unrolls, the output sizes, the activation's struct (ACT_TYPE) and whether the
    reduction is a mean (MEAN)."""
    s = spec
    HO = conv_out_size(s.H, s.KH, s.SH, s.PH, s.DH)
    WO = conv_out_size(s.W, s.KW, s.SW, s.PW, s.DW)
    if HO < s.PKH or WO < s.PKW:
        raise Unsupported(f"the pool window {s.PKH}x{s.PKW} is larger than the conv output {HO}x{WO}")
    PHO = (HO - s.PKH) // s.PSH + 1
    PWO = (WO - s.PKW) // s.PSW + 1
    PR = (s.PKH - 1) * s.SH + (s.KH - 1) * s.DH + 1
    PC = (s.PKW - 1) * s.SW + (s.KW - 1) * s.DW + 1
    S_H, S_W = s.PSH * s.SH, s.PSW * s.SW
    KK = s.KH * s.KW
    CO16 = _r(s.CO, 16)
    COCH = min(CO16, 64)
    CO_ALL = _r(CO16, COCH)

    def best_tile(budget: int, halo: bool):
        best = None
        for tpw in range(1, min(PWO, 64) + 1):
            for tph in range(1, min(PHO, 64) + 1):
                th, tw = ceil_div(PHO, tph), ceil_div(PWO, tpw)
                hh = 0 if (not halo or th == 1) else (PR - 1) // S_H
                hw = 0 if (not halo or tw == 1) else (PC - 1) // S_W
                m = (tph + hh) * (tpw + hw)
                if m > budget:
                    continue
                cost = th * tw * (_r(m, 16) + 48)  # + per-tile overhead
                key = (cost, -tph * tpw, tph)
                if best is None or key < best[0]:
                    best = (key, tph, tpw, _r(m, 16))
        return best

    def plan(fwd_budgets: tuple, bwd_budgets: tuple, wfrag: int, f_cap: int, b_cap: int, limit: int) -> dict:
        fwd = [t for t in (best_tile(fb, False) for fb in fwd_budgets) if t is not None]
        bwd = [t for t in (best_tile(bb, True) for bb in bwd_budgets) if t is not None]
        if not bwd:
            raise Unsupported(f"pool/conv windows ({PR}x{PC} input pixels per pooled output) are too large for the backward tiling")

        def smem(ci_chunk: int, f_mpad: int, b_mpad: int) -> tuple[int, int]:
            return smem_bytes(KK, CO_ALL, wfrag, ci_chunk, f_mpad, b_mpad)

        def fitting(ci_chunk: int):  # the first (preferred) forward and backward tiles that fit at this K chunk
            f = next((t for t in fwd if smem(ci_chunk, t[3], 0)[0] <= f_cap), None)
            b = next((t for t in bwd if smem(ci_chunk, 0, t[3])[1] <= b_cap), None)
            return (f, b) if f is not None and b is not None else None

        kmax = max(72, _r(KK, 8))
        ci_chunk, (f, b) = next(((c, fb) for c in range(s.CI, 0, -1) if _r(c * KK, 8) <= kmax
                                 for fb in [fitting(c)] if fb is not None), (1, (fwd[0], bwd[0])))
        fw, bw = smem(ci_chunk, f[3], b[3])
        return dict(TPH=f[1], TPW=f[2], TPH_B=b[1], TPW_B=b[2], CI_CHUNK=ci_chunk, FWD_WFRAG=wfrag,
                    F_SMEM=fw, B_SMEM=bw, FITS=max(fw, bw) <= limit)

    tiles = {path: plan(**p) for path, p in PATHS.items()}
    # A module has to run on every GPU from sm_80: where a path's tiling does not fit (the sm_80/86/89 path's backward
    # within the 99 KB a block of sm_86/89 may have), this family declines and conv2d_epilogue, matched after it,
    # takes the problem (its kernels fit every architecture)
    for path, where in (("SM90", "sm_90"), ("SM80", "sm_80/86/89")):
        if not tiles[path]["FITS"]:
            raise Unsupported(f"out_channels={s.CO} with a {s.KH}x{s.KW} kernel and a {s.PKH}x{s.PKW} pool window: the "
                              f"{where} path's shared-memory tiling does not fit ({NAME} takes a Conv2d -> AvgPool2d "
                              "block only where both paths fit)")
    return dict(TILE_SM90=tiles["SM90"], TILE_SM80=tiles["SM80"], **UNROLLS, HO=HO, WO=WO, PHO=PHO, PWO=PWO,
                ACT_TYPE=ACT_TYPES[s.ACT], MEAN=s.REDUCE == "mean",
                TF32_RULES=cudnn_tf32.rules(dict(CI=s.CI, CO=s.CO, G=1, KH=s.KH, KW=s.KW, SH=s.SH, SW=s.SW, PH=s.PH,
                                                 PW=s.PW, DH=s.DH, DW=s.DW, H=s.H, W=s.W, HO=HO, WO=WO)))


def context(spec: Spec) -> dict:
    return template_context(vars(spec), derive(spec))


def describe(spec: Spec) -> list[str]:
    d = derive(spec)
    t9, t8 = d["TILE_SM90"], d["TILE_SM80"]
    return [
        "Conv2d then AvgPool2d is one linear map: each pooled pre-activation is bias*PKH*PKW/DIV + (1/DIV) * W . Bs, where",
        f"Bs is the {spec.PKH}x{spec.PKW} box sum of the input at each conv tap. forward: each block forms Bs for a",
        f"{t9['TPH']}x{t9['TPW']} tile of pooled positions (sm_80/86/89: {t8['TPH']}x{t8['TPW']}) in shared memory straight from x,",
        f"runs the positions x {spec.CO} x {spec.CI * spec.KH * spec.KW} GEMM on tensor cores (3xTF32, float32 accuracy, when",
        "torch.backends.cudnn.allow_tf32 is off; one TF32 product per term, of the rounded operands, when it is allowed; read at each",
        f"call), applies {spec.ACT} and reduces; the blocks of one sample add their partial sums in a fixed order (sm_90: one launch,",
        "a thread-block cluster through distributed shared memory; sm_80/86/89: a second small kernel), so the result",
        "is bit-identical from run to run, with no atomics. backward: recomputes the pre-activations per tile (nothing",
        "of size batch x channels x H' x W' is stored), gathers grad_x through the pool box and conv taps, and reduces",
        "grad_weight / grad_bias from per-block partials in a fixed order in a second small kernel.",
    ]


def reference_init_matches(spec: Spec, problem: Problem) -> bool:
    """Does Model(*init) under a seed hold only the conv's tensors, drawn as nn.Conv2d's default init draws them?
    (match leaves the problem to conv2d_epilogue where it does not: that family replays changes to the conv's draws
    and holds a model's unused tensors too.)"""
    with torch.device("meta"):
        model = problem.namespace["Model"](*problem.init_args)
    if registered_tensors(model) != [n for n in (spec.weight_name, spec.bias_name) if n]:
        return False  # other tensors too (an unused module): conv2d_epilogue's ModelNew holds them as well
    if spec.CO * spec.CI * spec.KH * spec.KW > 1 << 24:
        return True  # too large to check cheaply on the CPU; ModelNew mirrors nn.Conv2d's default init
    with REPLAY_LOCK:
        saved = torch.get_rng_state()
        torch.manual_seed(0)
        state = problem.namespace["Model"](*problem.init_args).state_dict()
        torch.manual_seed(0)
        w, b = conv2d_default_init(spec.CO, spec.CI, spec.KH, spec.KW, spec.HAS_BIAS)
        torch.set_rng_state(saved)
    return torch.equal(state[spec.weight_name], w) and (b is None or torch.equal(state[spec.bias_name], b))


def module_context(spec: Spec, problem: Problem) -> dict:
    module_path = spec.weight_name.rsplit(".", 1)[0]
    return {
        "holders": holder_modules([spec.weight_name]),
        "conv_expr": attr_expr(module_path),
        "fan_in": spec.CI * spec.KH * spec.KW,
    }


def traffic(spec: Spec, n: int) -> tuple[int, int]:
    """Fewest bytes moved: forward reads x once; forward+backward reads x twice and writes grad_x."""
    x = 4 * n * spec.CI * spec.H * spec.W
    return x, 3 * x
