"""The pointwise table, programs, derived backward and emitter (kgen/pointwise.py), and the normalization of
pointwise ops and DAG programs from traced models (kgen/ops.py). CPU only:

- every row's value and every VJP form of every operand against torch.autograd in float64, at random points,
  kinks, large and small magnitudes, infinities and NaN (the forms' torch references);
- the same CUDA expressions compiled for the host with g++ against the header and evaluated in float32 (the
  expressions themselves, not a restatement of them);
- derived backwards of random DAG programs (chains, diamonds, reused values, constants and parameters) against
  torch.autograd, in float64 through the references and in float32 through the emitted C++;
- emitted CUDA for random programs compiles with nvcc for sm_80 and sm_90;
- module / functional / method / operator forms normalize to the table's rows; traced models become programs.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import shutil
import string
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kgen import ops
from kgen.errors import KgenError, Unsupported
from kgen.pointwise import (ROWS, X, Names, Program, Ref, c_float, derive_backward, emit_backward, emit_forward, f32,
                            node, reference_backward, reference_forward)
from kgen.problem import load_problem
from tests.helpers import REPO, write_problem

HEADER_DIR = REPO / "templates" / "common"
CXX = shutil.which("g++")
NVCC = shutil.which("nvcc")
INF, NAN = math.inf, math.nan

# Parameter sets per row: PyTorch's defaults ({}) and values chosen to be exact in float32, so kinks at a bound are
# the same point in float32 and float64; negative slopes/alphas, an empty clamp range and infinite bounds included.
PARAMS: dict[str, list[dict]] = {
    "leaky_relu": [{}, {"negative_slope": 0.25}, {"negative_slope": -0.5}, {"negative_slope": 0.0}],
    "elu": [{}, {"alpha": 0.5}, {"alpha": -0.75}],
    "celu": [{}, {"alpha": 0.5}, {"alpha": -1.5}],
    "softplus": [{}, {"beta": 2.0, "threshold": 10.0}, {"beta": 0.5, "threshold": 3.0}],
    "hardtanh": [{}, {"min_val": -0.5, "max_val": 2.0}, {"min_val": 1.0, "max_val": 1.0}],
    "clamp": [{"min": -0.5, "max": 2.0}, {"min": 1.0, "max": -1.0}, {"min": -INF, "max": 0.75}],
    "clamp_min": [{"min": 0.25}, {"min": -2.0}],
    "clamp_max": [{"max": -0.25}, {"max": INF}],
    # every exponent PyTorch's kernel special-cases, then powf's (integral, fractional, 0 and 1)
    "pow": [{"exponent": e} for e in (2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.5, -3.0, 0.0, 1.0)],
    "softshrink": [{}, {"lambd": 1.0}, {"lambd": 0.0}],
    "hardshrink": [{}, {"lambd": 2.0}],
    "threshold": [{"threshold": 0.5, "value": 20.0}, {"threshold": -1.0, "value": -2.0}],
}
BASE_POINTS = [-1e6, -1e3, -50.0, -20.0, -6.0, -3.0, -2.5, -1.0, -0.5, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0, 2.5, 3.0,
               6.0, 20.0, 50.0, 1e3, 1e6]
SPECIAL = [INF, -INF, NAN]

# Where a form deliberately differs from PyTorch's composite formula: (row, operand, form) -> points to skip, why.
KNOWN = {
    ("softsign", 0, 0): (SPECIAL[:2], "PyTorch's composite gradient of x / (|x| + 1) is NaN at +-inf (inf/inf); "
                                      "the table's 1 / (1 + |x|)^2 gives the limit 0"),
}


def row_cases() -> list[tuple[str, dict]]:
    out = []
    for name, r in ROWS.items():
        for p in PARAMS.get(name, [{}]):
            out.append((name, p))
    return out


CASES = row_cases()
CASE_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for n, p in CASES]


def kinks(name: str, params: dict) -> list[float]:
    """Points where a row switches branch, for its parameters."""
    # a parameter is where the row switches branch, but pow's exponent is no point on the line
    out = [] if name == "pow" else [v for v in params.values() if math.isfinite(v)]
    if name == "softplus":
        p = ROWS[name].bind(params)
        out += [p["threshold"] / p["beta"]]
    if name in ("softshrink", "hardshrink"):
        lambd = ROWS[name].bind(params)["lambd"]
        out += [lambd, -lambd]
    return out


def points(name: str, params: dict, n_random: int = 40, seed: int = 0) -> torch.Tensor:
    """float32-exact sample points: fixed ones, kinks, random ones, infinities and NaN."""
    gen = torch.Generator().manual_seed(seed)
    rand = (torch.randn(n_random, generator=gen) * 3).tolist()
    vals = BASE_POINTS + kinks(name, params) + rand + SPECIAL
    return torch.tensor(vals, dtype=torch.float32).double()


def operands(name: str, params: dict, seed: int = 0) -> list[torch.Tensor]:
    """Sample operands: x for a unary row; for a binary one a and b with ties, zeros and specials in both slots."""
    x = points(name, params, seed=seed)
    if ROWS[name].arity == 1:
        return [x]
    gen = torch.Generator().manual_seed(seed + 1)
    b = x[torch.randperm(len(x), generator=gen)]
    b[::5] = x[::5]  # ties
    b[1::7] = 0.0
    return [x, b]


def fn_kwargs(name: str, params: dict) -> dict:
    return ROWS[name].bind(params)


def autograd_vjps(name: str, params: dict, xs: list[torch.Tensor], g: torch.Tensor) -> tuple[torch.Tensor, list]:
    ts = [t.clone().requires_grad_(True) for t in xs]
    y = ROWS[name].fn(*ts, **fn_kwargs(name, params))
    grads = torch.autograd.grad(y, ts, g, allow_unused=True)
    return y.detach(), list(grads)


def namespace(name: str, params: dict, xs: list[torch.Tensor], y: torch.Tensor, g: torch.Tensor) -> SimpleNamespace:
    r = ROWS[name]
    env = dict(r.consts(r.bind(params), exact=True))
    env.update(dict(zip(r.operands, xs)))
    return SimpleNamespace(y=y, g=g, **env)


def skipped(name: str, k: int, f: int, x: torch.Tensor) -> torch.Tensor:
    """Mask of the points a KNOWN difference excludes for (row, operand, form)."""
    pts, _ = KNOWN.get((name, k, f), ([], ""))
    mask = torch.zeros_like(x, dtype=torch.bool)
    for p in pts:
        mask |= x.isnan() if math.isnan(p) else (x == p)
    return mask


# ----------------------------------------------------------------------------------------------- the table itself


def test_every_issue_op_has_a_row():
    expected = {"relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "gelu_tanh", "silu", "mish", "softplus",
                "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid", "softsign", "abs", "exp", "clamp",
                "clamp_min", "clamp_max", "minimum", "maximum", "neg", "add", "sub", "mul", "div"}
    # beyond issue 9's list (not sin / cos: CUDA's sinf / cosf reduce large arguments through a local-memory frame)
    more = {"square", "pow", "sqrt", "rsqrt", "reciprocal", "log", "log1p", "expm1", "erf", "logsigmoid", "tanhshrink",
            "softshrink", "hardshrink", "threshold"}
    assert set(ROWS) == expected | more


@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_row_placeholders_and_header_functions(name, params):
    r = ROWS[name]
    consts = set(r.consts(r.bind(params)))
    assert len(r.grads) == r.arity and all(r.grads)
    header = (HEADER_DIR / "pointwise.cuh").read_text()
    texts = [r.value] + [f.c for forms in r.grads for f in forms]
    for i, text in enumerate(texts):
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        allowed = set(r.operands) | consts | ({"y", "g"} if i else set())
        assert fields <= allowed, (name, text, fields - allowed)
        for fn in re.findall(r"kgen::pw::(\w+)", text):
            assert re.search(rf"\b{fn}\b", header), f"{fn} is not in pointwise.cuh"
    for forms in r.grads:
        assert "g" in {f for f in re.findall(r"\{(\w+)\}", forms[0].c)}, "a VJP reads the incoming gradient"


@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_row_forms_match_autograd_float64(name, params):
    """Every VJP form of every operand (its torch reference, a restatement of the CUDA expression) against
    torch.autograd of the PyTorch op, at kinks, random points, huge/tiny magnitudes, infinities and NaN."""
    r = ROWS[name]
    xs = operands(name, params)
    gen = torch.Generator().manual_seed(7)
    g = torch.randn(xs[0].shape, generator=gen, dtype=torch.float64)
    y, expected = autograd_vjps(name, params, xs, g)
    bound = r.bind(params)
    for k, forms in enumerate(r.grads):
        for f, form in enumerate(forms):
            if not form.valid(bound):
                continue
            got = torch.broadcast_to(torch.as_tensor(form.ref(namespace(name, params, xs, y, g)), dtype=torch.float64), g.shape)
            keep = ~skipped(name, k, f, xs[0])
            torch.testing.assert_close(got[keep], expected[k][keep], rtol=1e-9, atol=1e-12, equal_nan=True,
                                       msg=lambda m: f"{name}{params} d/d{r.operands[k]} form {f} ({form.c}): {m}")


def test_kink_semantics_follow_pytorch():
    """The derivative at the kinks, spelled out (each is also covered by the sweep above)."""
    def d(name, x, **params):
        return autograd_vjps(name, params, [torch.tensor([x], dtype=torch.float64)], torch.ones(1, dtype=torch.float64))[1][0].item()
    assert d("relu", 0.0) == 0.0 and d("relu6", 0.0) == 0.0 and d("relu6", 6.0) == 0.0
    assert d("leaky_relu", 0.0, negative_slope=0.25) == 0.25
    assert d("hardtanh", -1.0) == 0.0 and d("hardtanh", 1.0) == 0.0
    assert d("clamp", -0.5, min=-0.5, max=2.0) == 1.0 and d("clamp", 2.0, min=-0.5, max=2.0) == 1.0
    assert d("clamp_min", 0.25, min=0.25) == 1.0 and d("clamp_max", -0.25, max=-0.25) == 1.0
    assert d("abs", 0.0) == 0.0
    assert d("hardswish", -3.0) == 0.0 and d("hardswish", 3.0) == 1.0  # x <= -3: 0; x < 3: x/3 + 1/2; else 1
    assert d("hardsigmoid", -3.0) == 0.0 and d("hardsigmoid", 3.0) == 0.0
    assert d("elu", 0.0, alpha=0.5) == 0.5 and d("celu", 0.0, alpha=0.5) == 1.0
    assert d("softplus", 5.0, beta=2.0, threshold=10.0) < 1.0 and d("softplus", 5.5, beta=2.0, threshold=10.0) == 1.0
    a, b = torch.tensor([0.5], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64)
    _, (ga, gb) = autograd_vjps("maximum", {}, [a, b], torch.ones(1, dtype=torch.float64))
    assert ga.item() == 0.5 and gb.item() == 0.5  # a tie splits the gradient (clamp passes it whole)
    # NaN: relu/hardtanh pass the gradient, clamp blocks it, values stay NaN (fmaxf alone would turn relu(NaN) to 0)
    assert d("relu", NAN) == 1.0 and d("hardtanh", NAN) == 1.0 and d("clamp", NAN, min=0.0, max=1.0) == 0.0


def test_bind_refuses_bad_parameters():
    with pytest.raises(ValueError, match="required"):
        node("clamp", X, min=0.0)
    with pytest.raises(ValueError, match="min_val"):
        node("hardtanh", X, min_val=2.0, max_val=1.0)
    with pytest.raises(ValueError, match="alpha"):
        node("celu", X, alpha=0.0)
    with pytest.raises(ValueError, match="unknown"):
        node("relu", X, inplace=True)
    with pytest.raises(ValueError, match="operand"):
        node("add", X)
    with pytest.raises(ValueError, match="fold"):
        Program((node("relu", Ref.const(1.0)),), Ref.node(0))
    with pytest.raises(ValueError, match="earlier"):
        Program((node("add", X, Ref.node(0)),), Ref.node(0))
    with pytest.raises(ValueError, match="scalar and per channel"):
        Program((node("add", X, Ref.param("p", "scalar")), node("mul", Ref.node(0), Ref.param("p", "channel"))), Ref.node(1))


def test_c_float_literals_are_exact_float32():
    assert c_float(0.1) == "0.1f" and c_float(1 / 6) == "0.16666667f" and c_float(-2.5) == "(-2.5f)"
    assert c_float(6) == "6.0f" and c_float(INF) == "INFINITY" and c_float(-INF) == "(-INFINITY)"
    assert c_float(1e-45) == "1e-45f" and c_float(-0.0) == "(-0.0f)"
    rng = random.Random(0)
    for _ in range(2000):
        v = f32(rng.uniform(-1, 1) * 10 ** rng.uniform(-38, 38))
        text = c_float(v).strip("()").rstrip("f")
        assert f32(float(text)) == v, (v, text)


# ----------------------------------------------------------------------------------------------- programs

CONSTS = [0.5, -1.5, 2.0, 3.0, 0.25, 6.0, -0.75]
UNARY = [n for n, r in ROWS.items() if r.arity == 1]
BINARY = [n for n, r in ROWS.items() if r.arity == 2]
# well-conditioned in float32 (for the float32 host tests): no division by a run-time value, no exp of exp, no ops
# defined only on part of the line (log, roots, reciprocals, negative powers)
SAFE_UNARY = [n for n in UNARY if n not in ("exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "pow")]


# rows whose value is NaN on part of the real line (finite operands): a later row's alternative gradient form may
# pass a gradient where autograd's first form gives NaN at those points
PARTIAL = ("log", "log1p", "sqrt", "rsqrt", "pow")


def random_program(rng: random.Random, n_nodes: int | None = None, safe: bool = False, whole_line: bool = False) -> Program:
    """A random program: chains and DAGs (values reused, diamonds), constants in either operand order, scalar and
    per-channel parameters, every row with random parameters (with whole_line, none of PARTIAL's rows)."""
    n_nodes = n_nodes or rng.randint(1, 7)
    values = [X]
    nodes = []
    n_params = 0
    for _ in range(n_nodes):
        src = values[-1] if rng.random() < 0.6 else rng.choice(values)
        if rng.random() < 0.55:
            name = rng.choice(SAFE_UNARY if safe else [n for n in UNARY if n not in PARTIAL] if whole_line else UNARY)
            nodes.append(node(name, src, **rng.choice(PARAMS.get(name, [{}]))))
        else:
            name = rng.choice(BINARY)
            roll = rng.random()
            if roll < 0.35:
                other = Ref.const(rng.choice(CONSTS))
            elif roll < 0.6:
                other = Ref.param(f"p{n_params}", rng.choice(["scalar", "channel"]))
                n_params += 1
            else:
                other = rng.choice(values)
            pair = (other, src) if rng.random() < 0.4 else (src, other)
            if safe and name == "div" and pair[1].kind in ("input", "node"):
                pair = (pair[1], pair[0]) if pair[0].kind != "const" else (src, Ref.const(rng.choice(CONSTS)))
                if pair[1].kind in ("input", "node"):
                    pair = (src, Ref.const(2.0))
            nodes.append(node(name, *pair))
        values.append(Ref.node(len(nodes) - 1))
    return Program(tuple(nodes), values[-1])


SHAPE = (2, 3, 4, 5)


def param_tensors(program: Program, seed: int, dtype=torch.float64) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for p in program.params:
        shape = () if p.broadcast == "scalar" else (SHAPE[1], 1, 1)
        mag = torch.rand(shape, generator=gen, dtype=torch.float64) * 1.5 + 0.5
        sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).double()
        out[p.name] = (mag * sign).float().to(dtype)
    return out


def autograd_program(program: Program, x: torch.Tensor, params: dict, g: torch.Tensor):
    """Output and gradients (input, each param) of the program built from the rows' PyTorch ops."""
    x = x.clone().requires_grad_(True)
    ps = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    vals = {X: x}
    for p in program.params:
        vals[p] = ps[p.name]
    for i, n in enumerate(program.nodes):
        if i not in program.live():
            continue
        args = [vals[a] if a.kind != "const" else torch.tensor(a.value, dtype=x.dtype) for a in n.args]
        vals[Ref.node(i)] = ROWS[n.op].fn(*args, **fn_kwargs(n.op, n.param_dict))
    y = vals[program.output]
    leaves = [x] + [ps[p.name] for p in program.params]
    grads = torch.autograd.grad(y, leaves, g, allow_unused=True)
    return y.detach(), {X: grads[0], **{p: gr for p, gr in zip(program.params, grads[1:])}}


def check_program_float64(program: Program, seed: int, available=None) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(SHAPE, generator=gen) * 2).double()
    g = torch.randn(SHAPE, generator=gen).double()
    params = param_tensors(program, seed)
    y, expected = autograd_program(program, x, params, g)
    bwd = derive_backward(program, available)
    values = reference_forward(program, x, params)
    torch.testing.assert_close(values[program.output], y, rtol=1e-12, atol=1e-12, equal_nan=True)
    got = reference_backward(bwd, values, g)
    for ref, exp in expected.items():
        exp = torch.zeros_like(g if ref == X else params[ref.name]) if exp is None else exp
        mine = got.get(ref)
        mine = torch.zeros_like(exp) if mine is None else mine.sum_to_size(exp.shape) if ref != X else mine
        scale = 1 + exp.abs().nan_to_num(0, 0, 0).max().item()
        torch.testing.assert_close(mine, exp, rtol=1e-7, atol=1e-9 * scale, equal_nan=True,
                                   msg=lambda m: f"{program}\nd/d{ref}: {m}")


def hardswish_dag() -> Program:
    """x * clamp((x + 3) / 6, 0, 1): x used twice."""
    return Program((node("add", X, Ref.const(3.0)), node("div", Ref.node(0), Ref.const(6.0)),
                    node("clamp", Ref.node(1), min=0.0, max=1.0), node("mul", X, Ref.node(2))), Ref.node(3))


def diamond() -> Program:
    """sigmoid(x) and tanh(x) of one value, recombined, then reused with a per-channel parameter."""
    return Program((node("relu6", X), node("sigmoid", Ref.node(0)), node("tanh", Ref.node(0)),
                    node("mul", Ref.node(1), Ref.node(2)), node("sub", Ref.node(3), Ref.param("bias", "channel")),
                    node("maximum", Ref.node(4), Ref.node(0)), node("div", Ref.node(5), Ref.param("s", "scalar"))),
                   Ref.node(6))


FIXED = {"hardswish_dag": hardswish_dag(), "diamond": diamond(),
         "square": Program((node("mul", X, X),), Ref.node(0)),
         "max_self": Program((node("maximum", X, X), node("add", Ref.node(0), X)), Ref.node(1)),
         "identity": Program(())}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_programs_backward_matches_autograd(name):
    check_program_float64(FIXED[name], seed=1)


@pytest.mark.parametrize("seed", range(60))
def test_random_program_backward_matches_autograd(seed):
    check_program_float64(random_program(random.Random(seed)), seed)


def test_alternative_forms_match_autograd():
    """Backwards that may not read the input (y-forms where a row has them) or may read only some values."""
    used = 0
    for seed in range(400):  # enough draws to reach rows with a second form among the table's single-form ones
        program = random_program(random.Random(1000 + seed), whole_line=True)
        everything = {Ref.node(i) for i in range(len(program.nodes))}
        for available in (everything, everything - {Ref.node(i) for i in range(0, len(program.nodes), 2)} | {X}):
            try:
                bwd = derive_backward(program, available)
            except ValueError:
                continue
            assert all(r.kind == "param" or r in available for r in bwd.needs)
            used += sum(t.form != 0 for a in bwd.adjoints for t in a.terms)
            check_program_float64(program, seed, available)
    assert used > 50


def test_derived_backward_structure():
    bwd = derive_backward(hardswish_dag())
    assert [str(a.target) for a in bwd.adjoints] == ["v2", "v1", "v0", "x"]
    assert [(t.node, t.operand) for t in bwd.input_grad.terms] == [(0, 0), (3, 0)]  # in node order
    assert bwd.needs == {X, Ref.node(1), Ref.node(2)}
    relu_only = Program((node("relu", X),), Ref.node(0))
    assert derive_backward(relu_only).needs == {Ref.node(0)}  # threshold_backward reads the output
    assert derive_backward(relu_only, available={X}).needs == {X}
    with pytest.raises(ValueError, match="no VJP form"):
        derive_backward(Program((node("gelu", X),), Ref.node(0)), available={Ref.node(0)})
    leaky = Program((node("leaky_relu", X, negative_slope=-0.5),), Ref.node(0))
    with pytest.raises(ValueError):  # the output form is wrong for a negative slope
        derive_backward(leaky, available={Ref.node(0)})


def test_emitted_statements_read_well():
    names = Names(x="z", g="gy")
    assert emit_forward(hardswish_dag(), names).lines == (
        "const float v0 = z + 3.0f;  // add(x, 3.0)",
        "const float v1 = v0 / 6.0f;  // div(v0, 6.0)",
        "const float v2 = kgen::pw::clamp(v1, 0.0f, 1.0f);  // clamp(v1, min=0.0, max=1.0)",
        "const float v3 = z * v2;  // mul(x, v2)",
    )
    e = emit_backward(derive_backward(hardswish_dag()), names, recompute=False)
    assert e.lines == (
        "const float g2 = gy * z;  // d/dv2: mul.b",
        "const float g1 = (v1 >= 0.0f && v1 <= 1.0f) ? g2 : 0.0f;  // d/dv1: clamp.x",
        "const float g0 = g1 / 6.0f;  // d/dv0: div.a",
        "const float gx = (g0) + (gy * v2);  // d/dx: add.a, mul.a",
    )
    assert e.result == "gx"
    p = diamond()
    e = emit_backward(derive_backward(p), Names(params={"bias": "bias_c", "s": "s0"}, prefix="b_"))
    assert dict(e.param_grads) == {"bias": "b_g_bias", "s": "b_g_s"}
    assert e.lines == emit_backward(derive_backward(p), Names(params={"bias": "bias_c", "s": "s0"}, prefix="b_")).lines
    assert emit_backward(derive_backward(FIXED["identity"])).result == "g"


# ----------------------------------------------------------------------------------------------- the C++ itself


class HostProgram:
    """Cases (C++ loop bodies over float arrays) compiled once with g++ against pointwise.cuh and run on the CPU."""

    def __init__(self) -> None:
        self.cases: list[tuple[str, list[torch.Tensor], int]] = []

    def add(self, body: str, inputs: list[torch.Tensor], n_out: int) -> int:
        self.cases.append((body, [t.float().contiguous() for t in inputs], n_out))
        return len(self.cases) - 1

    def run(self, tmp: Path) -> list[list[torch.Tensor]]:
        fns, table = [], []
        for i, (body, ins, n_out) in enumerate(self.cases):
            fns.append(f"static void case{i}(const float* const* in, float* const* out, int n) {{\n"
                       f"  for (int i = 0; i < n; ++i) {{\n{body}\n  }}\n}}\n")
            table.append(f"  {{case{i}, {len(ins)}, {n_out}, {ins[0].numel()}}},")
        src = tmp / "host.cpp"
        src.write_text(
            '#include <cstdio>\n#include <vector>\n#include "pointwise.cuh"\n\n' + "".join(fns) +
            "struct Case { void (*fn)(const float* const*, float* const*, int); int n_in, n_out, n; };\n"
            "static const Case kCases[] = {\n" + "\n".join(table) + "\n};\n"
            "int main(int argc, char** argv) {\n"
            "  FILE* f = std::fopen(argv[1], \"rb\"); std::vector<float> in; float v;\n"
            "  while (std::fread(&v, 4, 1, f) == 1) in.push_back(v);\n  std::fclose(f);\n"
            "  std::vector<float> out; size_t at = 0;\n"
            "  for (const Case& c : kCases) {\n"
            "    std::vector<const float*> ip; for (int k = 0; k < c.n_in; ++k) ip.push_back(&in[at + k * (size_t)c.n]);\n"
            "    at += (size_t)c.n_in * c.n; std::vector<float> o((size_t)c.n_out * c.n); std::vector<float*> op;\n"
            "    for (int k = 0; k < c.n_out; ++k) op.push_back(&o[k * (size_t)c.n]);\n"
            "    c.fn(ip.data(), op.data(), c.n); out.insert(out.end(), o.begin(), o.end());\n  }\n"
            "  FILE* g = std::fopen(argv[2], \"wb\"); std::fwrite(out.data(), 4, out.size(), g); std::fclose(g);\n}\n")
        exe = tmp / "host"
        r = subprocess.run([CXX, "-std=c++17", "-O2", f"-I{HEADER_DIR}", str(src), "-o", str(exe)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
        blob = torch.cat([t.reshape(-1) for _, ins, _ in self.cases for t in ins])
        (tmp / "in.bin").write_bytes(struct.pack(f"<{blob.numel()}f", *blob.tolist()))
        subprocess.run([str(exe), str(tmp / "in.bin"), str(tmp / "out.bin")], check=True)
        flat = torch.frombuffer(bytearray((tmp / "out.bin").read_bytes()), dtype=torch.float32)
        results, at = [], 0
        for _, ins, n_out in self.cases:
            n = ins[0].numel()
            results.append([flat[at + k * n: at + (k + 1) * n].clone().reshape(ins[0].shape) for k in range(n_out)])
            at += n_out * n
        return results


def _forms(name: str, params: dict) -> list[tuple[int, int, Any]]:
    """(operand, form index, form) of every gradient form of the row valid for these parameters."""
    r = ROWS[name]
    return [(k, f, form) for k, forms in enumerate(r.grads) for f, form in enumerate(forms) if form.valid(r.bind(params))]


def _row_env(name: str, params: dict) -> dict[str, str]:
    r = ROWS[name]
    env = {k: c_float(v) for k, v in r.consts(r.bind(params)).items()}
    env.update({o: o for o in r.operands})
    return env


@pytest.mark.skipif(CXX is None, reason="g++ not on PATH")
def test_cuda_expressions_evaluated_in_float32_match_autograd(tmp_path):
    """Each row's value expression and every VJP form, compiled for the host against pointwise.cuh and run in
    float32, against torch.autograd in float64 (float32 rounding of the same inputs). The device's expf/erff/...
    differ from glibc's by a few ulp; the formulas and branches are what this checks."""
    host = HostProgram()
    plan = []
    for name, params in CASES:
        r = ROWS[name]
        xs = operands(name, params, seed=3)
        g = torch.randn(xs[0].shape, generator=torch.Generator().manual_seed(5), dtype=torch.float32).double()
        env = _row_env(name, params)
        loads = "".join(f"    const float {o} = in[{k + 1}][i];\n" for k, o in enumerate(r.operands))
        value = r.value.format(**env)
        forms = _forms(name, params)
        outs = "".join(f"    out[{j + 1}][i] = {form.c.format(**env, y='y', g='g')};\n" for j, (_, _, form) in enumerate(forms))
        body = f"    const float g = in[0][i];\n{loads}    const float y = {value};\n    out[0][i] = y;\n{outs}"
        plan.append((name, params, xs, g, forms, host.add(body, [g] + xs, 1 + len(forms))))
    results = host.run(tmp_path)
    for name, params, xs, g, forms, idx in plan:
        out = results[idx]
        y, expected = autograd_vjps(name, params, xs, g)
        torch.testing.assert_close(out[0].double(), y.float().double(), rtol=1e-5, atol=1e-6, equal_nan=True,
                                   msg=lambda m: f"{name}{params} value: {m}")
        for j, (k, f, form) in enumerate(forms):
            keep = ~skipped(name, k, f, xs[0])
            exp = expected[k].float().double()
            torch.testing.assert_close(out[j + 1].double()[keep], exp[keep], rtol=1e-5, atol=1e-6, equal_nan=True,
                                       msg=lambda m: f"{name}{params} d/d{ROWS[name].operands[k]} form {f}: {m}")


@pytest.mark.gpu
def test_rows_on_the_gpu_match_pytorch_cuda():
    """Each row's value and every gradient form in a CUDA kernel (the device's libm, as the generated kernels call it)
    against PyTorch's own CUDA kernels and autograd in float32 on the same points: the host test above checks the
    formulas, this one what the GPU makes of them (float32 math library, fast exp and division where rows use them)."""
    from torch.utils.cpp_extension import load_inline

    plan, kernels, decls = [], [], []
    for i, (name, params) in enumerate(CASES):
        r = ROWS[name]
        env = _row_env(name, params)
        forms = _forms(name, params)
        loads = "".join(f"  const float {o} = in[{k + 1} * n + i];\n" for k, o in enumerate(r.operands))
        outs = "".join(f"  out[{j + 1} * n + i] = {form.c.format(**env, y='y', g='g')};\n" for j, (_, _, form) in enumerate(forms))
        kernels.append(f"__global__ void row{i}(const float* in, float* out, int n) {{\n"
                       "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                       f"  const float g = in[i];\n{loads}  const float y = {r.value.format(**env)};\n  out[i] = y;\n{outs}}}\n"
                       f"void run{i}(torch::Tensor in, torch::Tensor out) {{\n"
                       "  const int n = (int)(out.size(1));\n"
                       f"  row{i}<<<(n + 127) / 128, 128, 0, c10::cuda::getCurrentCUDAStream()>>>(in.data_ptr<float>(), out.data_ptr<float>(), n);\n"
                       "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n}\n")
        decls.append(f"void run{i}(torch::Tensor in, torch::Tensor out);")
        plan.append((name, params, forms))
    source = "#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n#include <c10/cuda/CUDAException.h>\n" \
             '#include "pointwise.cuh"\n\n' + "\n".join(kernels)
    mod = load_inline(name="kgen_rows_" + hashlib.sha256(source.encode()).hexdigest()[:12], cpp_sources="\n".join(decls),
                      cuda_sources=source, functions=[f"run{i}" for i in range(len(plan))],
                      extra_include_paths=[str(HEADER_DIR)], extra_cuda_cflags=["-std=c++17"])
    for i, (name, params, forms) in enumerate(plan):
        xs = [t.float().cuda() for t in operands(name, params, seed=3)]
        g = torch.randn(xs[0].shape, generator=torch.Generator().manual_seed(5)).cuda()
        out = torch.full((1 + len(forms), xs[0].numel()), float("nan"), device="cuda")  # poisoned
        getattr(mod, f"run{i}")(torch.stack([g] + xs).contiguous(), out)
        ts = [t.clone().requires_grad_(True) for t in xs]
        y = ROWS[name].fn(*ts, **fn_kwargs(name, params))
        grads = torch.autograd.grad(y, ts, g, allow_unused=True)
        torch.testing.assert_close(out[0], y.detach(), rtol=1e-5, atol=1e-6, equal_nan=True,
                                   msg=lambda m: f"{name}{params} value on the GPU: {m}")
        for j, (k, f, _) in enumerate(forms):
            keep = ~skipped(name, k, f, xs[0].cpu()).cuda()
            torch.testing.assert_close(out[j + 1][keep], grads[k][keep], rtol=1e-5, atol=1e-6, equal_nan=True,
                                       msg=lambda m: f"{name}{params} d/d{ROWS[name].operands[k]} form {f} on the GPU: {m}")


def _program_case_body(program: Program, params: list[Ref]) -> str:
    names = Names(x="x", g="gy", params={p.name: f"p_{p.name}" for p in params})
    fwd = emit_forward(program, names)
    bwd = emit_backward(derive_backward(program), Names(x="x", g="gy", params=names.params, prefix="b_"))
    loads = "".join(f"    const float p_{p.name} = in[{2 + j}][i];\n" for j, p in enumerate(params))
    pg = "".join(f"    out[{2 + j}][i] = {dict(bwd.param_grads).get(p.name, '0.0f')};\n" for j, p in enumerate(params))
    return ("    const float x = in[0][i];\n    const float gy = in[1][i];\n" + loads +
            "".join(f"    {line}\n" for line in fwd.lines + bwd.lines) +
            f"    out[0][i] = {fwd.result};\n    out[1][i] = {bwd.result};\n" + pg)


@pytest.mark.skipif(CXX is None, reason="g++ not on PATH")
def test_emitted_programs_evaluated_in_float32_match_autograd(tmp_path):
    """Emitted forward + backward statements of random (well-conditioned) programs, run in float32 on the host."""
    host = HostProgram()
    plan = []
    programs = list(FIXED.values()) + [random_program(random.Random(500 + s), safe=True) for s in range(40)]
    for seed, program in enumerate(programs):
        gen = torch.Generator().manual_seed(seed)
        x = (torch.randn(SHAPE, generator=gen) * 2).float().double()
        g = torch.randn(SHAPE, generator=gen).float().double()
        params = param_tensors(program, seed)
        full = [torch.broadcast_to(params[p.name], SHAPE) for p in program.params]
        idx = host.add(_program_case_body(program, list(program.params)), [x, g] + full, 2 + len(full))
        plan.append((program, x, g, params, idx))
    results = host.run(tmp_path)
    for program, x, g, params, idx in plan:
        out = results[idx]
        y, expected = autograd_program(program, x, params, g)
        scale = lambda t: 1 + t.abs().nan_to_num(0, 0, 0).max().item()  # noqa: E731
        torch.testing.assert_close(out[0].double(), y, rtol=1e-4, atol=1e-5 * scale(y), equal_nan=True,
                                   msg=lambda m: f"{program} value: {m}")
        gx = expected[X] if expected[X] is not None else torch.zeros_like(x)
        torch.testing.assert_close(out[1].double(), gx, rtol=1e-4, atol=1e-5 * scale(gx), equal_nan=True,
                                   msg=lambda m: f"{program} d/dx: {m}")
        for j, p in enumerate(program.params):
            exp = expected[p] if expected[p] is not None else torch.zeros_like(params[p.name])
            mine = out[2 + j].double().sum_to_size(exp.shape)
            torch.testing.assert_close(mine, exp, rtol=1e-4, atol=1e-5 * scale(exp) * x.numel() ** 0.5, equal_nan=True,
                                       msg=lambda m: f"{program} d/d{p}: {m}")


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_emitted_cuda_compiles_for_sm80_and_sm90(tmp_path):
    """A __global__ kernel per program applies the emitted forward and backward (recomputing what it reads) to an
    array, per-channel and scalar parameters loaded and their gradients accumulated; nvcc builds it for sm_80 and
    sm_90."""
    programs = list(FIXED.values()) + [random_program(random.Random(900 + s)) for s in range(6)]
    programs.append(Program((node("clamp", X, min=-INF, max=0.75), node("clamp_max", Ref.node(0), max=INF)), Ref.node(1)))
    programs.append(Program(tuple(node(n, X, **PARAMS.get(n, [{}])[0]) for n in UNARY) +
                            tuple(node("add", Ref.node(i), Ref.node(i + 1)) for i in range(len(UNARY) - 1)),
                            Ref.node(2 * len(UNARY) - 2)))
    kernels = []
    for k, program in enumerate(programs):
        params = list(program.params)
        loads = "".join(f"  const float p_{p.name} = {p.name}[{'c' if p.broadcast == 'channel' else '0'}];\n" for p in params)
        names = {p.name: f"p_{p.name}" for p in params}
        fwd = emit_forward(program, Names(x="xv", g="gv", params=names))
        bwd = emit_backward(derive_backward(program), Names(x="xv", g="gv", params=names, prefix="b_"))
        args = "".join(f", const float* __restrict__ {p.name}, float* __restrict__ d_{p.name}" for p in params)
        acc = "".join(f"  atomicAdd(&d_{p.name}[{'c' if p.broadcast == 'channel' else '0'}], {v});\n"
                      for p, (_, v) in zip(params, bwd.param_grads))
        kernels.append(
            f"// {program}\n__global__ void program{k}(const float* __restrict__ x, const float* __restrict__ gy, "
            f"float* __restrict__ y, float* __restrict__ gx, int n, int C, int HW{args}) {{\n"
            "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
            "  const int c = (i / HW) % C;\n  (void)c;\n  const float xv = x[i];\n  const float gv = gy[i];\n" + loads +
            "".join(f"  {line}\n" for line in fwd.lines) + f"  y[i] = {fwd.result};\n" +
            "".join(f"  {line}\n" for line in bwd.lines) + f"  gx[i] = {bwd.result};\n" + acc + "}\n")
    src = tmp_path / "programs.cu"
    src.write_text('#include "pointwise.cuh"\n\n' + "\n".join(kernels))
    r = subprocess.run([NVCC, "-std=c++17", "-O3", f"-I{HEADER_DIR}", "-gencode=arch=compute_80,code=sm_80",
                        "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v", "-c", str(src), "-o", str(tmp_path / "p.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    for arch in ("sm_80", "sm_90"):
        assert f"for '{arch}'" in r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr[-4000:]


# ----------------------------------------------------------------------------------------------- normalization


def trace(forward: str, init: str = "", shape=(2, 4, 5, 5), inputs: int = 1):
    args = ", ".join(["x", "y", "z"][:inputs])
    src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
           "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           + "".join(f"        {line}\n" for line in (init.splitlines() or ["pass"]))
           + f"    def forward(self, {args}):\n"
           + "".join(f"        {line}\n" for line in forward.splitlines())
           + f"\ndef get_inputs():\n    return [{', '.join([f'torch.rand{shape}'] * inputs)}]\n"
           "def get_init_inputs():\n    return []\n")
    return load_problem(write_problem(src))


def last_op(forward: str, init: str = "") -> ops.Op:
    prob = trace(forward, init)
    out = next(n for n in prob.gm.graph.nodes if n.op == "output").args[0]
    return ops.normalize(out, prob.gm)


V = ops.Value
FORMS = [
    # (init, forward, kind, params)
    # (an op written in place runs on a computed value: one written into the model's input is refused at load)
    ("self.m = nn.ReLU(inplace=True)", "x = x * 2.0\nreturn self.m(x)", "relu", {}),
    ("", "return torch.relu(x)", "relu", {}),
    ("", "return x.relu()", "relu", {}),
    ("", "return F.relu(x)", "relu", {}),
    ("self.m = nn.ReLU6()", "return self.m(x)", "relu6", {}),
    ("", "return F.relu6(x)", "relu6", {}),
    ("self.m = nn.LeakyReLU(0.1)", "return self.m(x)", "leaky_relu", {"negative_slope": 0.1}),
    ("", "return F.leaky_relu(x, 0.2)", "leaky_relu", {"negative_slope": 0.2}),
    ("", "return F.leaky_relu(x)", "leaky_relu", {"negative_slope": 0.01}),
    ("self.m = nn.ELU(alpha=0.5)", "return self.m(x)", "elu", {"alpha": 0.5}),
    ("", "return F.elu(x)", "elu", {"alpha": 1.0}),
    ("self.m = nn.SELU()", "return self.m(x)", "selu", {}),
    ("", "return torch.selu(x)", "selu", {}),
    ("self.m = nn.CELU(0.7)", "return self.m(x)", "celu", {"alpha": 0.7}),
    ("", "return F.celu(x, alpha=2.0)", "celu", {"alpha": 2.0}),
    ("self.m = nn.GELU(approximate='tanh')", "return self.m(x)", "gelu", {"approximate": "tanh"}),
    ("", "return F.gelu(x)", "gelu", {"approximate": "none"}),
    ("self.m = nn.SiLU()", "return self.m(x)", "silu", {}),
    ("", "return F.silu(x)", "silu", {}),
    ("self.m = nn.Mish()", "return self.m(x)", "mish", {}),
    ("", "return F.mish(x)", "mish", {}),
    ("self.m = nn.Softplus(beta=2, threshold=10)", "return self.m(x)", "softplus", {"beta": 2.0, "threshold": 10.0}),
    ("", "return F.softplus(x)", "softplus", {"beta": 1.0, "threshold": 20.0}),
    ("self.m = nn.Sigmoid()", "return self.m(x)", "sigmoid", {}),
    ("", "return torch.sigmoid(x)", "sigmoid", {}),
    ("", "return F.sigmoid(x)", "sigmoid", {}),
    ("", "return torch.special.expit(x)", "sigmoid", {}),
    ("self.m = nn.Tanh()", "return self.m(x)", "tanh", {}),
    ("", "return x.tanh()", "tanh", {}),
    ("self.m = nn.Hardtanh(-2, 2)", "return self.m(x)", "hardtanh", {"min_val": -2.0, "max_val": 2.0}),
    ("", "return F.hardtanh(x, min_val=-0.5)", "hardtanh", {"min_val": -0.5, "max_val": 1.0}),
    ("self.m = nn.Hardswish()", "return self.m(x)", "hardswish", {}),
    ("", "return F.hardswish(x)", "hardswish", {}),
    ("self.m = nn.Hardsigmoid()", "return self.m(x)", "hardsigmoid", {}),
    ("", "return F.hardsigmoid(x)", "hardsigmoid", {}),
    ("self.m = nn.Softsign()", "return self.m(x)", "softsign", {}),
    ("", "return F.softsign(x)", "softsign", {}),
    ("", "return torch.abs(x)", "abs", {}),
    ("", "return x.abs()", "abs", {}),
    ("", "return torch.exp(x)", "exp", {}),
    ("", "return x.exp()", "exp", {}),
    ("", "return -x", "neg", {}),
    ("", "return torch.neg(x)", "neg", {}),
    ("", "return torch.clamp(x, 0, 1)", "clamp", {"min": 0.0, "max": 1.0}),
    ("", "return torch.clamp(x, min=0.5)", "clamp_min", {"min": 0.5}),
    ("", "return torch.clamp(x, max=2)", "clamp_max", {"max": 2.0}),
    ("", "return x.clamp_min(0.1)", "clamp_min", {"min": 0.1}),
    ("", "return torch.clamp_max(x, 3)", "clamp_max", {"max": 3.0}),
    ("", "return x.clip(-1, 1)", "clamp", {"min": -1.0, "max": 1.0}),
    ("", "return torch.clip(x, max=2)", "clamp_max", {"max": 2.0}),
    ("", "return x + 1.5", "add", {"a": V("x"), "b": 1.5}),
    ("", "return 2 - x", "sub", {"a": 2.0, "b": V("x")}),
    ("", "return x - 2", "sub", {"a": V("x"), "b": 2.0}),
    ("", "return x / 4", "div", {"a": V("x"), "b": 4.0}),
    ("", "return 3 / x", "div", {"a": 3.0, "b": V("x")}),
    ("", "return x * 2", "mul", {"a": V("x"), "b": 2.0}),
    ("", "return torch.add(x, 0.5)", "add", {"a": V("x"), "b": 0.5}),
    ("", "return torch.rsub(x, 1.0)", "sub", {"a": 1.0, "b": V("x")}),
    ("", "return x.sub(2)", "sub", {"a": V("x"), "b": 2.0}),
    ("", "return torch.mul(x, x)", "mul", {"a": V("x"), "b": V("x")}),
    ("", "return torch.minimum(x, torch.tensor(0.5))", "minimum", {"a": V("x"), "b": 0.5}),
    ("", "return torch.max(x, torch.tensor(0.25))", "maximum", {"a": V("x"), "b": 0.25}),
    ("", "return x.maximum(torch.tensor(1.0))", "maximum", {"a": V("x"), "b": 1.0}),
    ("self.w = nn.Parameter(torch.ones(4, 1, 1))", "return x * self.w", "mul", {"a": V("x"), "b": Ref.param("w", "channel")}),
    ("self.w = nn.Parameter(torch.ones(1, 4, 1, 1))", "return self.w + x", "add", {"a": Ref.param("w", "channel"), "b": V("x")}),
    ("self.register_buffer('s', torch.tensor(2.0))", "return x / self.s", "div", {"a": V("x"), "b": Ref.param("s", "scalar")}),
    ("self.w = nn.Parameter(torch.ones(1))", "return x - self.w", "sub", {"a": V("x"), "b": Ref.param("w", "scalar")}),
    # the rows beyond issue 9's list
    ("", "return torch.square(x)", "square", {}),
    ("", "return x ** 2", "pow", {"exponent": 2.0}),
    ("", "return x.pow(0.5)", "pow", {"exponent": 0.5}),
    ("", "return torch.pow(x, -1)", "pow", {"exponent": -1.0}),
    ("", "return x.sqrt()", "sqrt", {}),
    ("", "return torch.rsqrt(x)", "rsqrt", {}),
    ("", "return x.reciprocal()", "reciprocal", {}),
    ("", "return torch.log(x)", "log", {}),
    ("", "return torch.special.log1p(x)", "log1p", {}),
    ("", "return x.expm1()", "expm1", {}),
    ("", "return torch.special.erf(x)", "erf", {}),
    ("self.m = nn.LogSigmoid()", "return self.m(x)", "logsigmoid", {}),
    ("", "return F.tanhshrink(x)", "tanhshrink", {}),
    ("self.m = nn.Softshrink(0.3)", "return self.m(x)", "softshrink", {"lambd": 0.3}),
    ("", "return F.hardshrink(x)", "hardshrink", {"lambd": 0.5}),
    ("self.m = nn.Threshold(0.1, 2.0)", "return self.m(x)", "threshold", {"threshold": 0.1, "value": 2.0}),
    ("", "return F.threshold(x, -1, 0.5)", "threshold", {"threshold": -1.0, "value": 0.5}),
]


@pytest.mark.parametrize("init,forward,kind,params", FORMS,
                         ids=[f[0].split("= ", 1)[1] if "self.m(" in f[1] else f[1].replace("return ", "") for f in FORMS])
def test_forms_normalize_to_rows(init, forward, kind, params):
    op = last_op(forward, init)
    assert (op.kind, op.params) == (kind, params)
    assert op.inplace == ("inplace=True" in init)


@pytest.mark.parametrize("init,forward,message", [
    ("", "return torch.add(x, 1, alpha=2)", "alpha=2"),
    ("", "return torch.div(x, 2, rounding_mode='floor')", "rounding_mode"),
    ("self.w = nn.Parameter(torch.ones(5, 5))", "return x * self.w", "other than the channel dim"),
    ("self.w = nn.Parameter(torch.ones(1, 1, 1, 1, 1))", "return x * self.w", "does not broadcast"),
    ("self.register_buffer('t', torch.tensor(0.5))", "return torch.clamp(x, min=self.t)", "computed at run time"),
    ("self.register_buffer('w', torch.ones(4, 1, 1, dtype=torch.float64))", "return x * self.w", "float32"),
])
def test_refusals_name_the_reason(init, forward, message):
    with pytest.raises(Unsupported, match=message):
        last_op(forward, init)


def test_max_with_a_dim_is_not_pointwise():
    assert last_op("return torch.max(x, 1)[0]").kind == "getitem"
    prob = trace("return torch.max(x, 1)[0]")
    mx = next(n for n in prob.gm.graph.nodes if n.op == "call_function" and n.target is torch.max)
    op = ops.normalize(mx, prob.gm)
    assert (op.kind, op.params["dims"], op.params["keepdim"]) == ("max_dim", (1,), False)  # a reduction


def test_chain_kinds_unchanged_for_the_existing_families():
    prob = trace("return torch.sigmoid(x).sum(dim=[1, 2, 3])")
    assert [o.kind for o in ops.chain(prob)] == ["sigmoid", "sum"]


# ----------------------------------------------------------------------------------------------- graph -> program

DAG_INIT = "self.bias = nn.Parameter(torch.randn(4, 1, 1))\nself.register_buffer('s', torch.tensor(0.5))\nself.act = nn.LeakyReLU(0.1)"
DAG_FORWARD = ("h = x * torch.clamp((x + 3) / 6, 0, 1)\nh = self.act(h) + self.bias\n"
               "h = torch.maximum(h, torch.tensor(0.25)) - self.s\nreturn 1 - F.gelu(h, approximate='tanh') * x")


def test_model_program_matches_the_model_values_and_gradients():
    prob = trace(DAG_FORWARD, DAG_INIT)
    program = ops.model_program(prob)
    assert str(program) == ("v0 = add(x, 3.0); v1 = mul(v0, 0.1666666716337204); v2 = clamp(v1, min=0.0, max=1.0); "
                            "v3 = mul(x, v2); v4 = leaky_relu(v3, negative_slope=0.1); v5 = add(v4, bias[c]); "
                            "v6 = maximum(v5, 0.25); v7 = sub(v6, s[0]); v8 = gelu_tanh(v7); v9 = mul(v8, x); "
                            "v10 = sub(1.0, v9); -> v10")
    torch.manual_seed(0)
    model = prob.namespace["Model"]().double()
    x = (torch.randn(2, 4, 5, 5) * 3).double().requires_grad_(True)
    g = torch.randn(2, 4, 5, 5).double()
    y = model(x)
    gx, gbias = torch.autograd.grad(y, [x, model.bias], g)
    params = {"bias": model.bias.detach(), "s": model.s}
    values = reference_forward(program, x.detach(), params)
    torch.testing.assert_close(values[program.output], y.detach(), rtol=1e-6, atol=1e-6)
    grads = reference_backward(derive_backward(program), values, g)
    torch.testing.assert_close(grads[X], gx, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grads[Ref.param("bias", "channel")].sum_to_size(4, 1, 1), gbias, rtol=1e-6, atol=1e-6)


def test_division_by_a_constant_is_pytorch_cuda_reciprocal_multiplication():
    program = ops.model_program(trace("return x / 3"))
    (n,) = program.nodes
    assert n.op == "mul" and n.args[1].value == float(torch.tensor(1.0) / torch.tensor(3.0))
    assert ops.model_program(trace("return 3 / x")).nodes[0].op == "div"


def test_pointwise_end_finds_a_conv_epilogue():
    prob = trace("h = self.conv(x)\nh = F.relu(h) + self.b\nh = h * torch.sigmoid(h)\nreturn F.avg_pool2d(h, 2).sum()",
                 "self.conv = nn.Conv2d(4, 6, 3)\nself.b = nn.Parameter(torch.zeros(6, 1, 1))", )
    conv = next(n for n in prob.gm.graph.nodes if n.op == "call_module")
    end = ops.pointwise_end(prob.gm, conv)
    assert end.name == "mul"
    program = ops.pointwise_program(prob.gm, conv, end)
    assert [n.op for n in program.nodes] == ["relu", "add", "sigmoid", "mul"]
    assert program.params == (Ref.param("b", "channel"),)
    assert ops.pointwise_end(prob.gm, end) is end


@pytest.mark.parametrize("forward,inputs,message", [
    ("h = torch.relu(x)\nreturn h + h.mean()", 1, "not a pointwise op"),
    ("return F.avg_pool2d(torch.relu(x), 2)", 1, "not a pointwise op"),
    ("h = torch.relu(x)\nreturn h * y", 2, "inputs"),
])
def test_program_refusals(forward, inputs, message):
    with pytest.raises(Unsupported, match=message):
        ops.model_program(trace(forward, inputs=inputs))


def test_program_follows_writes_in_place():
    """A value written in place reads as the written value after the write, through every alias (kgen.problem's
    _follow_writes): t.relu_() makes t, h and the alias a the relu; a read before the write keeps the old value."""
    program = ops.model_program(trace("t = x * 2.0\nb = t + 1.0\na = t\nh = t.relu_()\nreturn h + a * b"))
    assert [n.op for n in program.nodes] == ["mul", "add", "relu", "mul", "add"]
    _, b, relu, prod, out = program.nodes
    assert b.args == (Ref.node(0), Ref.const(1.0)) and relu.args == (Ref.node(0),)
    assert prod.args == (Ref.node(2), Ref.node(1)) and out.args == (Ref.node(2), Ref.node(3))
    with pytest.raises(KgenError, match="writes in place into the model's input x"):
        trace("h = x.relu_()\nreturn h + x")


def test_program_refuses_values_from_outside_and_escaping_intermediates():
    prob = trace("h = torch.relu(x) * y\nreturn h", inputs=2)
    x, y = [n for n in prob.gm.graph.nodes if n.op == "placeholder"]
    out = next(n for n in prob.gm.graph.nodes if n.op == "output").args[0]
    with pytest.raises(Unsupported, match="outside the pointwise program"):
        ops.pointwise_program(prob.gm, x, out)
    prob = trace("h = torch.relu(x)\nk = torch.sigmoid(h)\nreturn k + F.avg_pool2d(h, 1)")
    h = next(n for n in prob.gm.graph.nodes if n.name == "relu")
    k = next(n for n in prob.gm.graph.nodes if n.name == "sigmoid")
    assert [n.op for n in ops.pointwise_program(prob.gm, h, k).nodes] == ["sigmoid"]
    x = next(n for n in prob.gm.graph.nodes if n.op == "placeholder")
    with pytest.raises(Unsupported, match="also used outside"):
        ops.pointwise_program(prob.gm, x, k)
