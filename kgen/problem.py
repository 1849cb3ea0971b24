"""Stage 1: load a KernelBench-style problem file and trace its Model on the meta device.

The problem file defines ``Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``. We exec it, build
``Model(*get_init_inputs())`` on the meta device, trace it with torch.fx, and propagate shapes with inputs made by
``get_inputs()`` under the meta device too: no input is ever materialized (one bundled input is 17 GB).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import linecache
import math
import operator
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp
from torch.overrides import TorchFunctionMode

from kgen.errors import KgenError, Unsupported

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


# CPython 3.11's AST constructor keeps its recursion depth per interpreter, not per thread: building ast objects
# (ast.parse, ast.literal_eval) in several threads at once can raise "SystemError: AST constructor recursion depth
# mismatch" (seen on 3.11.7 in tests/test_pipeline.py's 32-thread load and generate). kgen's own calls take turns.
AST_LOCK = threading.Lock()


@dataclass
class Problem:
    """A loaded, traced problem: everything later stages need, nothing materialized."""

    name: str  # file stem, names generated/<name>/
    path: Path
    source: str
    namespace: dict[str, Any]
    init_args: list[Any]
    gm: fx.GraphModule  # traced on meta; nodes carry meta['tensor_meta']
    input_shapes: list[tuple[int, ...]]
    input_dtypes: list[torch.dtype]
    init_signature: list[tuple[str, Any]] = field(default_factory=list)  # (name, default or EMPTY)

    def module_code_without_model(self) -> str:
        """The problem file's module-level code minus ``class Model`` (keeps get_inputs and its globals), minus
        torch imports nothing else uses (``import torch.nn.functional as F`` would trip KernelBench's checker), and
        minus docstrings and other bare strings (the checker reads words inside strings: a docstring saying "pass" or
        "try" would fail the generated module)."""
        with AST_LOCK:
            tree = ast.parse(self.source)
        lines = self.source.splitlines(keepends=True)
        drop: list[tuple[int, int]] = []
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "Model":
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                drop.append((start, node.end_lineno))
        drop += _bare_strings(tree, lines)
        kept_nodes = [n for n in tree.body if not any(a <= n.lineno <= b for a, b in drop)]
        used = {n.id for k in kept_nodes if not isinstance(k, (ast.Import, ast.ImportFrom))
                for n in ast.walk(k) if isinstance(n, ast.Name)}
        for node in kept_nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                bound = [(a.asname or a.name).split(".")[0] for a in node.names]
                if (module or "").startswith("torch.") and not any(b in used for b in bound):
                    drop.append((node.lineno, node.end_lineno))
        kept = [ln for i, ln in enumerate(lines, 1) if not any(a <= i <= b for a, b in drop)]
        text = "".join(kept)
        while "\n\n\n\n" in text:
            text = text.replace("\n\n\n\n", "\n\n\n")
        return text.strip("\n") + "\n"


def _is_bare_string(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _bare_strings(tree: ast.Module, lines: list[str]) -> list[tuple[int, int]]:
    """Line ranges of statements that are only a string (docstrings) in the module body and in the bodies of its
    functions and classes, where the string has its lines to itself and the body keeps another statement."""
    out = []

    def alone(node: ast.stmt) -> bool:  # no other statement on its first or last line
        first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]
        return not first[:node.col_offset].strip() and not last[node.end_col_offset:].strip().lstrip(";").strip()

    def visit(body: list[ast.stmt]) -> None:
        strings = [n for n in body if _is_bare_string(n) and alone(n)]
        if len(strings) < len(body):
            out.extend((n.lineno, n.end_lineno) for n in strings)
        for n in body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(n.body)

    visit(tree.body)
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _user_frame(exc: BaseException, path: Path) -> str:
    """'file:line' of the innermost frame inside the problem file, or ''."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == str(path):
            where = f"{path.name}:{frame.lineno}"
    return where


def exec_problem(path: Path) -> tuple[str, dict[str, Any]]:
    if not path.is_file():
        raise KgenError(f"problem file not found: {path} (pass the path of a .py file defining Model, get_inputs, get_init_inputs)")
    source = path.read_text()
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise KgenError(f"{path.name}:{exc.lineno}: syntax error in problem file: {exc.msg}; fix the file and rerun") from None
    namespace: dict[str, Any] = {"__name__": f"kgen_problem_{path.stem}", "__file__": str(path)}
    linecache.cache[str(path)] = (len(source), None, source.splitlines(keepends=True), str(path))
    try:
        exec(code, namespace)
    except Exception as exc:  # the user's file raised: report where, not our stack
        where = _user_frame(exc, path) or path.name
        raise KgenError(f"{where}: problem file raised {_first_line(exc)}; fix the file and rerun") from None
    missing = [n for n in REQUIRED_NAMES if n not in namespace]
    if missing:
        raise KgenError(
            f"{path.name}: problem file does not define {', '.join(missing)}; a problem file needs a Model(nn.Module) "
            "class and the functions get_inputs() and get_init_inputs()"
        )
    if not (isinstance(namespace["Model"], type) and issubclass(namespace["Model"], torch.nn.Module)):
        raise KgenError(f"{path.name}: Model must be a torch.nn.Module subclass")
    return source, namespace


def _call_user(fn, path: Path, what: str, *args):
    try:
        return fn(*args)
    except Exception as exc:
        where = _user_frame(exc, path) or path.name
        raise KgenError(f"{where}: {what} raised {_first_line(exc)}; fix the problem file and rerun") from None


def init_signature(model_cls: type) -> list[tuple[str, Any]]:
    import inspect

    if model_cls.__init__ is torch.nn.Module.__init__:
        return []
    sig = inspect.signature(model_cls.__init__)
    params = list(sig.parameters.values())[1:]  # drop self
    out = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise KgenError(f"Model.__init__ takes *{p.name}; kgen needs named constructor parameters to mirror the signature")
        out.append((p.name, p.default))
    return out


# `x += y` on a traced tensor: torch.fx's Proxy has no __iadd__, so Python falls back to `x = x + y` and the trace
# loses the write into x's storage (`y = x; y += 1; return x` would return x unchanged). While kgen traces, Proxy
# records augmented assignments as operator.iadd and its kin; _follow_writes then gives every later reader of the
# written tensor the new value.
_AUGMENTED = {"__iadd__": operator.iadd, "__isub__": operator.isub, "__imul__": operator.imul,
              "__itruediv__": operator.itruediv, "__ifloordiv__": operator.ifloordiv, "__imod__": operator.imod,
              "__ipow__": operator.ipow}


def _augmented(fn):
    def record(self: fx.Proxy, other: Any) -> fx.Proxy:
        return self.tracer.create_proxy("call_function", fn, (self, other), {})
    return record


class _Tracer(fx.Tracer):
    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True
        # a buffer read in forward is a get_attr node, as a parameter is, so an op on it (self.b.view(1, -1, 1, 1))
        # is an op of the graph rather than a tensor torch.fx computes while tracing and captures unnamed
        self.proxy_buffer_attributes = True

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        added = [name for name in _AUGMENTED if name not in vars(fx.Proxy)]
        for name in added:
            setattr(fx.Proxy, name, _augmented(_AUGMENTED[name]))
        try:
            return super().trace(root, concrete_args)
        finally:
            for name in added:
                delattr(fx.Proxy, name)


def where(node: fx.Node) -> str:
    """'file:line: source' of the user's code that created the node (innermost frame outside torch and this
    module's tracer)."""
    lines = (node.stack_trace or "").strip().splitlines()
    found = ""
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m and f"{os.sep}torch{os.sep}" not in m.group(1) and os.path.abspath(m.group(1)) != os.path.abspath(__file__):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            found = f"{os.path.basename(m.group(1))}:{m.group(2)}: {code}"
    return found or f"graph node {node.name}"


# torch.fx's tracer patches torch.nn.Module.__call__ for the whole process while it traces, so a problem traced in one
# thread broke another thread's shape propagation ("module is not installed as a submodule"): one load at a time.
_TRACE_LOCK = threading.Lock()


# Ops that return their input's values, dropped from the traced graph so that no family has to know them: nn.Identity,
# dropout of any kind with p = 0 (with p > 0 it draws random masks in training mode and stays, to be refused by name),
# .contiguous() (it returns its input when that is contiguous, and the same values otherwise), and a cast to the dtype
# a value already has or a move to the device a tensor of the problem is on
_DROPOUT_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
                    torch.nn.FeatureAlphaDropout)
_DROPOUT_FUNCS = {torch.nn.functional.dropout, torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
                  torch.nn.functional.dropout3d, torch.nn.functional.alpha_dropout,
                  torch.nn.functional.feature_alpha_dropout, torch.dropout, torch.feature_dropout, torch.alpha_dropout}


def _is_identity(node: fx.Node, gm: fx.GraphModule) -> bool:
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return type(mod) is torch.nn.Identity or (isinstance(mod, _DROPOUT_MODULES) and mod.p == 0)
    if node.op == "call_function" and node.target in _DROPOUT_FUNCS:
        p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
        return type(p) in (int, float) and p == 0
    if node.op == "call_method" and node.target in _CASTS and not set(node.kwargs) - {"dtype", "device", "non_blocking"}:
        # a cast to the dtype it already has (x.float() on float32, x.to(x.dtype)), or a move to the device of a
        # tensor of the problem (self.b.to(x.device): ModelNew's tensors and input share one device, which its
        # binding checks): the same values
        got, src = node.meta.get("tensor_meta"), node.args[0].meta.get("tensor_meta")
        return got is not None and src is not None and got.dtype == src.dtype and \
            all(isinstance(a, torch.dtype) or reads_attr(a, "dtype") or reads_attr(a, "device")
                for a in [*node.args[1:], *node.kwargs.values()] if not isinstance(a, bool))
    return node.op == "call_method" and node.target == "contiguous" and len(node.args) == 1 and not node.kwargs


_CASTS = {"float", "half", "bfloat16", "double", "to", "type"}


def reads_attr(a: Any, name: str) -> bool:
    """Whether a is a traced `t.<name>` (t.dtype, t.device)."""
    return isinstance(a, fx.Node) and a.op == "call_function" and a.target is getattr and a.args[1:] == (name,)


def _drop_identities(gm: fx.GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if node.args and isinstance(node.args[0], fx.Node) and _is_identity(node, gm):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    # attribute reads left without a user (the x.dtype of a dropped cast), and items nothing reads: the indices of
    # `v, _ = torch.max(x, dim=1)` or of a max pool with return_indices=True unpacked into a name never used
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and node.target in (getattr, operator.getitem) and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()


# Ops whose result shares its input's storage: a write into one is a write into the other, which _follow_writes
# cannot express as values (it refuses such a write)
_ALIAS_METHODS = {"view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose",
                 "permute", "t", "expand", "expand_as", "narrow", "select", "unfold", "movedim", "moveaxis", "swapaxes",
                 "swapdims", "diagonal", "detach", "as_strided", "split", "chunk", "unbind", "__getitem__"}
_ALIAS_FUNCS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze, torch.transpose, torch.permute,
               torch.narrow, torch.select, torch.split, torch.chunk, torch.unbind, torch.detach, torch.movedim,
               torch.swapaxes, torch.t, torch.diagonal, torch.as_strided, operator.getitem}


def is_tensor(v: Any) -> bool:
    """Whether v is a traced node whose value is a tensor (ShapeProp gave it a shape)."""
    return isinstance(v, fx.Node) and hasattr(v.meta.get("tensor_meta"), "shape")


def _writes_in_place(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether node writes into the storage of its first argument (a tensor): x.mul_(2), torch.relu_(x), x += 1,
    F.relu(x, inplace=True) or F.relu(x, True), nn.ReLU(inplace=True)."""
    if not node.args or not is_tensor(node.args[0]):
        return False
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("_")
    if node.op == "call_module":
        return getattr(gm.get_submodule(node.target), "inplace", False) is True
    if node.op != "call_function":
        return False
    name = getattr(node.target, "__name__", "")
    if node.target in _AUGMENTED.values() or (name.endswith("_") and not name.startswith("_")):
        return True
    if "inplace" in node.kwargs:
        return node.kwargs["inplace"] is True
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):  # a builtin without a signature, or arguments it would reject
        return False
    return bound.arguments.get("inplace") is True


def _aliases_input(node: fx.Node) -> bool:
    """Whether node's result shares its first argument's storage (a view, x.T, a piece of x.split(...))."""
    if node.op == "call_method":
        return node.target in _ALIAS_METHODS
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    if node.target is getattr:
        return node.args[1:] in (("T",), ("mT",), ("H",), ("mH",), ("real",), ("imag",), ("data",))
    return node.target in _ALIAS_FUNCS and (is_tensor(node.args[0]) or _aliases_input(node.args[0]))


def _storage_sharers(x: fx.Node, before: int, order: dict[fx.Node, int]) -> set[fx.Node]:
    """The values created before position `before` (in the graph `order`) that share x's storage through views (x
    itself not included)."""
    group, todo = {x}, [x]
    while todo:
        v = todo.pop()
        linked = [u for u in v.users if _aliases_input(u)] + ([v.args[0]] if _aliases_input(v) and isinstance(v.args[0], fx.Node) else [])
        for m in linked:
            if m not in group and order[m] < before:
                group.add(m)
                todo.append(m)
    return group - {x}


def _follow_writes(gm: fx.GraphModule) -> None:
    """Make the traced graph say what the code computes when it writes in place: after `w = x.mul_(2)` (or x += 1 on
    an alias of x, or F.relu(x, inplace=True) whose result is dropped) every later reader of x reads w, the value x
    holds from then on; readers before the write keep x. A write into the model's input or tensors, or into storage
    another value shares (a view), is refused: ModelNew computes values and leaves its inputs unchanged."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for w in list(gm.graph.nodes):
        if not _writes_in_place(w, gm):
            continue
        x = w.args[0]
        if x.op in ("placeholder", "get_attr"):
            what = "the model's input" if x.op == "placeholder" else f"the model's tensor self.{x.target}"
            raise KgenError(f"{where(w)}: writes in place into {what} {x.name}; ModelNew leaves its inputs and tensors "
                            "unchanged, so write the op out of place (y = torch.relu(x), not torch.relu_(x) or x += 1)")
        if any(order[u] > order[w] for v in _storage_sharers(x, order[w], order) for u in v.users):
            raise KgenError(f"{where(w)}: writes in place into {x.name}, whose storage a view shares with a value read "
                            "after the write; kgen follows values, not storage: write the op out of place")
        for u in [u for u in x.users if order[u] > order[w]]:
            u.replace_input_with(x, w)
    gm.recompile()


# Numbers a forward computes from shapes (F.avg_pool2d(x, x.size()[2:]), x.sum(1) / x.shape[1]). kgen specializes
# every dim but the batch, so a number that does not follow the batch size is a constant of the problem, folded into
# the graph as one: F.avg_pool2d(x, (14, 14)). Whether a number follows the batch is measured, not guessed: the graph
# runs on meta inputs of several batch sizes (dim 0 of each input), and a number that changes stays a node (x.size(0)
# in x.view(x.size(0), -1), which the families read as the batch, or a use they refuse by name).
_SHAPE_METHODS = {"size", "dim", "numel", "nelement"}
_NUMBER_OPS = {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv,
               operator.mod, operator.pow, operator.neg, *_AUGMENTED.values()}


def _is_shape_number(n: fx.Node, numbers: set[fx.Node]) -> bool:
    """Whether n computes a number (or a tuple of them) from tensor shapes alone."""
    if n.op == "call_function" and n.target is getattr:
        return len(n.args) == 2 and n.args[1] in ("shape", "ndim") and is_tensor(n.args[0])
    if n.op == "call_method":
        return n.target in _SHAPE_METHODS and is_tensor(n.args[0]) and \
            not any(isinstance(a, fx.Node) for a in [*n.args[1:], *n.kwargs.values()])
    return n.op == "call_function" and n.target in _NUMBER_OPS and bool(n.all_input_nodes) and \
        all(a in numbers for a in n.all_input_nodes)


class _Numbers(fx.Interpreter):
    """Runs the graph and keeps the results of the given nodes."""

    def __init__(self, gm: fx.GraphModule, keep: set[fx.Node]) -> None:
        super().__init__(gm)
        self.keep, self.values = keep, {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        if n in self.keep:
            self.values[n] = tuple(out) if isinstance(out, torch.Size) else out
        return out


def _fold_shape_numbers(gm: fx.GraphModule, inputs: list[torch.Tensor]) -> None:
    numbers: set[fx.Node] = set()
    for n in gm.graph.nodes:
        if _is_shape_number(n, numbers):
            numbers.add(n)
    if not numbers:
        return
    runs = []
    for grow in (lambda b: b, lambda b: b + 3, lambda b: 2 * b + 5, lambda b: 97 * b + 11):
        batch = [torch.empty((grow(t.shape[0]), *t.shape[1:]), dtype=t.dtype, device="meta") if t.dim() else t
                 for t in inputs]
        run = _Numbers(gm, numbers)
        try:
            run.run(*batch)
        except Exception:  # the model takes no other batch (x.view(16, -1)): nothing is known not to follow it
            return
        runs.append(run.values)
    for n in numbers:
        value = runs[0][n]
        if any(r[n] != value for r in runs[1:]) or not isinstance(value, (int, float, tuple)):
            continue
        for u in list(n.users):
            u.args = fx.map_arg(u.args, lambda a: value if a is n else a)
            u.kwargs = fx.map_arg(u.kwargs, lambda a: value if a is n else a)
    for n in reversed(list(gm.graph.nodes)):
        if n in numbers and not n.users:
            gm.graph.erase_node(n)
    gm.recompile()


def _trace(model: torch.nn.Module, defaults: dict[str, Any] | None, given: int) -> fx.GraphModule:
    gm = fx.GraphModule(model, _Tracer().trace(model, concrete_args=defaults), "Model")
    _drop_specialization_guards(gm, given)
    _input_positional(gm)
    return gm


def _takes_input_first(fn: Any) -> bool:
    """Whether fn's first parameter is named `input` (F.conv2d, torch.sigmoid, F.relu, nn.Conv2d.forward after self)."""
    try:
        params = [p for p in inspect.signature(fn).parameters if p != "self"]
        return params[:1] == ["input"]
    except (TypeError, ValueError):  # torch's builtins: their schemas
        sigs = fx.operator_schemas.get_signature_for_torch_op(fn) or []
        return any(list(sig.parameters)[:1] == ["input"] for sig in sigs)


def _input_positional(gm: fx.GraphModule) -> None:
    """A call that passes its tensor as input= (F.conv2d(input=x, weight=...), torch.relu(input=x), self.conv(input=x))
    takes it as its first positional argument instead, as every later stage reads a call's tensor."""
    moved = False
    for node in gm.graph.nodes:
        if node.args or "input" not in node.kwargs or node.op not in ("call_function", "call_module"):
            continue
        fn = node.target if node.op == "call_function" else type(gm.get_submodule(node.target)).forward
        if _takes_input_first(fn):
            kwargs = dict(node.kwargs)
            node.args, node.kwargs = (kwargs.pop("input"),), kwargs
            moved = True
    if moved:
        gm.recompile()


def _graph_text(gm: fx.GraphModule) -> str:
    """The graph as text, with the tensor constants a trace creates (torch.tensor(0.75) in forward: attributes
    _tensor_constant0, 1, ..., numbered on across traces of one module) written as their values."""
    text = str(gm.graph)
    names = {n.target for n in gm.graph.nodes if n.op == "get_attr" and n.target.startswith("_tensor_constant")}
    for name in names:
        t = getattr(gm, name)
        value = t.tolist() if t.device.type != "meta" and t.numel() <= 64 else tuple(t.shape)
        text = re.sub(rf"\b{name}\b", f"<constant {t.dtype} {value}>", text)
    return text


def _refuse_a_forward_that_reads_the_mode(model: torch.nn.Module, defaults: dict[str, Any] | None,
                                          inputs: list[torch.Tensor], gm: fx.GraphModule, path: Path) -> None:
    """kgen traces Model in eval mode, and ModelNew computes that graph in either mode. A forward that branches on
    self.training (or passes it to an op) computes something else in training mode, the mode an nn.Module starts in
    and a benchmark harness runs, so such a model is refused rather than matched in one mode. The training-mode trace
    is compared after the same clean-up; where it cannot be traced or run at all, the eval graph's own checks speak."""
    model.train()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints a traceback before it raises
            other = _trace(model, defaults, len(inputs))
            ShapeProp(other).propagate(*inputs)
        _drop_identities(other)
        differs = _graph_text(other) != _graph_text(gm)
    except Exception:
        differs = False
    finally:
        model.eval()
    if differs:
        raise Unsupported(f"{path.name}: Model.forward computes another graph in training mode than in eval mode (it "
                        "reads self.training, e.g. F.dropout(x, p, training=self.training) or an if on it); kgen "
                        "generates one graph for both modes: make forward independent of self.training")


def load_problem(path: str | Path) -> Problem:
    """The problem file at `path`, executed, traced by torch.fx and its shapes propagated on the meta device.
    Thread-safe (tracing is serialized)."""
    with _TRACE_LOCK:
        return _load_problem(path)


class _StayOnMeta(TorchFunctionMode):
    """While kgen builds a problem's model and inputs on the meta device: a device a problem file names (`device=
    "cuda"`, `.cuda()`, `.to(device)`) becomes the meta device, so files written for a GPU load without one."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(a for a in args if not isinstance(a, (torch.device, str)))
            kwargs.pop("device", None)
            if len(args) == 1 and not {"dtype"} & set(kwargs):
                return args[0]
        elif "device" in kwargs:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def _defaults_left(model: torch.nn.Module, given: int) -> dict[str, Any] | None:
    """forward's parameters after the `given` inputs that have defaults (`def forward(self, x, alpha=0.5)` with one
    input): traced as the constants they are in every call get_inputs() makes."""
    import inspect

    params = list(inspect.signature(model.forward).parameters.values())[given:]
    left = {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return left or None


def _drop_specialization_guards(gm: fx.GraphModule, given: int) -> None:
    """Tracing with concrete arguments leaves a placeholder for each and a check that a call passes that value
    (`torch._assert(alpha == 0.5)`); ModelNew's forward takes the given inputs alone, so both go."""
    for node in [n for n in gm.graph.nodes if n.op == "placeholder"][given:]:
        if not node.args:  # no default: an input get_inputs() does not give (named by the caller)
            continue
        for check in list(node.users):
            for a in list(check.users):
                if a.op == "call_function" and a.target is torch._assert:
                    gm.graph.erase_node(a)
            if not check.users:
                gm.graph.erase_node(check)
        if not node.users:
            gm.graph.erase_node(node)
    gm.recompile()


def _load_problem(path: str | Path) -> Problem:
    path = Path(path).resolve()
    source, ns = exec_problem(path)
    init_args = _call_user(ns["get_init_inputs"], path, "get_init_inputs()")
    if not isinstance(init_args, (list, tuple)):
        raise KgenError(f"{path.name}: get_init_inputs() must return a list, got {type(init_args).__name__}")
    init_args = list(init_args)
    with torch.device("meta"), _StayOnMeta():
        model = _call_user(ns["Model"], path, "Model(*get_init_inputs())", *init_args)
        inputs = _call_user(ns["get_inputs"], path, "get_inputs()")
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise KgenError(f"{path.name}: get_inputs() must return a list of tensors")
    if any(t.device.type != "meta" for t in inputs):
        raise KgenError(
            f"{path.name}: get_inputs() created tensors on {inputs[0].device}; create them with torch's factory calls "
            "(torch.rand(...), torch.randn(...); a device= or .cuda() is fine) so kgen can build them on the meta "
            "device without materializing them"
        )
    model.eval()
    try:
        defaults = _defaults_left(model, len(inputs))
        gm = _trace(model, defaults, len(inputs))
    except Exception as exc:
        raise KgenError(f"{path.name}: torch.fx cannot trace Model ({_first_line(exc)}); kgen needs a traceable forward without data-dependent control flow") from None
    needed = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    if len(needed) != len(inputs):
        raise KgenError(f"{path.name}: Model.forward takes {len(needed)} inputs ({', '.join(needed)}) but get_inputs() "
                        f"returns {len(inputs)}; make get_inputs() return one tensor for each input of forward")
    try:
        ShapeProp(gm).propagate(*inputs)
    except Exception as exc:
        root = exc
        while root.__cause__ is not None:  # ShapeProp wraps the op's own error
            root = root.__cause__
        raise KgenError(f"{path.name}: Model(*get_init_inputs()) rejects get_inputs() shapes: {_first_line(root)}; "
                        "fix the model's arguments or input shapes") from None
    _drop_identities(gm)
    _refuse_a_forward_that_reads_the_mode(model, defaults, inputs, gm, path)
    _follow_writes(gm)
    _fold_shape_numbers(gm, inputs)
    return Problem(
        name=path.stem,
        path=path,
        source=source,
        namespace=ns,
        init_args=init_args,
        gm=gm,
        input_shapes=[tuple(t.shape) for t in inputs],
        input_dtypes=[t.dtype for t in inputs],
        init_signature=init_signature(ns["Model"]),
    )
