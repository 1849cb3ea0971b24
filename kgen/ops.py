"""The traced graph as normalized ops: module, function and method forms of one op become one ``Op`` kind with
PyTorch's argument defaults applied. Families match on these ops (``kgen.spec`` runs the matching).

Tables, not branches: each supported PyTorch callable is one row naming its kind, its argument names and defaults.
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from kgen.errors import Unsupported
from kgen.geometry import conv_same_padding
from kgen.pointwise import ROWS, Node, Program, Ref, node as pw_node
from kgen.problem import Problem, is_tensor, reads_attr, where


@dataclass(frozen=True)
class Op:
    """One normalized op of the traced chain."""

    kind: str  # conv2d | pool | a pointwise row of kgen.pointwise (relu, add, ...) or gelu | a reduction (sum, mean, amax,
    #            amin, logsumexp, max_dim / min_dim (values and indices), max_all / min_all (torch.max(x))) | view
    #            (squeeze, unsqueeze, flatten, view, reshape, nn.Flatten) | getitem | getattr | other
    params: dict[str, Any]  # a pointwise op: the row's parameters; a binary one: operands "a" and "b" too
    shape: tuple[int, ...]  # output shape (the first output's, for ops returning a tuple)
    in_shape: tuple[int, ...]
    where: str  # "file:line: source" or the fx node's name
    label: str  # what the user wrote, e.g. "nn.Conv2d (self.conv)" or "torch.sigmoid"
    module_path: str | None = None  # qualified name of the nn.Module for call_module ops
    dtype: torch.dtype | None = None  # output dtype (the first output's)
    inplace: bool = False  # a pointwise op written in place (x.relu_(), nn.ReLU(inplace=True), x += 1)


def ntuple(v: Any, n: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of n ints (or of one int) as an n-tuple, as PyTorch's _ntuple reads pooling args."""
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * n
    if isinstance(v, (tuple, list)) and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        if len(v) == n:
            return tuple(int(i) for i in v)
        if len(v) == 1:
            return (int(v[0]),) * n
    raise Unsupported(f"{what}={v!r} is not an int or a tuple of {n} ints")


def pair(v: Any, what: str) -> tuple[int, int]:
    a, b = ntuple(v, 2, what)
    return a, b


# ----------------------------------------------------------------------------------------------- tables

_REDUCE_FUNCS = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.logsumexp: "logsumexp"}
_REDUCE_METHODS = frozenset({"sum", "mean", "amax", "amin", "logsumexp"})
_EXTREMA = {torch.max: "max", torch.min: "min", "max": "max", "min": "min"}  # max(x) / max(x, dim) / x.max(dim)
_VIEW_FUNCS = frozenset({torch.squeeze, torch.unsqueeze, torch.flatten, torch.reshape})
_VIEW_METHODS = frozenset({"squeeze", "unsqueeze", "flatten", "view", "reshape"})


@dataclass(frozen=True)
class PointwiseForm:
    """One way of writing a pointwise op: its kind (a row of kgen.pointwise; "gelu" keeps its ``approximate``
    parameter, and "clamp" becomes clamp_min / clamp_max when a bound is None), the names and defaults of the
    arguments after the operand(s) in PyTorch's order, and whether it is binary, swaps its operands
    (``torch.rsub``) or writes in place."""

    kind: str
    names: tuple[str, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)
    binary: bool = False
    swap: bool = False
    inplace: bool = False


def _pw(kind: str, *names: str, inplace: bool = False, **defaults: Any) -> PointwiseForm:
    return PointwiseForm(kind, names, defaults, inplace=inplace)


def _pw2(kind: str, *names: str, swap: bool = False, inplace: bool = False, **defaults: Any) -> PointwiseForm:
    return PointwiseForm(kind, names, defaults, binary=True, swap=swap, inplace=inplace)


_ADD = _pw2("add", "alpha", alpha=1)
_SUB = _pw2("sub", "alpha", alpha=1)
_DIV = _pw2("div", "rounding_mode", rounding_mode=None)
_CLAMP = _pw("clamp", "min", "max", min=None, max=None)

POINTWISE_FUNCS: dict[Callable, PointwiseForm] = {
    F.relu: _pw("relu", "inplace", inplace=False), torch.relu: _pw("relu"), torch.relu_: _pw("relu", inplace=True),
    F.relu6: _pw("relu6", "inplace", inplace=False),
    F.leaky_relu: _pw("leaky_relu", "negative_slope", "inplace", negative_slope=0.01, inplace=False),
    F.elu: _pw("elu", "alpha", "inplace", alpha=1.0, inplace=False),
    F.selu: _pw("selu", "inplace", inplace=False), torch.selu: _pw("selu"), torch.selu_: _pw("selu", inplace=True),
    F.celu: _pw("celu", "alpha", "inplace", alpha=1.0, inplace=False), torch.celu: _pw("celu", "alpha", alpha=1.0),
    torch.celu_: _pw("celu", "alpha", alpha=1.0, inplace=True),
    F.gelu: _pw("gelu", "approximate", approximate="none"),
    F.silu: _pw("silu", "inplace", inplace=False), F.mish: _pw("mish", "inplace", inplace=False),
    F.softplus: _pw("softplus", "beta", "threshold", beta=1.0, threshold=20.0),
    torch.sigmoid: _pw("sigmoid"), F.sigmoid: _pw("sigmoid"), torch.special.expit: _pw("sigmoid"),
    torch.sigmoid_: _pw("sigmoid", inplace=True),
    torch.tanh: _pw("tanh"), F.tanh: _pw("tanh"), torch.tanh_: _pw("tanh", inplace=True),
    F.hardtanh: _pw("hardtanh", "min_val", "max_val", "inplace", min_val=-1.0, max_val=1.0, inplace=False),
    F.hardswish: _pw("hardswish", "inplace", inplace=False), F.hardsigmoid: _pw("hardsigmoid", "inplace", inplace=False),
    F.softsign: _pw("softsign"),
    torch.abs: _pw("abs"), torch.absolute: _pw("abs"), torch.abs_: _pw("abs", inplace=True),
    torch.exp: _pw("exp"), torch.exp_: _pw("exp", inplace=True),
    torch.neg: _pw("neg"), torch.negative: _pw("neg"), operator.neg: _pw("neg"),
    torch.clamp: _CLAMP, torch.clip: _CLAMP, torch.clamp_: PointwiseForm("clamp", _CLAMP.names, _CLAMP.defaults, inplace=True),
    torch.clamp_min: _pw("clamp_min", "min"), torch.clamp_max: _pw("clamp_max", "max"),
    operator.add: _pw2("add"), operator.sub: _pw2("sub"), operator.mul: _pw2("mul"), operator.truediv: _pw2("div"),
    operator.iadd: _pw2("add", inplace=True), operator.isub: _pw2("sub", inplace=True),
    operator.imul: _pw2("mul", inplace=True), operator.itruediv: _pw2("div", inplace=True),
    torch.add: _ADD, torch.sub: _SUB, torch.subtract: _SUB, torch.rsub: _pw2("sub", "alpha", swap=True, alpha=1),
    torch.mul: _pw2("mul"), torch.multiply: _pw2("mul"), torch.div: _DIV, torch.divide: _DIV,
    torch.true_divide: _pw2("div"),
    torch.maximum: _pw2("maximum"), torch.minimum: _pw2("minimum"),
    torch.max: _pw2("maximum"), torch.min: _pw2("minimum"),  # only with a tensor second operand (else a reduction)
    torch.pow: _pw("pow", "exponent"), operator.pow: _pw("pow", "exponent"),  # a constant exponent
    F.logsigmoid: _pw("logsigmoid"), F.tanhshrink: _pw("tanhshrink"),
    F.softshrink: _pw("softshrink", "lambd", lambd=0.5), F.hardshrink: _pw("hardshrink", "lambd", lambd=0.5),
    F.threshold: _pw("threshold", "threshold", "value", "inplace", inplace=False),
    F.threshold_: _pw("threshold", "threshold", "value", inplace=True),
    torch.threshold: _pw("threshold", "threshold", "value"), torch.threshold_: _pw("threshold", "threshold", "value", inplace=True),
}
for _name in ("square", "sqrt", "rsqrt", "reciprocal", "log", "log1p", "expm1", "erf"):
    POINTWISE_FUNCS[getattr(torch, _name)] = _pw(_name)
    POINTWISE_FUNCS[getattr(torch, _name + "_")] = _pw(_name, inplace=True)
POINTWISE_FUNCS[torch.special.erf] = _pw("erf")
POINTWISE_FUNCS[torch.special.expm1] = _pw("expm1")
POINTWISE_FUNCS[torch.special.log1p] = _pw("log1p")

POINTWISE_METHODS: dict[str, PointwiseForm] = {
    "relu": _pw("relu"), "relu_": _pw("relu", inplace=True), "sigmoid": _pw("sigmoid"),
    "sigmoid_": _pw("sigmoid", inplace=True), "tanh": _pw("tanh"), "tanh_": _pw("tanh", inplace=True),
    "exp": _pw("exp"), "exp_": _pw("exp", inplace=True), "abs": _pw("abs"), "absolute": _pw("abs"),
    "abs_": _pw("abs", inplace=True), "neg": _pw("neg"), "negative": _pw("neg"), "neg_": _pw("neg", inplace=True),
    "clamp": _CLAMP, "clip": _CLAMP, "clamp_": PointwiseForm("clamp", _CLAMP.names, _CLAMP.defaults, inplace=True),
    "clip_": PointwiseForm("clamp", _CLAMP.names, _CLAMP.defaults, inplace=True),
    "clamp_min": _pw("clamp_min", "min"), "clamp_min_": _pw("clamp_min", "min", inplace=True),
    "clamp_max": _pw("clamp_max", "max"), "clamp_max_": _pw("clamp_max", "max", inplace=True),
    "add": _ADD, "add_": _pw2("add", "alpha", inplace=True, alpha=1), "sub": _SUB, "subtract": _SUB,
    "sub_": _pw2("sub", "alpha", inplace=True, alpha=1), "mul": _pw2("mul"), "multiply": _pw2("mul"),
    "mul_": _pw2("mul", inplace=True), "div": _DIV, "divide": _DIV, "true_divide": _pw2("div"),
    "div_": _pw2("div", "rounding_mode", inplace=True, rounding_mode=None),
    "maximum": _pw2("maximum"), "minimum": _pw2("minimum"), "max": _pw2("maximum"), "min": _pw2("minimum"),
    "pow": _pw("pow", "exponent"), "pow_": _pw("pow", "exponent", inplace=True),
}
for _name in ("square", "sqrt", "rsqrt", "reciprocal", "log", "log1p", "expm1", "erf"):
    POINTWISE_METHODS[_name] = _pw(_name)
    POINTWISE_METHODS[_name + "_"] = _pw(_name, inplace=True)

# module type -> (kind, the module attributes holding its parameters in the form's order)
POINTWISE_MODULES: dict[type, tuple[str, tuple[str, ...]]] = {
    nn.ReLU: ("relu", ()), nn.ReLU6: ("relu6", ()), nn.LeakyReLU: ("leaky_relu", ("negative_slope",)),
    nn.ELU: ("elu", ("alpha",)), nn.SELU: ("selu", ()), nn.CELU: ("celu", ("alpha",)), nn.GELU: ("gelu", ("approximate",)),
    nn.SiLU: ("silu", ()), nn.Mish: ("mish", ()), nn.Softplus: ("softplus", ("beta", "threshold")),
    nn.Sigmoid: ("sigmoid", ()), nn.Tanh: ("tanh", ()), nn.Hardtanh: ("hardtanh", ("min_val", "max_val")),
    nn.Hardswish: ("hardswish", ()), nn.Hardsigmoid: ("hardsigmoid", ()), nn.Softsign: ("softsign", ()),
    nn.LogSigmoid: ("logsigmoid", ()), nn.Tanhshrink: ("tanhshrink", ()), nn.Softshrink: ("softshrink", ("lambd",)),
    nn.Hardshrink: ("hardshrink", ("lambd",)), nn.Threshold: ("threshold", ("threshold", "value")),
}

_OPERATOR_SYMBOLS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.neg: "unary -",
                     operator.iadd: "+=", operator.isub: "-=", operator.imul: "*=", operator.itruediv: "/="}
POINTWISE_KINDS = frozenset(ROWS) | {"gelu"}


@dataclass(frozen=True)
class PoolForm:
    """One way of writing a pooling op: which op, its rank, its argument names and defaults, and whether the call
    itself returns (values, indices)."""

    op: str  # avg | max | adaptive_avg | adaptive_max
    nd: int
    names: tuple[str, ...]
    defaults: dict[str, Any]
    returns_tuple: bool = False


def _avg_form(nd: int) -> PoolForm:
    names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad") + (("divisor_override",) if nd > 1 else ())
    return PoolForm("avg", nd, names, {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True,
                                       "divisor_override": None})


def _max_form(nd: int, returns_tuple: bool = False, builtin: bool = False) -> PoolForm:
    names = ("kernel_size", "stride", "padding", "dilation", "ceil_mode") + (() if builtin else ("return_indices",))
    return PoolForm("max", nd, names, {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False,
                                       "return_indices": returns_tuple}, returns_tuple)


def _adaptive_form(op: str, nd: int, returns_tuple: bool = False) -> PoolForm:
    names = ("output_size",) + (("return_indices",) if op == "adaptive_max" else ())
    return PoolForm(op, nd, names, {"return_indices": returns_tuple}, returns_tuple)


POOL_FUNCS: dict[Callable, PoolForm] = {}
for _nd in (1, 2, 3):
    POOL_FUNCS[getattr(F, f"avg_pool{_nd}d")] = _avg_form(_nd)
    POOL_FUNCS[getattr(F, f"max_pool{_nd}d")] = _max_form(_nd)  # boolean dispatch: return_indices picks the result
    POOL_FUNCS[getattr(F, f"max_pool{_nd}d_with_indices")] = _max_form(_nd, returns_tuple=True)
    POOL_FUNCS[getattr(torch, f"max_pool{_nd}d")] = _max_form(_nd, builtin=True)
    POOL_FUNCS[getattr(F, f"adaptive_avg_pool{_nd}d")] = _adaptive_form("adaptive_avg", _nd)
    POOL_FUNCS[getattr(F, f"adaptive_max_pool{_nd}d")] = _adaptive_form("adaptive_max", _nd)
    POOL_FUNCS[getattr(F, f"adaptive_max_pool{_nd}d_with_indices")] = _adaptive_form("adaptive_max", _nd, returns_tuple=True)
POOL_FUNCS[torch.adaptive_avg_pool1d] = _adaptive_form("adaptive_avg", 1)
POOL_FUNCS[torch.adaptive_max_pool1d] = _adaptive_form("adaptive_max", 1, returns_tuple=True)
POOL_FUNCS[torch.max_pool1d_with_indices] = _max_form(1, returns_tuple=True, builtin=True)

POOL_MODULES: dict[type, tuple[str, int]] = {}
for _nd in (1, 2, 3):
    POOL_MODULES[getattr(nn, f"AvgPool{_nd}d")] = ("avg", _nd)
    POOL_MODULES[getattr(nn, f"MaxPool{_nd}d")] = ("max", _nd)
    POOL_MODULES[getattr(nn, f"AdaptiveAvgPool{_nd}d")] = ("adaptive_avg", _nd)
    POOL_MODULES[getattr(nn, f"AdaptiveMaxPool{_nd}d")] = ("adaptive_max", _nd)


def pool_params(op: str, nd: int, p: dict[str, Any], in_shape: tuple[int, ...], what: str) -> dict[str, Any]:
    """Every pooling form's arguments as one dict: kernel/stride/padding/dilation as nd-tuples, output_size with
    None entries resolved from the input, and neutral values for arguments an op does not have."""
    spatial = tuple(in_shape[-nd:]) if len(in_shape) >= nd else ()
    out: dict[str, Any] = {"op": op, "nd": nd, "kernel": (), "stride": (), "padding": (), "dilation": (1,) * nd,
                           "ceil_mode": False, "count_include_pad": True, "divisor_override": None, "output_size": (),
                           "return_indices": bool(p.get("return_indices", False))}
    if op in ("avg", "max"):
        k = ntuple(p["kernel_size"], nd, f"{what} kernel_size")
        stride = p.get("stride")
        out["kernel"] = k
        out["stride"] = k if stride is None or stride == [] or stride == () else ntuple(stride, nd, f"{what} stride")
        out["padding"] = ntuple(p.get("padding", 0), nd, f"{what} padding")
        out["ceil_mode"] = bool(p.get("ceil_mode", False))
        if op == "avg":
            out["count_include_pad"] = bool(p.get("count_include_pad", True))
            out["divisor_override"] = p.get("divisor_override")
        else:
            out["dilation"] = ntuple(p.get("dilation", 1), nd, f"{what} dilation")
    else:
        size = p["output_size"]
        entries = [size] * nd if size is None or isinstance(size, int) else list(size)
        if len(entries) == 1 and nd > 1:
            entries = entries * nd
        if len(entries) != nd or not all(e is None or (isinstance(e, int) and not isinstance(e, bool)) for e in entries):
            raise Unsupported(f"{what} output_size={size!r} is not an int or a tuple of {nd} ints/None")
        if not spatial:
            raise Unsupported(f"{what} on a {len(in_shape)}-d input")
        out["output_size"] = tuple(spatial[i] if e is None else int(e) for i, e in enumerate(entries))
    return out


# ----------------------------------------------------------------------------------------------- normalization


def _bind(args: tuple, kwargs: dict, names: tuple[str, ...] | list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for n, a in zip(names, args):
        out[n] = a
    out.update(kwargs)
    return out


def _const(v: Any, node: fx.Node, what: str) -> Any:
    if isinstance(v, fx.Node):
        raise Unsupported(f"{where(node)}: {what} is computed at run time; kgen needs it to be a constant")
    return v


def _conv_padding(padding: Any, kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(padding before, padding after) per spatial dim: equal except for 'same' with an even reach, which PyTorch
    pads one more after."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        (t, b), (l, r) = (conv_same_padding(k, d) for k, d in zip(kernel, dilation))
        return (t, l), (b, r)
    p = pair(padding, "padding")
    return p, p


def _reduce_params(p: dict[str, Any], rank: int) -> dict[str, Any]:
    dim = p.get("dim")
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):  # PyTorch: no dims (None, [] or ()) is every dim
        dims = tuple(range(rank))
    else:
        dims = tuple(sorted({d % rank for d in ([dim] if isinstance(dim, int) else dim)}))
    return {"dims": dims, "keepdim": bool(p.get("keepdim", False)), "dtype": p.get("dtype")}


def _meta(node: Any) -> tuple[tuple[int, ...], torch.dtype | None]:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    if isinstance(meta, (tuple, list)) and not hasattr(meta, "shape"):  # an op returning a tuple: its first output
        meta = meta[0] if meta else None
    if meta is None or not hasattr(meta, "shape"):
        return (), None
    return tuple(meta.shape), meta.dtype


def _label(node: fx.Node, gm: fx.GraphModule) -> str:
    """What the user wrote, for messages: "nn.ReLU (self.act)", "F.relu", "torch.clamp", "Tensor.clamp", "operator +"."""
    if node.op == "call_module":
        return f"nn.{type(gm.get_submodule(node.target)).__name__} (self.{node.target})"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op != "call_function":
        return f"{node.op} {node.target}"
    fn = node.target
    if fn in _OPERATOR_SYMBOLS:
        return f"operator {_OPERATOR_SYMBOLS[fn]}"
    name = getattr(fn, "__name__", str(fn))
    if name == "fn" and fn in POOL_FUNCS:  # boolean_dispatch wrappers all carry the name 'fn'
        name = f"{POOL_FUNCS[fn].op.replace('avg', 'avg_pool').replace('max', 'max_pool')}{POOL_FUNCS[fn].nd}d"
    module = getattr(fn, "__module__", None) or "torch"
    return "F." + name if module in ("torch.nn.functional", "torch._C._nn") else f"torch.{name}"


@dataclass(frozen=True)
class Value:
    """A run-time tensor operand of a binary pointwise op: the fx node (by name) that computes it."""

    name: str


def _param_broadcast(pshape: tuple[int, ...], shape: tuple[int, ...], what: str) -> str:
    """'scalar' or 'channel' for a parameter of shape pshape applied to a value of shape (N, C, ...), or
    Unsupported for any other broadcast (the result must keep the value's shape)."""
    n = len(shape)
    aligned = (1,) * (n - len(pshape)) + tuple(pshape) if len(pshape) <= n else None
    if aligned is None or any(p not in (1, s) for p, s in zip(aligned, shape)):
        raise Unsupported(f"{what} of shape {tuple(pshape)} does not broadcast into the value's shape {shape}")
    if all(p == 1 for p in aligned):
        return "scalar"
    if n >= 2 and all(p == 1 for i, p in enumerate(aligned) if i != 1):
        return "channel"
    raise Unsupported(f"{what} of shape {tuple(pshape)} varies over dims other than the channel dim; kgen supports "
                      "scalar and per-channel parameters: shaped (C,1,1) or (1,C,1,1), or viewed so "
                      "(self.b.view(1, -1, 1, 1))")


def attribute(obj: Any, path: str) -> Any:
    """The attribute at a qualified path ("block.scale") of a module."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _tensor_constant(target: str) -> bool:
    """Whether a get_attr target is a tensor PyTorch captured from forward while tracing (not a model tensor)."""
    return re.fullmatch(r"_tensor_constant\d+", target) is not None


def _has_node(args: Any) -> bool:
    found: list[fx.Node] = []
    fx.node.map_arg(args, found.append)
    return bool(found)


def _is_index_view(index: Any) -> bool:
    """Whether t[index] only inserts size-1 dims or keeps whole dims: None, ':' and '...' (t[None, :, None, None])."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or (isinstance(i, slice) and (i.start, i.stop, i.step) == (None, None, None))
               for i in items)


def tensor_view_source(v: Any) -> fx.Node | None:
    """The get_attr node when v reads a model tensor, directly or through views written with constant arguments
    (self.bias.view(1, -1, 1, 1), self.b[None, :, None, None], self.s.unsqueeze(-1).unsqueeze(-1)); else None. Such
    a view keeps the tensor's elements in its order, so kernels read the registered tensor by channel as it is."""
    while isinstance(v, fx.Node) and v.op != "get_attr":
        rest = list(v.args[1:]) + list(v.kwargs.values())
        if not v.args or _has_node(rest):  # a size read from a run-time tensor: not a constant view
            return None
        view = (v.op == "call_function" and v.target in _VIEW_FUNCS) or (v.op == "call_method" and v.target in _VIEW_METHODS) \
            or (v.op == "call_function" and v.target is operator.getitem and len(v.args) == 2 and _is_index_view(v.args[1]))
        if not view:
            return None
        v = v.args[0]
    return v if isinstance(v, fx.Node) else None


def _model_tensor_sources(v: fx.Node) -> list[str]:
    """The model tensors v is computed from when it reads no run-time input (self.b[:8], self.w * 2), else []."""
    seen, stack, found = set(), [v], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return []
        if n.op == "get_attr":
            found.append(n.target)
        stack.extend(n.all_input_nodes)
    return sorted(set(found))


def _operand(v: Any, gm: fx.GraphModule, shape: tuple[int, ...], at: str, label: str) -> Any:
    """A binary op's operand: a float (a Python number, or a 0-d tensor constant PyTorch captured while tracing),
    a param Ref (a parameter or buffer of the model, by qualified name, read as it is or through views: see
    tensor_view_source), or a Value (a tensor computed in forward)."""
    if isinstance(v, (bool, int, float)):
        return float(v)
    if not isinstance(v, fx.Node):
        raise Unsupported(f"{at}: {label} operand {v!r} is neither a tensor nor a number")
    src = tensor_view_source(v)
    if src is None:
        sources = _model_tensor_sources(v)
        if sources:
            raise Unsupported(f"{at}: {label} reads {v.name}, computed in forward from the model's tensor(s) "
                              f"{', '.join('self.' + t for t in sources)} by an op other than a view; kgen reads model "
                              "tensors whole, as registered or through views (self.b.view(1, -1, 1, 1)): compute it "
                              "in __init__ and register the result")
        return Value(v.name)
    t = attribute(gm, src.target)
    if not isinstance(t, torch.Tensor):
        raise Unsupported(f"{at}: {label} reads self.{src.target}, which is not a tensor")
    if _tensor_constant(src.target) and t.device.type == "meta":
        raise Unsupported(f"{at}: {label} reads a tensor of shape {tuple(t.shape)} that torch.fx computed while tracing "
                          "from a plain tensor attribute (one not registered as a parameter or buffer); register it "
                          "with self.register_buffer(name, tensor) or nn.Parameter")
    if _tensor_constant(src.target):
        if t.numel() != 1:
            raise Unsupported(f"{at}: {label} with a tensor constant of shape {tuple(t.shape)}; kgen takes 0-d "
                              "constants (register larger ones as a parameter or buffer)")
        return float(t.item())
    if t.dtype != torch.float32:
        raise Unsupported(f"{at}: {label} reads self.{src.target} of dtype {t.dtype}; kgen takes float32 parameters")
    read = f"self.{src.target}" + (f" (through {v.name})" if v is not src else "")
    return Ref.param(src.target, _param_broadcast(_meta(v)[0] if v is not src else tuple(t.shape), shape,
                                                  f"{at}: {label}: {read}"))


def _pointwise(node: fx.Node, gm: fx.GraphModule, shape: tuple[int, ...], at: str, label: str
               ) -> tuple[str, dict[str, Any], tuple[int, ...], bool] | None:
    """(kind, params, operand shape, inplace) when the node is a pointwise op of kgen.pointwise's table, else None.
    A binary op's params hold its operands as "a" and "b" (see _operand)."""
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        if type(mod) not in POINTWISE_MODULES:
            return None
        kind, attrs = POINTWISE_MODULES[type(mod)]
        form = PointwiseForm(kind, attrs, inplace=bool(getattr(mod, "inplace", False)))
        bound = {"input": node.args[0] if node.args else None, **{a: getattr(mod, a) for a in attrs}}
    elif node.op in ("call_function", "call_method"):
        table = POINTWISE_FUNCS if node.op == "call_function" else POINTWISE_METHODS
        form = table.get(node.target) if isinstance(node.target, str) or callable(node.target) else None
        if form is None:
            return None
        operands = ("input", "other")[: 2 if form.binary else 1]
        bound = _bind(node.args, node.kwargs, operands + form.names, form.defaults)
        if any(n not in bound for n in operands) or len(node.args) > len(operands) + len(form.names):
            return None
        if form.kind in ("maximum", "minimum") and node.target in (torch.max, torch.min, "max", "min") \
                and (not isinstance(bound["other"], fx.Node) or len(bound) != 2):
            return None  # torch.max(x, dim) is a reduction
    else:
        return None
    inplace = form.inplace or bool(bound.pop("inplace", False))
    if not form.binary:
        if not isinstance(bound["input"], fx.Node):
            return None
        params = {n: _const(bound[n], node, n) for n in form.names if n != "inplace"}
        kind = form.kind
        if kind == "clamp":
            if params["min"] is None and params["max"] is None:
                raise Unsupported(f"{at}: {label} with neither min nor max")
            if params["min"] is None or params["max"] is None:
                kind = "clamp_max" if params["min"] is None else "clamp_min"
                params = {k: v for k, v in params.items() if v is not None}
        if kind != "gelu":
            try:
                params = ROWS[kind].bind(params)
            except ValueError as exc:
                raise Unsupported(f"{at}: {label}: {exc}") from None
        return kind, params, _meta(bound["input"])[0], inplace
    extra = {n: _const(bound[n], node, n) for n in form.names}
    if extra.get("alpha", 1) != 1:
        raise Unsupported(f"{at}: {label} with alpha={extra['alpha']}: write the scaling as its own multiplication")
    if extra.get("rounding_mode") is not None:
        raise Unsupported(f"{at}: {label} with rounding_mode={extra['rounding_mode']!r} is not a pointwise op kgen supports")
    a, b = (bound["other"], bound["input"]) if form.swap else (bound["input"], bound["other"])
    value = next((v for v in (a, b) if isinstance(v, fx.Node) and tensor_view_source(v) is None), None)
    if value is None:
        return None  # no run-time tensor operand: not part of a program
    value_shape = _meta(value)[0]
    a, b = (_operand(v, gm, value_shape, at, label) for v in (a, b))
    return form.kind, {"a": a, "b": b}, value_shape, inplace


def _view_dim0(node: fx.Node, rank: int) -> dict[str, bool]:
    """How a view's dim 0 depends on its input's beyond the traced sizes: squeeze_dim0, a squeeze that also drops dim 0
    where it is 1 (no dim given, or dim 0 named); fixed_dim0, a view / reshape whose target writes dim 0 as a constant
    (not -1, not a size read from a tensor)."""
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    rest, kwargs = list(node.args[1:]), dict(node.kwargs)
    if name == "squeeze":
        dims = rest[0] if rest else kwargs.get("dim")
        if dims is None:
            return {"squeeze_dim0": True}
        dims = dims if isinstance(dims, (tuple, list)) else (dims,)
        return {"squeeze_dim0": any(isinstance(d, int) and d % max(rank, 1) == 0 for d in dims)}
    if name in ("view", "reshape"):
        target = rest if rest else [kwargs.get("shape", kwargs.get("size"))]
        if len(target) == 1 and isinstance(target[0], (tuple, list)):
            target = list(target[0])
        first = target[0] if target else None
        return {"fixed_dim0": isinstance(first, int) and first != -1}
    return {}


def normalize(node: fx.Node, gm: fx.GraphModule) -> Op:
    """The node as an Op, whatever form (module, function, method, operator) the user wrote it in."""
    shape, dtype = _meta(node)
    in_shape, _ = _meta(node.args[0] if node.args else None)
    at = where(node)
    label = _label(node, gm)
    pointwise = _pointwise(node, gm, shape, at, label)
    if pointwise is not None:
        kind, params, operand_shape, inplace = pointwise
        return Op(kind, params, shape, operand_shape, at, label, node.target if node.op == "call_module" else None,
                  dtype, inplace)
    if (node.op == "call_function" and node.target in _VIEW_FUNCS) or (node.op == "call_method" and node.target in _VIEW_METHODS):
        # the traced shapes say all (sizes may be run-time), but for how dim 0 follows the input's at other sizes
        return Op("view", _view_dim0(node, len(in_shape)), shape, in_shape, at, label, None, dtype)
    if node.op == "call_function" and node.target in CONV_FUNCS:
        return _functional_conv(node, gm, in_shape, shape, dtype, at, label)
    def consts() -> tuple[tuple, dict[str, Any]]:
        """The arguments after the tensor, each a constant, read only by the ops that take them: an op no family
        takes (torch.where, a comparison) stays "other", named by the family whatever its arguments are."""
        return (tuple(_const(a, node, "an argument") for a in node.args[1:]),
                {k: _const(v, node, k) for k, v in node.kwargs.items()})

    def op(kind: str, params: dict[str, Any], label: str, module_path: str | None = None) -> Op:
        return Op(kind, params, shape, in_shape, at, label, module_path, dtype)

    if node.op == "call_module":
        consts()  # a module called with a second, run-time argument is refused here
        mod = gm.get_submodule(node.target)
        if type(mod) is nn.Conv2d:
            k, d = pair(mod.kernel_size, "kernel_size"), pair(mod.dilation, "dilation")
            before, after = _conv_padding(mod.padding, k, d)
            return op("conv2d", {
                "in_channels": mod.in_channels, "out_channels": mod.out_channels, "kernel": k,
                "stride": pair(mod.stride, "stride"), "padding": before, "padding_end": after, "dilation": d,
                "groups": mod.groups, "bias": mod.bias is not None, "padding_mode": mod.padding_mode,
                "weight_name": f"{node.target}.weight", "bias_name": f"{node.target}.bias" if mod.bias is not None else None,
            }, label, node.target)
        if type(mod) in POOL_MODULES:
            pop, nd = POOL_MODULES[type(mod)]
            return op("pool", pool_params(pop, nd, vars(mod), in_shape, label), label, node.target)
        if type(mod) in (nn.Flatten, nn.Unflatten):
            return op("view", {}, label, node.target)
        return op("other", {}, label, node.target)

    if node.op == "call_function":
        fn = node.target
        if fn in POOL_FUNCS:
            form = POOL_FUNCS[fn]
            p = _bind(*consts(), form.names, form.defaults)
            params = pool_params(form.op, form.nd, p, in_shape, label)
            params["returns_tuple"] = form.returns_tuple or params["return_indices"]
            return op("pool", params, label)
        if fn in _REDUCE_FUNCS or fn in _EXTREMA:
            return _reduction(_REDUCE_FUNCS.get(fn) or _EXTREMA[fn], *consts(), len(in_shape), op, label)
        if fn is operator.getitem:
            args = consts()[0]
            return op("getitem", {"index": args[0] if args else None}, "indexing")
        if fn is getattr:
            args = consts()[0]
            return op("getattr", {"name": args[0] if args else None}, "attribute access")
        return op("other", {}, label)

    if node.op == "call_method":
        if node.target in _REDUCE_METHODS or node.target in _EXTREMA:
            return _reduction(node.target, *consts(), len(in_shape), op, label)
        return op("other", {}, label)
    return op("other", {}, label)


CONV_FUNCS = (F.conv2d, torch.conv2d)
_CONV_FUNC_ARGS = ("weight", "bias", "stride", "padding", "dilation", "groups")


def _model_tensor(v: Any, gm: fx.GraphModule, at: str, what: str) -> str | None:
    """The qualified name of the model parameter or buffer that v reads (None for None), or Unsupported."""
    if v is None:
        return None
    if not isinstance(v, fx.Node) or v.op != "get_attr" or _tensor_constant(v.target) \
            or not isinstance(attribute(gm, v.target), torch.Tensor):
        raise Unsupported(f"{at}: F.conv2d's {what} is not one of the model's parameters or buffers; kgen takes the "
                          f"{what} as a tensor registered on the model (self.<name> = nn.Parameter(...)) or an nn.Conv2d")
    return v.target


def _functional_conv(node: fx.Node, gm: fx.GraphModule, in_shape: tuple[int, ...], shape: tuple[int, ...],
                     dtype: torch.dtype | None, at: str, label: str) -> Op:
    """F.conv2d / torch.conv2d on the model's own weight (and bias) tensors, as the Op nn.Conv2d gives: channels and
    kernel from the weight's shape, PyTorch's defaults for the other arguments."""
    p = _bind(node.args[1:], node.kwargs, _CONV_FUNC_ARGS, {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1})
    weight, bias = _model_tensor(p.get("weight"), gm, at, "weight"), _model_tensor(p["bias"], gm, at, "bias")
    if weight is None:
        raise Unsupported(f"{at}: {label} without a weight")
    for k in ("stride", "padding", "dilation", "groups"):
        _const(p[k], node, k)
    w = attribute(gm, weight)
    if w.dim() != 4:
        raise Unsupported(f"{at}: {label} with a {w.dim()}-d weight; kgen takes a 4-d (out, in / groups, kh, kw) weight")
    k, d = (int(w.shape[2]), int(w.shape[3])), pair(p["dilation"], "dilation")
    before, after = _conv_padding(p["padding"], k, d)
    return Op("conv2d", {
        "in_channels": int(w.shape[1]) * int(p["groups"]), "out_channels": int(w.shape[0]), "kernel": k,
        "stride": pair(p["stride"], "stride"), "padding": before, "padding_end": after, "dilation": d,
        "groups": int(p["groups"]), "bias": bias is not None, "padding_mode": "zeros",
        "weight_name": weight, "bias_name": bias,
    }, shape, in_shape, at, label, None, dtype)


def _reduction(name: str, args: tuple, kwargs: dict, rank: int, op: Callable[..., Op], label: str) -> Op:
    """A reduction's Op: sum / mean / amax / amin (dim optional), logsumexp (dim required), and torch.max / torch.min
    as max_all (no dim: one value) or max_dim (a dim: values and indices)."""
    if name in ("max", "min"):
        if not args and "dim" not in kwargs:
            return op(f"{name}_all", _reduce_params({}, rank), label)
        p = _bind(args, kwargs, ["dim", "keepdim"], {"keepdim": False})
        return op(f"{name}_dim", _reduce_params(p, rank), label)
    p = _bind(args, kwargs, ["dim", "keepdim"], {"dim": None, "keepdim": False})
    if name == "logsumexp" and p["dim"] is None:
        return op("other", {}, label)
    return op(name, _reduce_params(p, rank), label)


def chain(problem: Problem) -> list[Op]:
    """The graph as a straight chain input -> op -> ... -> output, or Unsupported naming what breaks it."""
    graph = problem.gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1 or len(problem.input_shapes) != 1:
        raise Unsupported(f"Model.forward takes {len(placeholders)} inputs; kgen's families take exactly one tensor input")
    ops: list[Op] = []
    prev = placeholders[0]
    for node in graph.nodes:
        if node.op in ("placeholder",):
            continue
        if node.op == "get_attr":
            raise Unsupported(f"{where(node)}: reads the model's tensor self.{node.target}; kgen takes model tensors only in "
                              "a convolution block (an nn.Conv2d or F.conv2d weight and bias, and scalar or per-channel "
                              "tensors in the pointwise ops after it)")
        if node.op == "output":
            if node.args[0] is not prev:
                raise Unsupported("Model.forward returns something other than the last op's result")
            break
        if not node.args or node.args[0] is not prev or any(isinstance(a, fx.Node) for a in list(node.args[1:]) + list(node.kwargs.values())):
            raise Unsupported(f"{where(node)}: {node.name} does not continue a single chain from the input; kgen's families are straight chains")
        if len(prev.users) != 1:
            raise Unsupported(f"{where(node)}: the value feeding {node.name} is used more than once; kgen's families are straight chains")
        ops.append(normalize(node, problem.gm))
        prev = node
    if not ops:
        raise Unsupported("Model.forward returns its input unchanged; nothing to generate")
    return ops


def describe_unsupported(op: Op) -> str:
    return f"{op.where}: unsupported op {op.label}"


# ----------------------------------------------------------------------------------------------- pointwise programs

_GELU_ROWS = {"none": "gelu", "tanh": "gelu_tanh"}


def between(gm: fx.GraphModule, start: fx.Node, end: fx.Node) -> list[fx.Node]:
    """The nodes on some path from start to end (end included, start not), in graph order."""
    nodes = list(gm.graph.nodes)
    after = nodes[nodes.index(start) + 1: nodes.index(end) + 1] if end in nodes[nodes.index(start) + 1:] else []
    reached = {start}
    for n in after:
        if any(i in reached for i in n.all_input_nodes):
            reached.add(n)
    if end not in reached:
        raise Unsupported(f"{where(end)}: {end.name} does not depend on {start.name}")
    feeds = {end}
    for n in reversed(after):
        if n in reached and any(u in feeds for u in n.users):
            feeds.add(n)
    return [n for n in after if n in reached and n in feeds]


def pointwise_program(gm: fx.GraphModule, start: fx.Node, end: fx.Node) -> Program:
    """The pointwise ops from start's value (the program's input, e.g. a convolution's output) to end's (its
    output) as a kgen.pointwise Program: a DAG, since any op may use any earlier value. Other operands must be
    numbers, 0-d tensor constants, or float32 parameters/buffers that are scalars or per-channel. Unsupported
    names the first op that is not pointwise, changes the shape or dtype, reads another run-time tensor, or whose
    value is also used outside the program.

    Division by a constant becomes multiplication by its float32 reciprocal, as PyTorch's CUDA kernel computes
    ``x / c`` (and the gradient ``g / c``) for a CPU scalar c."""
    if end is start:
        return Program(())
    index: dict[fx.Node, int] = {start: -1}
    nodes: list[Node] = []
    in_shape, in_dtype = _meta(start)
    path = between(gm, start, end)
    inside = set(path)
    for n in path:
        if not is_tensor(n):
            if reads_attr(n, "device") or reads_attr(n, "dtype"):
                raise Unsupported(f"{where(n)}: reads a value's .{n.args[1]} to make a tensor in forward; kgen's programs "
                                  "take numbers, 0-d constants and the model's tensors: create the tensor in __init__ "
                                  "and register it as a buffer")
            # a number kgen.problem did not fold: it follows the batch
            raise Unsupported(f"{where(n)}: a number computed from the batch size (dim 0 of a tensor's shape); kgen "
                              "keeps the batch a run-time value, so only numbers from the other dims can be constants")
        op = normalize(n, gm)
        if op.kind not in POINTWISE_KINDS:
            raise Unsupported(f"{op.where}: {op.label} is not a pointwise op kgen can fuse here")
        if op.shape != in_shape or op.dtype != in_dtype:
            raise Unsupported(f"{op.where}: {op.label} gives shape {op.shape} {op.dtype}; the pointwise ops after "
                              f"{start.name} must keep its shape {in_shape} and dtype {in_dtype}")
        if n is not end and any(u not in inside for u in n.users):
            raise Unsupported(f"{op.where}: the value of {op.label} is also used outside the pointwise program")
        first = next(a for a in n.all_input_nodes if tensor_view_source(a) is None)
        # an op written in place may share its operand with readers before it: kgen.problem._follow_writes gave every
        # reader after it the op's value, so the graph is values only
        if "a" in op.params:
            a, b = (_program_ref(op, v, index) for v in (op.params["a"], op.params["b"]))
            if op.kind == "div" and b.kind == "const":
                inv = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(b.value, dtype=torch.float32))
                nodes.append(pw_node("mul", a, Ref.const(inv)))
            else:
                nodes.append(pw_node(op.kind, a, b))
        elif op.kind == "gelu":
            approximate = op.params.get("approximate", "none")
            if approximate not in _GELU_ROWS:
                raise Unsupported(f"{op.where}: gelu approximate={approximate!r} is not supported")
            nodes.append(pw_node(_GELU_ROWS[approximate], _program_ref(op, Value(first.name), index)))
        else:
            nodes.append(pw_node(op.kind, _program_ref(op, Value(first.name), index), **op.params))
        index[n] = len(nodes) - 1
    return Program(tuple(nodes), Ref.node(index[end]))


def _program_ref(op: Op, v: Any, index: dict[fx.Node, int]) -> Ref:
    """An operand of a normalized op as a program Ref: constants and params as they are, a Value by the index of
    the node that computes it (-1: the program's input)."""
    if isinstance(v, Ref):
        return v
    if isinstance(v, float):
        return Ref.const(v)
    found = next((m for m in index if m.name == v.name), None)
    if found is None:
        raise Unsupported(f"{op.where}: {op.label} reads {v.name}, a tensor computed outside the pointwise program")
    return Ref.input() if index[found] < 0 else Ref.node(index[found])


def pointwise_end(gm: fx.GraphModule, start: fx.Node) -> fx.Node:
    """The last node e (in graph order) for which start..e is a pointwise program; start itself when none."""
    best = start
    nodes = list(gm.graph.nodes)
    for n in nodes[nodes.index(start) + 1:]:
        if n.op in ("call_module", "call_function", "call_method"):
            try:
                pointwise_program(gm, start, n)
            except Unsupported:
                continue
            best = n
    return best


def model_program(problem: Problem) -> Program:
    """The whole model as one pointwise program of its single input, or Unsupported naming what is not."""
    graph = problem.gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise Unsupported(f"Model.forward takes {len(placeholders)} inputs; a pointwise program takes exactly one")
    out = next(n for n in graph.nodes if n.op == "output").args[0]
    if not isinstance(out, fx.Node):
        raise Unsupported("Model.forward does not return one tensor")
    return pointwise_program(problem.gm, placeholders[0], out)
