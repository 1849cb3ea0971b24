"""Pointwise ops as data: one table of rows, the op program built from them, its derived backward, and the emitter
that prints both as CUDA statements.

**The table** (``ROWS``). One row per op: its operands (``x``, or ``a`` and ``b`` for a binary op), its compile-time
parameters with PyTorch's defaults, the float32 CUDA expression of its value, and for each operand one or more
*forms* of its vector-Jacobian product: a CUDA expression of the gradient flowing to that operand, written over the
incoming gradient ``{g}``, the operands and/or the op's output ``{y}``. A form's placeholders say what it reads, so a
backward can use the one whose inputs it has (``Form.needs``); the first form is the one PyTorch's autograd uses.
Every expression and form carries a torch reference (``Row.fn`` is the PyTorch op itself; ``Form.ref`` restates
the CUDA expression with torch ops), and ``tests/test_pointwise.py`` checks each one against ``torch.autograd``.
The CUDA expressions call the helpers in ``templates/common/pointwise.cuh``.

Semantics follow PyTorch's CUDA kernels, kinks included: relu'(0) = 0; hardtanh/relu6 pass no gradient at their
bounds while clamp passes it at its bounds; maximum/minimum split it at ties; clamp, relu, hardtanh and maximum
propagate NaN (``fmaxf`` alone would not).

**The program** (``Program``): SSA nodes in order, each naming a row, its parameters and operand references
(``Ref``) to the program input, an earlier node, a float32 constant, or a run-time parameter tensor (a scalar or
one value per channel). Any node may use any earlier value, so ``x * clamp((x + 3) / 6, 0, 1)`` is one program.

**The backward** (``derive_backward``): reverse accumulation of adjoints over the DAG; each node's gradient is the
sum, in a fixed order, of one VJP term per use. **The emitter** (``emit_forward``, ``emit_backward``) prints one
``const float`` statement per node with named temporaries, for a template to embed.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass, field
from fractions import Fraction
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from kgen.render import cfloat

# ----------------------------------------------------------------------------------------------- float32 constants


def f32(v: float) -> float:
    """v rounded to the nearest float32 (as PyTorch casts a Python scalar for a float32 op)."""
    return float(torch.tensor(float(v), dtype=torch.float64).to(torch.float32))


def f32_div(a: float, b: float) -> float:
    """float32 a / b."""
    return float(torch.tensor(f32(a), dtype=torch.float32) / torch.tensor(f32(b), dtype=torch.float32))


def f32_mul(a: float, b: float) -> float:
    """float32 a * b, as a CUDA kernel multiplies two float constants."""
    return float(torch.tensor(f32(a), dtype=torch.float32) * torch.tensor(f32(b), dtype=torch.float32))


def _f32_decimal(v: float) -> str:
    """The shortest decimal whose nearest float32 is v (a float32 value), so 0.1f prints as 0.1, not as the double
    0.10000000149011612; falls back to the double's repr, which is exact for a float32 value."""
    t = torch.tensor([v], dtype=torch.float32)
    up = Fraction(float(torch.nextafter(t, torch.tensor([math.inf])).item()))
    down = Fraction(float(torch.nextafter(t, torch.tensor([-math.inf])).item()))
    exact = Fraction(v)
    for digits in range(1, 10):
        text = f"{v:.{digits}g}"
        d = Fraction(text)
        if abs(d - exact) < abs(d - up) and abs(d - exact) < abs(d - down):
            return text
    return repr(v)


def c_float(v: float) -> str:
    """A float32 constant as an exact C float literal (v is first rounded to float32, as PyTorch casts a scalar
    for a float32 op): the shortest decimal that parses back to it (``kgen.render.cfloat``'s format), negative
    ones parenthesized, infinities as INFINITY. NaN is refused."""
    v = f32(v)
    if math.isnan(v):
        raise ValueError("NaN constant in a pointwise program")
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    text = cfloat(float(_f32_decimal(v))) if v != 0 else cfloat(v)
    return f"({text})" if text.startswith("-") else text


# ----------------------------------------------------------------------------------------------- the table

OPERAND_NAMES = ("x", "a", "b")


def _fields(text: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(text) if f]


@dataclass(frozen=True)
class Form:
    """One way to write the gradient flowing to an operand: ``c`` is a CUDA expression over ``{g}``, operands,
    ``{y}`` and the row's constants; ``ref`` computes the same with torch ops from a namespace of those names;
    ``when`` (optional) says for which parameters the form is valid."""

    c: str
    ref: Callable[[SimpleNamespace], torch.Tensor]
    when: Callable[[Mapping[str, Any]], bool] | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        """The forward values the form reads: operand names and/or 'y', in order of first use."""
        out: list[str] = []
        for f in _fields(self.c):
            if (f in OPERAND_NAMES or f == "y") and f not in out:
                out.append(f)
        return tuple(out)

    def valid(self, params: Mapping[str, Any]) -> bool:
        return self.when is None or bool(self.when(params))


@dataclass(frozen=True)
class Row:
    """One pointwise op. ``params`` lists its compile-time parameters in PyTorch's order with PyTorch's defaults
    (``REQUIRED`` where it has none); ``constants`` turns parameter values into the float32 constants the
    expressions name (default: each parameter rounded to float32; ``exact``: the double values a float64 kernel
    would use); ``check`` returns why parameters are refused."""

    name: str
    operands: tuple[str, ...]
    value: str
    grads: tuple[tuple[Form, ...], ...]
    fn: Callable[..., torch.Tensor]  # the PyTorch op: fn(*operand tensors, **params)
    params: tuple[tuple[str, Any], ...] = ()
    constants: Callable[[Mapping[str, Any], bool], dict[str, float]] | None = None
    check: Callable[[Mapping[str, Any]], str | None] | None = None

    @property
    def arity(self) -> int:
        return len(self.operands)

    def bind(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The row's parameters with defaults filled in, in the row's order; ValueError for unknown, missing or
        refused parameters."""
        given = dict(params or {})
        unknown = sorted(set(given) - {n for n, _ in self.params})
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}")
        out = {}
        for n, default in self.params:
            v = given.get(n, default)
            if v is REQUIRED:
                raise ValueError(f"{self.name}: parameter {n} is required")
            if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(float(v)):
                raise ValueError(f"{self.name}: parameter {n}={v!r} is not a number")
            out[n] = float(v)
        reason = self.check(out) if self.check else None
        if reason:
            raise ValueError(f"{self.name}: {reason}")
        return out

    def consts(self, params: Mapping[str, Any], exact: bool = False) -> dict[str, float]:
        """The constants the expressions name, for bound parameters: float32 as the CUDA expressions use them, or
        with ``exact`` the double values PyTorch's float64 kernels use (the float64 references)."""
        if self.constants:
            return self.constants(params, exact)
        return {n: float(v) if exact else f32(v) for n, v in params.items()}


REQUIRED = object()
ONE_SIXTH_F32 = f32_div(1.0, 6.0)  # hardsigmoid's backward multiplies by the float 1/6, even in PyTorch's double kernel

_w = torch.where
PW = "kgen::pw::"  # the namespace of templates/common/pointwise.cuh


def _unary(name: str, value: str, grads: tuple[Form, ...], fn: Callable, **kw: Any) -> Row:
    return Row(name, ("x",), value, (grads,), fn, **kw)


def _binary(name: str, value: str, grad_a: tuple[Form, ...], grad_b: tuple[Form, ...], fn: Callable) -> Row:
    return Row(name, ("a", "b"), value, (grad_a, grad_b), fn)


# SELU's constants (aten/src/ATen/native/Activation.cpp); selu is elu(x, alpha, scale) with float32 coefficients
# negcoef = float(alpha) * float(scale) and poscoef = float(scale).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946

# gelu's constants as PyTorch's CUDA kernels write them (double expressions rounded to float).
GELU_K_ALPHA = 0.70710678118654752440  # M_SQRT1_2
GELU_K_BETA = 1.12837916709551257390 * 0.70710678118654752440 * 0.5  # M_2_SQRTPI * M_SQRT1_2 * 0.5
GELU_TANH_K_BETA = 1.41421356237309504880 * 1.12837916709551257390 * 0.5  # M_SQRT2 * M_2_SQRTPI * 0.5
GELU_TANH_K_KAPPA = 0.044715


def _gelu_vjp(v: SimpleNamespace) -> torch.Tensor:
    cdf = 0.5 * (1 + torch.erf(v.x * GELU_K_ALPHA))
    pdf = torch.exp(-0.5 * v.x * v.x) * GELU_K_BETA
    return v.g * (cdf + v.x * pdf)


def _gelu_tanh_vjp(v: SimpleNamespace) -> torch.Tensor:
    x_sq = v.x * v.x
    t = torch.tanh(GELU_TANH_K_BETA * (v.x + GELU_TANH_K_KAPPA * x_sq * v.x))
    left_derivative = 0.5 * (1 + t)
    right_derivative = 0.5 * v.x * (1 - t * t) * GELU_TANH_K_BETA * (1 + 3 * GELU_TANH_K_KAPPA * x_sq)
    return v.g * (left_derivative + right_derivative)


def _silu_vjp(v: SimpleNamespace) -> torch.Tensor:
    s = 1 / (1 + torch.exp(-v.x))
    return v.g * s * (1 + v.x * (1 - s))


def _mish_vjp(v: SimpleNamespace) -> torch.Tensor:
    e = torch.exp(torch.clamp(v.x, max=20.0))
    n = e * (e + 2)
    d = n + 2
    return _w(v.x > 20, v.g + v.x * 0, v.g * (n / d + v.x * (e / (1 + e)) * (4 * (n + 1) / (d * d))))


def _softplus_vjp(v: SimpleNamespace) -> torch.Tensor:
    z = torch.exp(v.x * v.beta)
    return _w(v.x * v.beta > v.threshold, v.g, v.g * z / (z + 1))


def _sigmoid_x_vjp(v: SimpleNamespace) -> torch.Tensor:
    s = 1 / (1 + torch.exp(-v.x))
    return v.g * (1 - s) * s


def _max_vjp(mine: torch.Tensor, other: torch.Tensor, g: torch.Tensor, loses: torch.Tensor) -> torch.Tensor:
    """PyTorch's maximum/minimum gradient: half at a tie, none where this operand loses (NaN: both get it)."""
    return _w(loses, 0.0, _w(mine == other, g * 0.5, g))


def _celu_consts(p: Mapping[str, Any], exact: bool) -> dict[str, float]:
    # celu(x, alpha) = elu(x, alpha, scale=1, input_scale=1/alpha), 1/alpha taken in double (Activation.cpp)
    rnd = float if exact else f32
    return {"alpha": rnd(p["alpha"]), "inv_alpha": rnd(1.0 / p["alpha"])}


def _selu_consts(_: Mapping[str, Any], exact: bool) -> dict[str, float]:
    if exact:
        return {"scale": SELU_SCALE, "negcoef": SELU_ALPHA * SELU_SCALE}
    return {"scale": f32(SELU_SCALE), "negcoef": f32_mul(SELU_ALPHA, SELU_SCALE)}


def _pow_consts(p: Mapping[str, Any], exact: bool) -> dict[str, float]:
    # the exponent and exponent - 1 as PyTorch's Scalars: the difference taken in double, then cast for a float kernel
    rnd = float if exact else f32
    return {"exponent": rnd(p["exponent"]), "exponent_m1": rnd(float(p["exponent"]) - 1.0)}


def _logsigmoid_vjp(v: SimpleNamespace) -> torch.Tensor:
    neg = v.x < 0
    z = torch.exp(-v.x.abs())
    return v.g * (_w(neg, 1.0, 0.0) - _w(neg, 1.0, -1.0) * (z / (1 + z)))


def _elu_ref(v: SimpleNamespace, negcoef: float, poscoef: float = 1.0, inscale: float = 1.0) -> torch.Tensor:
    return _w(v.x <= 0, v.g * inscale * negcoef * torch.exp(v.x * inscale), v.g * poscoef)


def _elu_y_ref(v: SimpleNamespace, negcoef: float, poscoef: float = 1.0, inscale: float = 1.0) -> torch.Tensor:
    return _w(v.y <= 0, v.g * inscale * (v.y + negcoef), v.g * poscoef)


ROW_LIST: tuple[Row, ...] = (
    # ---- activations
    _unary("relu", PW + "relu({x})", (
        Form("{y} <= 0.0f ? 0.0f : {g}", lambda v: _w(v.y <= 0, 0.0, v.g)),  # threshold_backward(grad, result, 0)
        Form("{x} <= 0.0f ? 0.0f : {g}", lambda v: _w(v.x <= 0, 0.0, v.g)),
    ), F.relu),
    _unary("relu6", PW + "clamp({x}, 0.0f, 6.0f)", (
        Form("({x} <= 0.0f || {x} >= 6.0f) ? 0.0f : {g}", lambda v: _w((v.x <= 0) | (v.x >= 6), 0.0, v.g)),
        Form("({y} <= 0.0f || {y} >= 6.0f) ? 0.0f : {g}", lambda v: _w((v.y <= 0) | (v.y >= 6), 0.0, v.g)),
    ), F.relu6),
    _unary("leaky_relu", "{x} > 0.0f ? {x} : {x} * {negative_slope}", (
        Form("{x} > 0.0f ? {g} : {g} * {negative_slope}", lambda v: _w(v.x > 0, v.g, v.g * v.negative_slope)),
        Form("{y} > 0.0f ? {g} : {g} * {negative_slope}", lambda v: _w(v.y > 0, v.g, v.g * v.negative_slope),
             when=lambda p: p["negative_slope"] >= 0),
    ), lambda x, negative_slope: F.leaky_relu(x, negative_slope), params=(("negative_slope", 0.01),)),
    _unary("elu", "{x} > 0.0f ? {x} : expm1f({x}) * {alpha}", (
        Form("{x} <= 0.0f ? {g} * {alpha} * expf({x}) : {g}", lambda v: _elu_ref(v, v.alpha)),
        Form("{y} <= 0.0f ? {g} * ({y} + {alpha}) : {g}", lambda v: _elu_y_ref(v, v.alpha),
             when=lambda p: p["alpha"] >= 0),
    ), lambda x, alpha: F.elu(x, alpha), params=(("alpha", 1.0),)),
    _unary("selu", "{x} > 0.0f ? {x} * {scale} : expm1f({x}) * {negcoef}", (
        Form("{x} <= 0.0f ? {g} * {negcoef} * expf({x}) : {g} * {scale}", lambda v: _elu_ref(v, v.negcoef, v.scale)),
        Form("{y} <= 0.0f ? {g} * ({y} + {negcoef}) : {g} * {scale}", lambda v: _elu_y_ref(v, v.negcoef, v.scale)),
    ), F.selu, constants=_selu_consts),
    _unary("celu", "{x} > 0.0f ? {x} : expm1f({x} * {inv_alpha}) * {alpha}", (
        Form("{x} <= 0.0f ? {g} * {inv_alpha} * {alpha} * expf({x} * {inv_alpha}) : {g}",
             lambda v: _elu_ref(v, v.alpha, 1.0, v.inv_alpha)),
        Form("{y} <= 0.0f ? {g} * {inv_alpha} * ({y} + {alpha}) : {g}", lambda v: _elu_y_ref(v, v.alpha, 1.0, v.inv_alpha)),
    ), lambda x, alpha: F.celu(x, alpha), params=(("alpha", 1.0),), constants=_celu_consts,
        check=lambda p: "alpha must not be 0" if p["alpha"] == 0 else None),
    _unary("gelu", PW + "gelu({x})", (Form(PW + "gelu_vjp({g}, {x})", _gelu_vjp),), F.gelu),
    _unary("gelu_tanh", PW + "gelu_tanh({x})", (Form(PW + "gelu_tanh_vjp({g}, {x})", _gelu_tanh_vjp),),
           lambda x: F.gelu(x, approximate="tanh")),
    _unary("silu", "{x} / (1.0f + expf(-{x}))", (Form(PW + "silu_vjp({g}, {x})", _silu_vjp),), F.silu),
    _unary("mish", PW + "mish({x})", (Form(PW + "mish_vjp({g}, {x})", _mish_vjp),), F.mish),
    _unary("softplus", PW + "softplus({x}, {beta}, {threshold})", (
        Form(PW + "softplus_vjp({g}, {x}, {beta}, {threshold})", _softplus_vjp),
    ), lambda x, beta, threshold: F.softplus(x, beta, threshold), params=(("beta", 1.0), ("threshold", 20.0)),
        check=lambda p: "beta must not be 0" if p["beta"] == 0 else None),
    _unary("sigmoid", "1.0f / (1.0f + expf(-{x}))", (
        Form("{g} * (1.0f - {y}) * {y}", lambda v: v.g * (1 - v.y) * v.y),  # sigmoid_backward(grad, result)
        Form(PW + "sigmoid_vjp({g}, {x})", _sigmoid_x_vjp),
    ), torch.sigmoid),
    _unary("tanh", "tanhf({x})", (
        Form("{g} * (1.0f - {y} * {y})", lambda v: v.g * (1 - v.y * v.y)),  # tanh_backward(grad, result)
        Form("{g} * (1.0f - tanhf({x}) * tanhf({x}))", lambda v: v.g * (1 - torch.tanh(v.x) ** 2)),
    ), torch.tanh),
    _unary("hardtanh", PW + "clamp({x}, {min_val}, {max_val})", (
        Form("({x} <= {min_val} || {x} >= {max_val}) ? 0.0f : {g}",
             lambda v: _w((v.x <= v.min_val) | (v.x >= v.max_val), 0.0, v.g)),
        Form("({y} <= {min_val} || {y} >= {max_val}) ? 0.0f : {g}",
             lambda v: _w((v.y <= v.min_val) | (v.y >= v.max_val), 0.0, v.g)),
    ), lambda x, min_val, max_val: F.hardtanh(x, min_val, max_val), params=(("min_val", -1.0), ("max_val", 1.0)),
        check=lambda p: "min_val must not be greater than max_val" if p["min_val"] > p["max_val"] else None),
    _unary("hardswish", PW + "hardswish({x})", (
        Form("{x} <= -3.0f ? 0.0f : ({x} < 3.0f ? {g} * ({x} / 3.0f + 0.5f) : {g})",
             lambda v: _w(v.x <= -3, 0.0, _w(v.x < 3, v.g * (v.x / 3 + 0.5), v.g))),
    ), F.hardswish),
    _unary("hardsigmoid", PW + "hardsigmoid({x})", (
        Form("({x} > -3.0f && {x} < 3.0f) ? {g} * " + PW + "kOneSixth : 0.0f",
             lambda v: _w((v.x > -3) & (v.x < 3), v.g * ONE_SIXTH_F32, 0.0)),
    ), F.hardsigmoid),
    _unary("softsign", "{x} / (1.0f + fabsf({x}))", (
        Form("{g} / ((1.0f + fabsf({x})) * (1.0f + fabsf({x})))", lambda v: v.g / (1 + v.x.abs()) ** 2),
    ), F.softsign),
    _unary("abs", "fabsf({x})", (Form("{g} * " + PW + "sign({x})", lambda v: v.g * torch.sign(v.x)),), torch.abs),
    _unary("exp", "expf({x})", (
        Form("{g} * {y}", lambda v: v.g * v.y),  # grad * result
        Form("{g} * expf({x})", lambda v: v.g * torch.exp(v.x)),
    ), torch.exp),
    _unary("neg", "-{x}", (Form("-{g}", lambda v: -v.g),), torch.neg),
    # ---- powers, roots, logs and trigonometry: value and gradient as PyTorch's kernels and autograd formulas write them
    _unary("square", "{x} * {x}", (Form("{g} * (2.0f * {x})", lambda v: v.g * (2 * v.x)),), torch.square),
    _unary("pow", PW + "pow_scalar({x}, {exponent})", (
        # pow_backward: grad * (exponent * x ** (exponent - 1)), zero for exponent 0
        Form("{exponent} == 0.0f ? 0.0f : {g} * ({exponent} * " + PW + "pow_scalar({x}, {exponent_m1}))",
             lambda v: v.g * (v.exponent * v.x ** v.exponent_m1) if v.exponent != 0 else v.g * 0.0),
    ), lambda x, exponent: torch.pow(x, exponent), params=(("exponent", REQUIRED),), constants=_pow_consts),
    _unary("sqrt", "sqrtf({x})", (
        Form("{g} / (2.0f * {y})", lambda v: v.g / (2 * v.y)),  # grad / (2 * result)
        Form("{g} / (2.0f * sqrtf({x}))", lambda v: v.g / (2 * torch.sqrt(v.x))),
    ), torch.sqrt),
    _unary("rsqrt", PW + "rsqrt({x})", (
        Form("-0.5f * {g} * ({y} * {y} * {y})", lambda v: -0.5 * v.g * v.y ** 3),  # -0.5 * grad * result ** 3
    ), torch.rsqrt),
    _unary("reciprocal", "1.0f / {x}", (Form("-{g} * ({y} * {y})", lambda v: -v.g * (v.y * v.y)),), torch.reciprocal),
    _unary("log", "logf({x})", (Form("{g} / {x}", lambda v: v.g / v.x),), torch.log),
    _unary("log1p", "log1pf({x})", (Form("{g} / ({x} + 1.0f)", lambda v: v.g / (v.x + 1)),), torch.log1p),
    _unary("expm1", "expm1f({x})", (
        Form("{g} * ({y} + 1.0f)", lambda v: v.g * (v.y + 1)),  # grad * (result + 1)
        Form("{g} * expf({x})", lambda v: v.g * torch.exp(v.x)),
    ), torch.expm1),
    _unary("erf", "erff({x})", (
        Form("1.12837917f * expf(-({x} * {x})) * {g}", lambda v: 2 / math.sqrt(math.pi) * torch.exp(-v.x * v.x) * v.g),
    ), torch.erf),
    # ---- shrinks and thresholds (shrink_backward / threshold_backward: no gradient inside the band, NaN passes it)
    _unary("logsigmoid", PW + "logsigmoid({x})", (Form(PW + "logsigmoid_vjp({g}, {x})", _logsigmoid_vjp),), F.logsigmoid),
    _unary("tanhshrink", "{x} - tanhf({x})", (
        Form("{g} - {g} * (1.0f - tanhf({x}) * tanhf({x}))", lambda v: v.g - v.g * (1 - torch.tanh(v.x) ** 2)),
    ), F.tanhshrink),
    _unary("softshrink", "{x} > {lambd} ? {x} - {lambd} : ({x} < -{lambd} ? {x} + {lambd} : {x} * 0.0f)", (
        Form("({x} >= -{lambd} && {x} <= {lambd}) ? 0.0f : {g}", lambda v: _w((v.x >= -v.lambd) & (v.x <= v.lambd), 0.0, v.g)),
    ), lambda x, lambd: F.softshrink(x, lambd), params=(("lambd", 0.5),),
        check=lambda p: "lambd must not be negative" if p["lambd"] < 0 else None),
    _unary("hardshrink", "({x} >= -{lambd} && {x} <= {lambd}) ? 0.0f : {x}", (
        Form("({x} >= -{lambd} && {x} <= {lambd}) ? 0.0f : {g}", lambda v: _w((v.x >= -v.lambd) & (v.x <= v.lambd), 0.0, v.g)),
    ), lambda x, lambd: F.hardshrink(x, lambd), params=(("lambd", 0.5),)),
    _unary("threshold", "{x} <= {threshold} ? {value} : {x}", (
        Form("{x} <= {threshold} ? 0.0f : {g}", lambda v: _w(v.x <= v.threshold, 0.0, v.g)),
    ), lambda x, threshold, value: F.threshold(x, threshold, value), params=(("threshold", REQUIRED), ("value", REQUIRED))),
    # ---- clamp family: the gradient passes where min <= x <= max (bounds included), none for NaN
    _unary("clamp", PW + "clamp({x}, {min}, {max})", (
        Form("({x} >= {min} && {x} <= {max}) ? {g} : 0.0f", lambda v: _w((v.x >= v.min) & (v.x <= v.max), v.g, 0.0)),
    ), lambda x, min, max: torch.clamp(x, min, max), params=(("min", REQUIRED), ("max", REQUIRED))),
    _unary("clamp_min", PW + "clamp_min({x}, {min})", (
        Form("{x} >= {min} ? {g} : 0.0f", lambda v: _w(v.x >= v.min, v.g, 0.0)),
    ), lambda x, min: torch.clamp_min(x, min), params=(("min", REQUIRED),)),
    _unary("clamp_max", PW + "clamp_max({x}, {max})", (
        Form("{x} <= {max} ? {g} : 0.0f", lambda v: _w(v.x <= v.max, v.g, 0.0)),
    ), lambda x, max: torch.clamp_max(x, max), params=(("max", REQUIRED),)),
    # ---- binary: each operand is a program value, a float32 constant or a parameter tensor
    _binary("add", "{a} + {b}", (Form("{g}", lambda v: v.g),), (Form("{g}", lambda v: v.g),), torch.add),
    _binary("sub", "{a} - {b}", (Form("{g}", lambda v: v.g),), (Form("-{g}", lambda v: -v.g),), torch.sub),
    _binary("mul", "{a} * {b}", (Form("{g} * {b}", lambda v: v.g * v.b),), (Form("{g} * {a}", lambda v: v.g * v.a),),
            torch.mul),
    _binary("div", "{a} / {b}", (Form("{g} / {b}", lambda v: v.g / v.b),), (
        Form("-{g} * (({a} / {b}) / {b})", lambda v: -v.g * ((v.a / v.b) / v.b)),  # div_tensor_other_backward
        Form("-{g} * ({y} / {b})", lambda v: -v.g * (v.y / v.b)),
    ), torch.div),
    _binary("maximum", PW + "maximum({a}, {b})",
            (Form("{a} < {b} ? 0.0f : ({a} == {b} ? {g} * 0.5f : {g})", lambda v: _max_vjp(v.a, v.b, v.g, v.a < v.b)),),
            (Form("{b} < {a} ? 0.0f : ({a} == {b} ? {g} * 0.5f : {g})", lambda v: _max_vjp(v.b, v.a, v.g, v.b < v.a)),),
            torch.maximum),
    _binary("minimum", PW + "minimum({a}, {b})",
            (Form("{a} > {b} ? 0.0f : ({a} == {b} ? {g} * 0.5f : {g})", lambda v: _max_vjp(v.a, v.b, v.g, v.a > v.b)),),
            (Form("{b} > {a} ? 0.0f : ({a} == {b} ? {g} * 0.5f : {g})", lambda v: _max_vjp(v.b, v.a, v.g, v.b > v.a)),),
            torch.minimum),
)

ROWS: dict[str, Row] = {r.name: r for r in ROW_LIST}


def row(name: str) -> Row:
    if name not in ROWS:
        raise KeyError(f"no pointwise row {name!r} (rows: {', '.join(ROWS)})")
    return ROWS[name]


# ----------------------------------------------------------------------------------------------- the program


@dataclass(frozen=True)
class Ref:
    """An operand: the program ``input``, an earlier ``node`` (by index), a float32 ``const``, or a run-time
    ``param`` tensor (by name) that is a ``scalar`` or holds one value per ``channel``."""

    kind: str  # input | node | const | param
    index: int = -1
    value: float = 0.0
    name: str = ""
    broadcast: str = ""  # param: scalar | channel

    @staticmethod
    def input() -> "Ref":
        return Ref("input")

    @staticmethod
    def node(index: int) -> "Ref":
        return Ref("node", index=index)

    @staticmethod
    def const(value: float) -> "Ref":
        return Ref("const", value=f32(value))

    @staticmethod
    def param(name: str, broadcast: str) -> "Ref":
        if broadcast not in ("scalar", "channel"):
            raise ValueError(f"param {name}: broadcast must be 'scalar' or 'channel', got {broadcast!r}")
        return Ref("param", name=name, broadcast=broadcast)

    def __str__(self) -> str:
        return {"input": "x", "node": f"v{self.index}", "const": repr(self.value),
                "param": f"{self.name}[{'c' if self.broadcast == 'channel' else '0'}]"}[self.kind]


X = Ref.input()


@dataclass(frozen=True)
class Node:
    """One SSA statement: ``op`` names a row; ``params`` are its bound parameters in the row's order."""

    op: str
    args: tuple[Ref, ...]
    params: tuple[tuple[str, float], ...] = ()

    @property
    def row(self) -> Row:
        return row(self.op)

    @property
    def param_dict(self) -> dict[str, float]:
        return dict(self.params)

    def __str__(self) -> str:
        inner = [str(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.params]
        return f"{self.op}({', '.join(inner)})"


def node(op: str, *args: Ref, **params: Any) -> Node:
    """A Node with the row's defaults filled in (ValueError for a bad arity or parameter)."""
    r = row(op)
    if len(args) != r.arity:
        raise ValueError(f"{op} takes {r.arity} operand(s), got {len(args)}")
    return Node(op, tuple(args), tuple(r.bind(params).items()))


@dataclass(frozen=True)
class Program:
    """Nodes in order (each uses only the input, earlier nodes, constants and params) and the output."""

    nodes: tuple[Node, ...]
    output: Ref = X

    def __post_init__(self) -> None:
        for i, n in enumerate(self.nodes):
            r = row(n.op)
            if len(n.args) != r.arity:
                raise ValueError(f"v{i} = {n}: {n.op} takes {r.arity} operand(s)")
            if dict(n.params) != r.bind(dict(n.params)):
                raise ValueError(f"v{i} = {n}: parameters must be bound with node()")
            for a in n.args:
                if a.kind == "node" and not 0 <= a.index < i:
                    raise ValueError(f"v{i} = {n}: operand {a} is not an earlier node")
            if r.arity == 1 and n.args[0].kind not in ("input", "node"):
                raise ValueError(f"v{i} = {n}: a unary op's operand must be the input or a node (fold constants)")
            if r.arity == 2 and not any(a.kind in ("input", "node") for a in n.args):
                raise ValueError(f"v{i} = {n}: a binary op needs the input or a node as one operand")
        broadcast: dict[str, str] = {}
        for n in self.nodes:
            for a in n.args:
                if a.kind == "param" and broadcast.setdefault(a.name, a.broadcast) != a.broadcast:
                    raise ValueError(f"param {a.name} is used both as a scalar and per channel")
        if self.output.kind == "node" and not 0 <= self.output.index < len(self.nodes):
            raise ValueError(f"output {self.output} is not a node")
        if self.output.kind not in ("input", "node"):
            raise ValueError("the output must be the input or a node")

    @property
    def params(self) -> tuple[Ref, ...]:
        """The parameter operands the output depends on, in order of first use."""
        out: list[Ref] = []
        live = self.live()
        for i, n in enumerate(self.nodes):
            out += [a for a in n.args if a.kind == "param" and a not in out and i in live]
        return tuple(out)

    def live(self) -> frozenset[int]:
        """Indices of the nodes the output depends on."""
        seen: set[int] = set()
        stack = [self.output.index] if self.output.kind == "node" else []
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                stack += [a.index for a in self.nodes[i].args if a.kind == "node"]
        return frozenset(seen)

    def __str__(self) -> str:
        body = "; ".join(f"v{i} = {n}" for i, n in enumerate(self.nodes))
        return f"{body}; -> {self.output}" if body else f"-> {self.output}"


# ----------------------------------------------------------------------------------------------- the backward


@dataclass(frozen=True)
class Term:
    """One use's contribution to an adjoint: the VJP of ``node``'s operand ``operand`` in the row's form ``form``."""

    node: int
    operand: int
    form: int


@dataclass(frozen=True)
class Adjoint:
    """The gradient of ``target`` (a node, the input or a param): the sum of ``terms`` in order."""

    target: Ref
    terms: tuple[Term, ...]


@dataclass(frozen=True)
class Backward:
    """The derived backward: adjoints in emission order (nodes last to first, then the input, then params) and the
    forward values (nodes, input, params) the terms read."""

    program: Program
    adjoints: tuple[Adjoint, ...]
    needs: frozenset[Ref]

    @property
    def input_grad(self) -> Adjoint | None:
        return next((a for a in self.adjoints if a.target == X), None)

    @property
    def param_grads(self) -> tuple[Adjoint, ...]:
        return tuple(a for a in self.adjoints if a.target.kind == "param")


def _form_refs(n: Node, index: int, form: Form) -> list[Ref]:
    """The forward values form reads, as Refs (constants dropped)."""
    r = n.row
    refs = [Ref.node(index) if f == "y" else n.args[r.operands.index(f)] for f in form.needs]
    return [ref for ref in refs if ref.kind != "const"]


def derive_backward(program: Program, available: frozenset[Ref] | set[Ref] | None = None) -> Backward:
    """Reverse accumulation over the DAG. For each use, the first VJP form of the row that is valid for the node's
    parameters and reads only ``available`` forward values (default: every node and the input; params are always
    available). ValueError when no form fits."""
    nodes = program.nodes
    avail = set(available) if available is not None else {X} | {Ref.node(i) for i in range(len(nodes))}
    live = program.live()  # every node depends on the input (Program's check), so every live node gets a gradient
    uses: dict[Ref, list[Term]] = {}
    needs: set[Ref] = set()
    for i in sorted(live, reverse=True):
        n = nodes[i]
        r = n.row
        params = n.param_dict
        for k, arg in enumerate(n.args):
            if arg.kind == "const":
                continue
            choice = next((f for f, form in enumerate(r.grads[k]) if form.valid(params)
                           and all(ref.kind == "param" or ref in avail for ref in _form_refs(n, i, form))), None)
            if choice is None:
                raise ValueError(f"v{i} = {n}: no VJP form of operand {r.operands[k]} reads only available values")
            uses.setdefault(arg, []).append(Term(i, k, choice))
            needs.update(_form_refs(n, i, r.grads[k][choice]))
    adjoints = [Adjoint(Ref.node(i), tuple(sorted(uses[Ref.node(i)], key=lambda t: (t.node, t.operand))))
                for i in sorted(live, reverse=True) if Ref.node(i) != program.output]
    order = ([X] if X in uses else []) + list(program.params)
    adjoints += [Adjoint(ref, tuple(sorted(uses[ref], key=lambda t: (t.node, t.operand)))) for ref in order if ref in uses]
    return Backward(program, tuple(adjoints), frozenset(needs))


# ----------------------------------------------------------------------------------------------- the emitter


def _c_name(text: str) -> str:
    return re.sub(r"\W", "_", text)


@dataclass(frozen=True)
class Names:
    """C names the emitted statements use: the input, the incoming gradient, each param's loaded value (a C
    expression), and a prefix for the temporaries (``<prefix>v3`` values, ``<prefix>g3`` adjoints)."""

    x: str = "x"
    g: str = "g"
    params: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ""

    def value(self, ref: Ref) -> str:
        if ref.kind == "input":
            return self.x
        if ref.kind == "node":
            return f"{self.prefix}v{ref.index}"
        if ref.kind == "const":
            return c_float(ref.value)
        if ref.name not in self.params:
            raise KeyError(f"no C expression given for param {ref.name!r} (Names.params)")
        return self.params[ref.name]

    def adjoint(self, ref: Ref) -> str:
        if ref.kind == "input":
            return f"{self.prefix}gx"
        if ref.kind == "param":
            return f"{self.prefix}g_{_c_name(ref.name)}"
        return f"{self.prefix}g{ref.index}"


@dataclass(frozen=True)
class Emitted:
    """Statements for a template, the C name of the result (the forward's output, or the input's gradient) and
    (backward) each param's elementwise gradient: (param name, C name), summed over its broadcast dims by the
    caller."""

    lines: tuple[str, ...]
    result: str
    param_grads: tuple[tuple[str, str], ...] = ()


def _fill(text: str, env: Mapping[str, str]) -> str:
    return text.format(**env)


def _env(program: Program, i: int, names: Names) -> dict[str, str]:
    n = program.nodes[i]
    r = n.row
    env = {k: c_float(v) for k, v in r.consts(n.param_dict).items()}
    env.update({name: names.value(a) for name, a in zip(r.operands, n.args)})
    env["y"] = names.value(Ref.node(i))
    return env


def forward_line(program: Program, i: int, names: Names) -> str:
    n = program.nodes[i]
    return f"const float {names.value(Ref.node(i))} = {_fill(n.row.value, _env(program, i, names))};  // {n}"


def emit_forward(program: Program, names: Names | None = None, only: frozenset[int] | set[int] | None = None) -> Emitted:
    """One statement per node (only the live ones, or those in ``only``), in program order."""
    names = names or Names()
    keep = program.live() if only is None else only
    lines = tuple(forward_line(program, i, names) for i in range(len(program.nodes)) if i in keep)
    return Emitted(lines, names.value(program.output))


def _closure(program: Program, refs: frozenset[Ref] | set[Ref]) -> set[int]:
    """The nodes among refs and every node they depend on."""
    seen: set[int] = set()
    stack = [r.index for r in refs if r.kind == "node"]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack += [a.index for a in program.nodes[i].args if a.kind == "node"]
    return seen


def emit_backward(backward: Backward, names: Names | None = None, recompute: bool = True) -> Emitted:
    """The adjoint statements, with ``recompute`` preceded by the forward statements of the values they read
    (without it, they read the temporaries of an ``emit_forward`` with the same names in scope). The output's
    adjoint is ``names.g``; the result is the input's gradient."""
    names = names or Names()
    program = backward.program
    lines: list[str] = []
    if recompute:
        lines += emit_forward(program, names, only=_closure(program, backward.needs)).lines

    def adj(ref: Ref) -> str:
        return names.g if ref == program.output else names.adjoint(ref)

    for a in backward.adjoints:
        parts, ops = [], []
        for t in a.terms:
            n = program.nodes[t.node]
            env = _env(program, t.node, names)
            env["g"] = adj(Ref.node(t.node))
            parts.append(_fill(n.row.grads[t.operand][t.form].c, env))
            ops.append(f"{n.op}.{n.row.operands[t.operand]}" + ("" if t.form == 0 else f"[form {t.form}]"))
        expr = parts[0] if len(parts) == 1 else " + ".join(f"({p})" for p in parts)
        lines.append(f"const float {adj(a.target)} = {expr};  // d/d{a.target}: {', '.join(ops)}")
    return Emitted(tuple(lines), adj(X), tuple((a.target.name, adj(a.target)) for a in backward.param_grads))


# ----------------------------------------------------------------------------------------------- torch reference


def _ns(program: Program, i: int, values: Mapping[Ref, torch.Tensor], g: torch.Tensor) -> SimpleNamespace:
    n = program.nodes[i]
    r = n.row
    env: dict[str, Any] = dict(r.consts(n.param_dict, exact=g.dtype == torch.float64))
    env.update({name: values[a] for name, a in zip(r.operands, n.args)})
    if Ref.node(i) in values:
        env["y"] = values[Ref.node(i)]
    env["g"] = g
    return SimpleNamespace(**env)


def _values(program: Program, x: torch.Tensor, params: Mapping[str, torch.Tensor]) -> dict[Ref, torch.Tensor]:
    values: dict[Ref, torch.Tensor] = {X: x}
    for p in program.params:  # shaped to broadcast as the program reads them, whatever shape they are registered in
        t = params[p.name]
        values[p] = t.reshape((1, -1) + (1,) * (x.dim() - 2)) if p.broadcast == "channel" else t.reshape(())
    for i in program.live():
        for a in program.nodes[i].args:
            if a.kind == "const":
                values[a] = torch.tensor(a.value, dtype=x.dtype)
    return values


def reference_forward(program: Program, x: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
                      ) -> dict[Ref, torch.Tensor]:
    """Every live value of the program computed with each row's PyTorch op (params by name, in any shape holding their
    scalar or per-channel values), its parameters in x's dtype as PyTorch's kernels cast them."""
    values = _values(program, x, params or {})
    live = program.live()
    for i, n in enumerate(program.nodes):
        if i not in live:
            continue
        consts = n.row.consts(n.param_dict, exact=x.dtype == torch.float64)
        kwargs = {k: consts.get(k, v) for k, v in n.params}
        values[Ref.node(i)] = n.row.fn(*(values[a] for a in n.args), **kwargs)
    return values


def reference_backward(backward: Backward, values: Mapping[Ref, torch.Tensor], g: torch.Tensor
                       ) -> dict[Ref, torch.Tensor]:
    """Each adjoint of the derived backward evaluated with the forms' torch references, constants in g's dtype
    (params' gradients are elementwise, not yet reduced over their broadcast dims)."""
    program = backward.program
    adj: dict[Ref, torch.Tensor] = {program.output: g}
    for a in backward.adjoints:
        total = None
        for t in a.terms:
            n = program.nodes[t.node]
            part = n.row.grads[t.operand][t.form].ref(_ns(program, t.node, values, adj[Ref.node(t.node)]))
            part = torch.broadcast_to(torch.as_tensor(part, dtype=g.dtype), g.shape)
            total = part if total is None else total + part
        adj[a.target] = total
    return adj
