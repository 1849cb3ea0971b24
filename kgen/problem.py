"""Stage 1: load a KernelBench-style problem file and trace its Model on the meta device.

The problem file defines ``Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``. We exec it, build
``Model(*get_init_inputs())`` on the meta device, trace it with torch.fx, and propagate shapes with inputs made by
``get_inputs()`` under the meta device too: no input is ever materialized (one bundled input is 17 GB).
"""

from __future__ import annotations

import ast
import linecache
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp
from torch.overrides import TorchFunctionMode

from kgen.errors import KgenError

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


class _Tracer(fx.Tracer):
    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True


# torch.fx's tracer patches torch.nn.Module.__call__ for the whole process while it traces, so a problem traced in one
# thread broke another thread's shape propagation ("module is not installed as a submodule"): one load at a time.
_TRACE_LOCK = threading.Lock()


# Ops that return their input's values, dropped from the traced graph so that no family has to know them: nn.Identity,
# dropout of any kind with p = 0 (with p > 0 it draws random masks in training mode and stays, to be refused by name),
# .contiguous() (it returns its input when that is contiguous, and the same values otherwise), and a cast to the dtype
# a value already has
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
    if node.op == "call_method" and node.target in _CASTS and not set(node.kwargs) - {"dtype", "non_blocking"}:
        # a cast to the dtype it already has (x.float() on float32, x.to(x.dtype)): the same values
        got, src = node.meta.get("tensor_meta"), node.args[0].meta.get("tensor_meta")
        return got is not None and src is not None and got.dtype == src.dtype and \
            all(isinstance(a, torch.dtype) or _reads_dtype(a) for a in [*node.args[1:], *node.kwargs.values()]
                if not isinstance(a, bool))
    return node.op == "call_method" and node.target == "contiguous" and len(node.args) == 1 and not node.kwargs


_CASTS = {"float", "half", "bfloat16", "double", "to", "type"}


def _reads_dtype(a: Any) -> bool:
    """Whether a is a traced `t.dtype`."""
    return isinstance(a, fx.Node) and a.op == "call_function" and a.target is getattr and a.args[1:] == ("dtype",)


def _drop_identities(gm: fx.GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if node.args and isinstance(node.args[0], fx.Node) and _is_identity(node, gm):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
    for node in list(gm.graph.nodes):  # attribute reads left without a user (the x.dtype of a dropped cast)
        if node.op == "call_function" and node.target is getattr and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()


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
        gm = fx.GraphModule(model, _Tracer().trace(model, concrete_args=defaults), "Model")
        _drop_specialization_guards(gm, len(inputs))
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
