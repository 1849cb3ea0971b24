"""The traced graph as normalized ops: module, function and method forms of one op become one ``Op`` kind with
PyTorch's argument defaults applied. Families match on these ops (``kgen.spec`` runs the matching).

Tables, not branches: each supported PyTorch callable is one row naming its kind, its argument names and defaults.
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from kgen.errors import Unsupported
from kgen.geometry import conv_same_padding
from kgen.problem import Problem


@dataclass(frozen=True)
class Op:
    """One normalized op of the traced chain."""

    kind: str  # conv2d | pool | sigmoid | tanh | relu | gelu | sum | mean | getitem | other
    params: dict[str, Any]
    shape: tuple[int, ...]  # output shape (the first output's, for ops returning a tuple)
    in_shape: tuple[int, ...]
    where: str  # "file:line: source" or the fx node's name
    label: str  # what the user wrote, e.g. "nn.Conv2d (self.conv)" or "torch.sigmoid"
    module_path: str | None = None  # qualified name of the nn.Module for call_module ops
    dtype: torch.dtype | None = None  # output dtype (the first output's)


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

_ACT_MODULES = {nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.ReLU: "relu", nn.GELU: "gelu"}
_ACT_FUNCS = {torch.sigmoid: "sigmoid", torch.tanh: "tanh", torch.relu: "relu", F.relu: "relu", F.gelu: "gelu"}
_ACT_METHODS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}
_REDUCE_FUNCS = {torch.sum: "sum", torch.mean: "mean"}


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


def where(node: fx.Node) -> str:
    """'file:line: source' of the user's code that created the node (innermost frame outside torch)."""
    lines = (node.stack_trace or "").strip().splitlines()
    found = ""
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m and f"{os.sep}torch{os.sep}" not in m.group(1):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = f"{os.path.basename(m.group(1))}:{m.group(2)}: {code}"
    return found or f"graph node {node.name}"


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


def _conv_padding(padding: Any, kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        out = []
        for k, d in zip(kernel, dilation):
            left, right = conv_same_padding(k, d)
            if left != right:
                raise Unsupported(f"padding='same' with kernel {kernel} and dilation {dilation} pads asymmetrically")
            out.append(left)
        return (out[0], out[1])
    return pair(padding, "padding")


def _reduce_params(p: dict[str, Any], rank: int) -> dict[str, Any]:
    dim = p.get("dim")
    if dim is None:
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


def normalize(node: fx.Node, gm: fx.GraphModule) -> Op:
    """The node as an Op, whatever form (module, function, method) the user wrote it in."""
    shape, dtype = _meta(node)
    in_shape, _ = _meta(node.args[0] if node.args else None)
    at = where(node)
    args = tuple(_const(a, node, "an argument") for a in node.args[1:])
    kwargs = {k: _const(v, node, k) for k, v in node.kwargs.items()}

    def op(kind: str, params: dict[str, Any], label: str, module_path: str | None = None) -> Op:
        return Op(kind, params, shape, in_shape, at, label, module_path, dtype)

    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        label = f"nn.{type(mod).__name__} (self.{node.target})"
        if type(mod) is nn.Conv2d:
            k, d = pair(mod.kernel_size, "kernel_size"), pair(mod.dilation, "dilation")
            return op("conv2d", {
                "in_channels": mod.in_channels, "out_channels": mod.out_channels, "kernel": k,
                "stride": pair(mod.stride, "stride"), "padding": _conv_padding(mod.padding, k, d), "dilation": d,
                "groups": mod.groups, "bias": mod.bias is not None, "padding_mode": mod.padding_mode,
                "weight_name": f"{node.target}.weight", "bias_name": f"{node.target}.bias" if mod.bias is not None else None,
            }, label, node.target)
        if type(mod) in POOL_MODULES:
            pop, nd = POOL_MODULES[type(mod)]
            return op("pool", pool_params(pop, nd, vars(mod), in_shape, label), label, node.target)
        if type(mod) in _ACT_MODULES:
            kind = _ACT_MODULES[type(mod)]
            params = {"approximate": mod.approximate} if kind == "gelu" else {}
            return op(kind, params, label, node.target)
        return op("other", {}, label, node.target)

    if node.op == "call_function":
        fn = node.target
        name = getattr(fn, "__name__", str(fn))
        if name == "fn" and fn in POOL_FUNCS:  # boolean_dispatch wrappers all carry the name 'fn'
            name = f"{POOL_FUNCS[fn].op.replace('avg', 'avg_pool').replace('max', 'max_pool')}{POOL_FUNCS[fn].nd}d"
        module = getattr(fn, "__module__", None) or "torch"
        label = "F." + name if module in ("torch.nn.functional", "torch._C._nn") else f"torch.{name}"
        if fn in POOL_FUNCS:
            form = POOL_FUNCS[fn]
            p = _bind(args, kwargs, form.names, form.defaults)
            params = pool_params(form.op, form.nd, p, in_shape, label)
            params["returns_tuple"] = form.returns_tuple or params["return_indices"]
            return op("pool", params, label)
        if fn in (F.conv2d, torch.conv2d):
            raise Unsupported(f"{at}: F.conv2d with explicit weights: write the convolution as nn.Conv2d so kgen can mirror its parameters")
        if fn in _ACT_FUNCS:
            kind = _ACT_FUNCS[fn]
            params = {"approximate": kwargs.get("approximate", args[0] if args else "none")} if kind == "gelu" else {}
            return op(kind, params, label)
        if fn in _REDUCE_FUNCS:
            p = _bind(args, kwargs, ["dim", "keepdim"], {"dim": None, "keepdim": False})
            return op(_REDUCE_FUNCS[fn], _reduce_params(p, len(in_shape)), label)
        if fn is operator.getitem:
            index = args[0] if args else None
            return op("getitem", {"index": index}, "indexing")
        return op("other", {}, label)

    if node.op == "call_method":
        label = f"Tensor.{node.target}"
        if node.target in _ACT_METHODS:
            return op(_ACT_METHODS[node.target], {}, label)
        if node.target in ("sum", "mean"):
            p = _bind(args, kwargs, ["dim", "keepdim"], {"dim": None, "keepdim": False})
            return op(node.target, _reduce_params(p, len(in_shape)), label)
        return op("other", {}, label)
    return op("other", {}, f"{node.op} {node.target}")


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
            raise Unsupported(f"{where(node)}: reads the attribute self.{node.target} directly; kgen supports parameters only inside nn.Conv2d")
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
