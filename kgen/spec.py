"""Stage 2: match the traced graph against the template families and build a frozen spec.

The fx graph is first normalized into a chain of ``Op``s (module, function and method forms of the same op become
one kind with PyTorch's argument defaults applied). Each family in ``kgen.families.FAMILIES`` then looks at the
chain: ``match`` returns its spec, returns None when the chain is not its kind at all, or raises ``Unsupported``
naming the first op that breaks its pattern.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from kgen.errors import Unsupported
from kgen.problem import Problem


@dataclass(frozen=True)
class Op:
    """One normalized op of the traced chain."""

    kind: str  # conv2d | avg_pool2d | sigmoid | tanh | relu | gelu | sum | mean | other
    params: dict[str, Any]
    shape: tuple[int, ...]  # output shape (from meta shape propagation)
    in_shape: tuple[int, ...]
    where: str  # "file:line: source" or the fx node's name
    label: str  # what the user wrote, e.g. "nn.Conv2d (self.conv)" or "torch.sigmoid"
    module_path: str | None = None  # qualified name of the nn.Module for call_module ops


def pair(v: Any, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, (tuple, list)) and len(v) == 1 and isinstance(v[0], int):
        return (v[0], v[0])
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return (int(v[0]), int(v[1]))
    raise Unsupported(f"{what}={v!r} is not an int or a pair of ints")


def spec_dict(spec: Any) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def spec_hash(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec_dict(spec), sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------- normalization

_ACT_MODULES = {nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.ReLU: "relu", nn.GELU: "gelu"}
_ACT_FUNCS = {torch.sigmoid: "sigmoid", torch.tanh: "tanh", torch.relu: "relu", F.relu: "relu", F.gelu: "gelu"}
_ACT_METHODS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}
_REDUCE_FUNCS = {torch.sum: "sum", torch.mean: "mean"}


def _where(node: fx.Node) -> str:
    """'file:line: source' of the user's code that created the node (innermost frame outside torch)."""
    lines = (node.stack_trace or "").strip().splitlines()
    found = ""
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m and f"{os.sep}torch{os.sep}" not in m.group(1):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = f"{os.path.basename(m.group(1))}:{m.group(2)}: {code}"
    return found or f"graph node {node.name}"


def _bind(args: tuple, kwargs: dict, names: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for n, a in zip(names, args):
        out[n] = a
    out.update(kwargs)
    return out


def _const(v: Any, node: fx.Node, what: str) -> Any:
    if isinstance(v, fx.Node):
        raise Unsupported(f"{_where(node)}: {what} is computed at run time; kgen needs it to be a constant")
    return v


def _avg_pool_params(p: dict[str, Any]) -> dict[str, Any]:
    k = pair(p["kernel_size"], "kernel_size")
    s = k if p["stride"] is None or p["stride"] == [] or p["stride"] == () else pair(p["stride"], "stride")
    return {
        "kernel": k,
        "stride": s,
        "padding": pair(p["padding"], "padding"),
        "ceil_mode": bool(p["ceil_mode"]),
        "count_include_pad": bool(p["count_include_pad"]),
        "divisor_override": p["divisor_override"],
    }


def _conv_padding(padding: Any, kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        out = []
        for k, d in zip(kernel, dilation):
            total = d * (k - 1)
            if total % 2:
                raise Unsupported(f"padding='same' with kernel {kernel} and dilation {dilation} pads asymmetrically")
            out.append(total // 2)
        return (out[0], out[1])
    return pair(padding, "padding")


def _reduce_params(p: dict[str, Any], rank: int) -> dict[str, Any]:
    dim = p.get("dim")
    if dim is None:
        dims = tuple(range(rank))
    else:
        dims = tuple(sorted({d % rank for d in ([dim] if isinstance(dim, int) else dim)}))
    return {"dims": dims, "keepdim": bool(p.get("keepdim", False)), "dtype": p.get("dtype")}


def normalize(node: fx.Node, gm: fx.GraphModule) -> Op:
    """The node as an Op, whatever form (module, function, method) the user wrote it in."""
    meta = node.meta.get("tensor_meta")
    shape = tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else ()
    first = node.args[0] if node.args else None
    in_meta = first.meta.get("tensor_meta") if isinstance(first, fx.Node) else None
    in_shape = tuple(in_meta.shape) if in_meta is not None and hasattr(in_meta, "shape") else ()
    where = _where(node)
    args = tuple(_const(a, node, "an argument") for a in node.args[1:])
    kwargs = {k: _const(v, node, k) for k, v in node.kwargs.items()}

    def op(kind: str, params: dict[str, Any], label: str, module_path: str | None = None) -> Op:
        return Op(kind, params, shape, in_shape, where, label, module_path)

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
        if type(mod) is nn.AvgPool2d:
            return op("avg_pool2d", _avg_pool_params(vars(mod)), label, node.target)
        if type(mod) in _ACT_MODULES:
            kind = _ACT_MODULES[type(mod)]
            params = {"approximate": mod.approximate} if kind == "gelu" else {}
            return op(kind, params, label, node.target)
        return op("other", {}, label, node.target)

    if node.op == "call_function":
        fn = node.target
        label = f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__name__', fn)}".replace("torch._C._nn.", "F.")
        if fn is F.avg_pool2d:
            p = _bind(args, kwargs, ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"],
                      {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True, "divisor_override": None})
            return op("avg_pool2d", _avg_pool_params(p), "F.avg_pool2d")
        if fn in (F.conv2d, torch.conv2d):
            raise Unsupported(f"{where}: F.conv2d with explicit weights: write the convolution as nn.Conv2d so kgen can mirror its parameters")
        if fn in _ACT_FUNCS:
            kind = _ACT_FUNCS[fn]
            params = {"approximate": kwargs.get("approximate", args[0] if args else "none")} if kind == "gelu" else {}
            return op(kind, params, label)
        if fn in _REDUCE_FUNCS:
            p = _bind(args, kwargs, ["dim", "keepdim"], {"dim": None, "keepdim": False})
            return op(_REDUCE_FUNCS[fn], _reduce_params(p, len(in_shape)), label)
        if fn is operator.getitem:
            return op("other", {}, "indexing")
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
    if problem.input_dtypes[0] != torch.float32:
        raise Unsupported(f"get_inputs() gives a {problem.input_dtypes[0]} tensor; kgen's families are float32")
    ops: list[Op] = []
    prev = placeholders[0]
    for node in graph.nodes:
        if node.op in ("placeholder",):
            continue
        if node.op == "get_attr":
            raise Unsupported(f"{_where(node)}: reads the attribute self.{node.target} directly; kgen supports parameters only inside nn.Conv2d")
        if node.op == "output":
            if node.args[0] is not prev:
                raise Unsupported("Model.forward returns something other than the last op's single tensor")
            break
        if not node.args or node.args[0] is not prev or any(isinstance(a, fx.Node) for a in list(node.args[1:]) + list(node.kwargs.values())):
            raise Unsupported(f"{_where(node)}: {node.name} does not continue a single chain from the input; kgen's families are straight chains")
        if len(prev.users) != 1:
            raise Unsupported(f"{_where(node)}: the value feeding {node.name} is used more than once; kgen's families are straight chains")
        ops.append(normalize(node, problem.gm))
        prev = node
    if not ops:
        raise Unsupported("Model.forward returns its input unchanged; nothing to generate")
    return ops


def describe_unsupported(op: Op) -> str:
    return f"{op.where}: unsupported op {op.label}"


def match(problem: Problem):
    """(family module, spec) for the problem, or Unsupported with the first op no family takes."""
    from kgen.families import FAMILIES

    ops = chain(problem)
    for family in FAMILIES:
        spec = family.match(ops, problem)
        if spec is not None:
            return family, spec
    first = ops[0]
    known = ", ".join(f.NAME for f in FAMILIES)
    raise Unsupported(f"{describe_unsupported(first)}: no kgen family starts with it (families: {known})")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pool_out_size(size: int, k: int, s: int, p: int, ceil_mode: bool, dilation: int = 1) -> int:
    """PyTorch's pooling output size (aten pooling_output_shape), including ceil_mode's rule that a last window
    starting in the right padding is dropped."""
    num = size + 2 * p - dilation * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out

