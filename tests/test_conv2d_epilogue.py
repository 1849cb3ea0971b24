"""conv2d_epilogue family: nn.Conv2d (any channels, kernel, stride, dilation, padding int / tuple / 'same' / 'valid',
groups including depthwise, bias or not) followed by a pointwise program: a DAG of kgen.pointwise's ops over the conv
output, Python and 0-d tensor constants, and scalar or per-channel parameters and buffers. float32.

CPU tier: specs of every case and of random in-scope problems against PyTorch's meta shapes and the conv module's
arguments; the matched program, run by kgen.pointwise.reference_forward on the conv output, against the Model in
float64 (the matcher captured the program faithfully); refusals; the generated files and ModelNew's parameter names,
shapes and initialization; the random draws are valid PyTorch.
GPU tier (@pytest.mark.gpu): TF32 mode against a float64 reference of TF32-rounded operands, bitwise-deterministic
backward, the batch size as a run-time value, bad inputs.

Exports for the generic tiers: CASES (id, problem source), HARDENING (one small float32 problem) and
random_problem(rng) (a random problem anywhere in the family's scope).
"""

from __future__ import annotations

import copy
import math
import random
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kgen import emit
from kgen.errors import KgenError, Unsupported
from kgen.families import conv2d_epilogue as fam
from kgen.pointwise import reference_forward
from kgen.problem import load_problem
from kgen.spec import match
from tests.families import setup_problem
from tests.helpers import (REPO, conv_problem, generate_module, poison_cuda_allocator, side_draw, tf32_mode, tf32_round,
                           write_problem)

NAME = "conv2d_epilogue"
CONV_ARGS = ("in_channels", "out_channels", "kernel_size")


# F.conv2d forms (conv_epilogue_problem's `form`): the model's own weight and bias, drawn as nn.Conv2d's
# reset_parameters draws them ("functional") or each by torch.randn ("functional_randn"), under any names
FUNCTIONAL_INIT = {
    "functional": ["nn.init.kaiming_uniform_(self.w, a=math.sqrt(5))",
                   "nn.init.uniform_(self.b, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))"],
    "functional_randn": ["self.w.data = torch.randn(self.w.shape) * 0.05", "self.b.data = torch.randn(self.b.shape) * 0.1"],
    "functional_kaiming": ["nn.init.kaiming_uniform_(self.w, a=math.sqrt(5))", "nn.init.zeros_(self.b)"],
}


def conv_epilogue_problem(shape, conv: dict, forward, init=(), args: dict | None = None, fill: str = "rand",
                          dtype: str = "float32", form: str = "module") -> str:
    """A KernelBench-style problem file: Model(in_channels, out_channels, kernel_size, *args) builds
    self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, <the other conv kwargs as literals>) then runs the
    `init` lines; forward is the `forward` lines (the first calls self.conv); module-level constants feed
    get_inputs() (torch.<fill> of `shape`) and get_init_inputs(). form "functional" / "functional_randn" (the
    keys of FUNCTIONAL_INIT, "functional_kaiming" too): self.conv is instead a method calling F.conv2d with the model's tensors self.w and
    self.b (no self.b where bias=False), drawn as FUNCTIONAL_INIT says."""
    n, c, h, w = shape
    assert c == conv["in_channels"], (shape, conv)
    values = {**{k: conv[k] for k in CONV_ARGS}, **(args or {})}
    rest = "".join(f", {k}={v!r}" for k, v in conv.items() if k not in CONV_ARGS)
    if form == "module":
        conv_lines, method = "self.conv = nn.Conv2d(in_channels, out_channels, kernel_size" + rest + ")", ""
    else:
        kw = {k: v for k, v in conv.items() if k not in CONV_ARGS and k not in ("bias", "padding_mode")}
        bias = conv.get("bias", True)
        lines = ["k = kernel_size if isinstance(kernel_size, tuple) else (kernel_size, kernel_size)",
                 f"fan_in = in_channels // {kw.get('groups', 1)} * k[0] * k[1]",
                 f"self.w = nn.Parameter(torch.empty(out_channels, in_channels // {kw.get('groups', 1)}, *k))"]
        lines += ["self.b = nn.Parameter(torch.empty(out_channels))"] if bias else []
        lines += FUNCTIONAL_INIT[form][: 2 if bias else 1]
        conv_lines = "\n        ".join(lines)
        args_text = "".join(f", {k}={v!r}" for k, v in kw.items())
        method = (f"\n    def conv(self, x):\n        return F.conv2d(x, self.w, {'self.b' if bias else 'None'}{args_text})\n")
    init_lines = "".join(f"\n        {line}" for line in init)
    body = "\n".join(f"        {line}" for line in forward)
    constants = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    dt = "" if dtype == "float32" else f", dtype=torch.{dtype}"
    head = "" if form == "module" else "import math\n\n"
    return f'''{head}import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, {", ".join(values)}):
        super().__init__()
        {conv_lines}{init_lines}
{method}
    def forward(self, x):
{body}


batch_size = {n}
height, width = {h}, {w}
{constants}


def get_inputs():
    return [torch.{fill}(batch_size, in_channels, height, width{dt})]


def get_init_inputs():
    return [{", ".join(values)}]
'''


def conv(ci: int, co: int, k, **kw) -> dict:
    return dict(in_channels=ci, out_channels=co, kernel_size=k, **kw)


CONV_IN = ["x = self.conv(x)"]

# (id, pointwise ops written, input shape, conv kwargs, forward lines, __init__ lines, extra constructor args)
_TABLE = [
    ("lone_conv", 0, (2, 3, 17, 23), conv(3, 8, 3), ["return self.conv(x)"], [], {}),
    ("relu", 1, (2, 4, 20, 19), conv(4, 16, 3, padding=1), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("channel_bias_add_tanh", 2, (2, 3, 24, 21), conv(3, 16, 3), CONV_IN + ["x = x + self.bias", "return torch.tanh(x)"],
     ["self.bias = nn.Parameter(torch.randn(bias_shape))"], {"bias_shape": (16, 1, 1)}),
    ("buffer_1c11_mul_silu", 2, (3, 5, 19, 18), conv(5, 12, 3, stride=2), CONV_IN + ["x = x * self.scale", "return self.act(x)"],
     ['self.register_buffer("scale", torch.rand(1, out_channels, 1, 1) + 0.5)', "self.act = nn.SiLU()"], {}),
    ("scalar_param_leaky_relu", 3, (2, 3, 16, 23), conv(3, 8, 3, padding=1),
     CONV_IN + ["x = F.leaky_relu(x, 0.1)", "x = x * self.alpha", "return x.clamp_min(-0.5)"],
     ["self.alpha = nn.Parameter(torch.tensor(0.7))"], {}),
    ("groups2_gelu_tanh_div_param", 2, (2, 8, 19, 21), conv(8, 12, 3, padding=1, groups=2),
     CONV_IN + ["x = F.gelu(x, approximate='tanh')", "return x / self.divisor"],
     ["self.divisor = nn.Parameter(torch.rand(out_channels, 1, 1) + 1)"], {}),
    ("depthwise_hardswish", 1, (3, 6, 24, 17), conv(6, 12, 3, padding=1, groups=6), CONV_IN + ["return self.act(x)"],
     ["self.act = nn.Hardswish()"], {}),
    ("dilation2_stride2_softplus", 2, (2, 5, 33, 27), conv(5, 16, 3, stride=2, padding=2, dilation=2),
     CONV_IN + ["x = F.softplus(x, beta=2, threshold=10)", "return x - 0.5"], [], {}),
    ("kernel3x5_pad1x2_mish", 2, (1, 3, 15, 31), conv(3, 10, (3, 5), padding=(1, 2)), CONV_IN + ["return self.act(x) * 2.5"],
     ["self.act = nn.Mish()"], {}),
    ("same_kernel4_max_min_const", 2, (2, 4, 18, 13), conv(4, 8, 4, padding="same"),
     CONV_IN + ["x = torch.max(x, torch.tensor(-0.5))", "return torch.min(x, torch.tensor(1.5))"], [], {}),
    ("valid_k5_elu_max_tanh", 5, (2, 3, 21, 19), conv(3, 16, 5, padding="valid"),
     CONV_IN + ["x = F.elu(x, alpha=0.5)", "return torch.maximum(x, torch.tanh(x)) * torch.sigmoid(x)"], [], {}),
    ("no_bias_celu_hardsigmoid", 2, (2, 6, 22, 25), conv(6, 24, 3, stride=2, padding=1, bias=False),
     CONV_IN + ["x = self.act(x)", "return F.hardsigmoid(x)"], ["self.act = nn.CELU(0.5)"], {}),
    ("hardswish_dag", 4, (2, 3, 25, 22), conv(3, 16, 3), ["y = self.conv(x)", "return y * torch.clamp((y + 3) / 6, 0, 1)"],
     [], {}),
    ("pointwise_1x1_ci1_co70_chain", 7, (2, 1, 29, 37), conv(1, 70, 1),
     CONV_IN + ["x = x * self.scale + self.shift", "x = self.act(x)", "x = torch.tanh(x)", "x = torch.clamp(x, min=-0.25)",
                "return 1.5 - x.exp()"],
     ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)",
      "self.shift = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)", "self.act = nn.SELU()"], {}),
    ("abs_softsign_hardtanh_relu6", 6, (1, 2, 40, 5), conv(2, 3, (1, 3), stride=(1, 2)),
     CONV_IN + ["x = F.softsign(x.abs() - 0.5)", "return self.act(x) + F.relu6(x)"], ["self.act = nn.Hardtanh(-0.5, 2.0)"], {}),
]

# Input channels per group a multiple of 8: the forward from halo tiles (odd extents leave partial tiles).
_TABLE += [
    ("halo_ci16_pad1_relu", 1, (2, 16, 30, 37), conv(16, 24, 3, padding=1), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("halo_groups2_k5_s2_p2_silu", 1, (2, 16, 27, 25), conv(16, 12, 5, stride=2, padding=2, groups=2),
     CONV_IN + ["return F.silu(x)"], [], {}),
    ("halo_ci24_k3x5_dil21_bias_c", 1, (1, 24, 21, 40), conv(24, 40, (3, 5), dilation=(2, 1)),
     CONV_IN + ["return x + self.shift"], ["self.shift = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
    ("halo_ci16_avgpool2_divisor_scale_c", 2, (2, 16, 19, 70), conv(16, 20, 3, padding=1),
     CONV_IN + ["x = F.avg_pool2d(torch.relu(x), 2, divisor_override=3)", "return x * self.scale"],
     ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)"], {}),
    ("halo_ci8_maxpool_ceil_even_sum", 0, (2, 8, 18, 22), conv(8, 12, 3, padding=1),
     CONV_IN + ["x = F.max_pool2d(x, 2, ceil_mode=True)", "return x.sum(dim=1)"], [], {}),
    ("halo_ci8_small_tanh_maxpool", 2, (3, 8, 9, 10), conv(8, 16, 3), CONV_IN + ["x = torch.tanh(x)", "x = F.max_pool2d(x, 2)",
                                                                          "return x * 2.0"], [], {}),
]

# Halo forwards whose first stage reduces over (H, W): inference folds it into the conv kernel (per-CTA partials, then
# a finishing kernel): the global average (one 8-channel chunk: one shared-memory stage), sum, amax / amin, adaptive
# max pooling to 1x1, with channel tiles part-filled (12 of 16, 40 of 64), groups and several tiles a plane.
_TABLE += [
    ("halo_ci8_k5s2_gelu_global_avg_squeeze", 1, (3, 8, 37, 45), conv(8, 12, 5, stride=2),
     CONV_IN + ["x = F.gelu(x)", "x = F.adaptive_avg_pool2d(x, 1)", "return x.squeeze()"], [], {}),
    # stride-2 columns staged split by phase (REG, PHS 2) from 16- and 8-byte copies, odd left offsets (LOFF 3, 1)
    ("halo_ci8_k5s2_p1_w44_hardswish_maxpool2", 1, (2, 8, 37, 44), conv(8, 16, 5, stride=2, padding=1),
     CONV_IN + ["x = F.hardswish(x)", "return F.max_pool2d(x, 2)"], [], {}),
    ("halo_ci8_k3s2_p1_w38_relu_bias_c", 2, (2, 8, 30, 38), conv(8, 24, 3, stride=2, padding=1),
     CONV_IN + ["x = torch.relu(x)", "return x + self.bias"], ["self.bias = nn.Parameter(torch.randn(24, 1, 1))"], {}),
    ("halo_ci16_amax_hw_keepdim_scale_c", 1, (2, 16, 23, 50), conv(16, 40, 3, padding=1),
     CONV_IN + ["x = torch.amax(x, dim=(-2, -1), keepdim=True)", "return x * self.scale"],
     ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)"], {}),
    ("halo_groups2_relu_sum_hw", 1, (2, 16, 20, 33), conv(16, 24, 3, groups=2),
     CONV_IN + ["x = torch.relu(x)", "return x.sum(dim=[2, 3])"], [], {}),
    ("halo_ci8_tanh_adaptive_max1_flatten", 1, (2, 8, 14, 9), conv(8, 8, 3),
     CONV_IN + ["x = torch.tanh(x)", "x = F.adaptive_max_pool2d(x, 1)", "return torch.flatten(x, 1)"], [], {}),
    ("halo_ci8_dil_amin_hw_sub", 1, (2, 8, 40, 70), conv(8, 16, (3, 5), padding=(1, 2), dilation=(1, 2)),
     CONV_IN + ["x = x.amin(dim=(2, 3))", "return x - 0.5"], [], {}),
]

# Stride 1 and out channels per group a multiple of 8: grad_x from halo tiles (a convolution of gz with the flipped
# weights), including padding past the kernel's reach (grad_x's own padding negative), 'same' with one more row / column
# at the end, groups, dilation and an RGB-like input (3 grad_x columns of 8).
_TABLE += [
    ("dxhalo_ci3_co16_k3_pad3_relu", 1, (2, 3, 21, 26), conv(3, 16, 3, padding=3), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("dxhalo_groups2_co16_k3x2_pad02_tanh", 1, (2, 8, 17, 40), conv(8, 16, (3, 2), padding=(0, 2), groups=2),
     CONV_IN + ["return torch.tanh(x)"], [], {}),
    ("dxhalo_same_k4_co8_dil23_gelu", 1, (1, 5, 23, 35), conv(5, 8, 4, padding="same", dilation=(2, 3)),
     CONV_IN + ["return F.gelu(x)"], [], {}),
    ("dxhalo_ci16_co24_k5_no_bias_maxpool_sum", 0, (2, 16, 26, 33), conv(16, 24, 5, padding=1, bias=False),
     CONV_IN + ["x = F.max_pool2d(x, 3, stride=2)", "return x.sum(dim=(2, 3))"], [], {}),
    # a lone conv whose grad_w (halo tiles) reads the incoming gradient itself, 4 floats a copy where it is aligned
    ("halo_lone_ci8_wo16", 0, (2, 8, 11, 18), conv(8, 16, 3), ["return self.conv(x)"], [], {}),
    # rows of 32 floats: the forward and grad_x halos copied 16 bytes at a time, from 3 columns left of the tile's first
    ("halo_ci16_w32_pad1_relu_bias_c", 2, (2, 16, 13, 32), conv(16, 24, 3, padding=1),
     CONV_IN + ["x = torch.relu(x)", "return x + self.bias"], ["self.bias = nn.Parameter(torch.randn(24, 1, 1))"], {}),
    # the longest forward reduction (256 channels x 9 taps = NOFLUSH_K_MAX) that TF32 allowed accumulates unflushed
    ("halo_ci256_k3_noflush_tanh", 1, (1, 256, 9, 12), conv(256, 16, 3, padding=1), CONV_IN + ["return torch.tanh(x)"],
     [], {}),
    # a 5x5 kernel's two chunks whose two buffers do not fit: one buffer, each chunk loaded after the last one's mmas
    ("halo_ci16_k5_onestage_relu_bias_c", 2, (2, 16, 11, 20), conv(16, 64, 5, padding=2),
     CONV_IN + ["x = torch.relu(x)", "return x + self.bias"], ["self.bias = nn.Parameter(torch.randn(64, 1, 1))"], {}),
    # 3+ chunks: the halo forward's warps own all out channels (4 x 1 warps), with one buffer and a folded mean
    ("halo_ci32_k5_wide_onestage_silu_mean_hw", 1, (2, 32, 14, 19), conv(32, 48, 5),
     CONV_IN + ["x = F.silu(x)", "return x.mean(dim=(2, 3))"], [], {}),
    # ... and with a folded max pooling
    ("halo_ci24_wide_maxpool2_tanh", 1, (2, 24, 12, 16), conv(24, 16, 3, padding=1),
     CONV_IN + ["x = F.max_pool2d(x, 2)", "return torch.tanh(x)"], [], {}),
    # 8+ chunks on 128-thread tiles: the TF32 instances ask for 4 CTAs an SM on sm_90 (halo_tf32_ctas), with a folded
    # max pooling (its training instance: 3) and with the staged epilogue (11-wide rows) before a min over channels
    ("halo_ci64_ctas4_hardswish_maxpool2_mish", 3, (2, 64, 10, 18), conv(64, 128, 3),
     CONV_IN + ["x = F.hardswish(x - 0.5)", "x = F.max_pool2d(x, 2)", "return F.mish(x)"], [], {}),
    ("halo_ci64_ctas4_scale_min_c", 1, (2, 64, 9, 13), conv(64, 128, 3),
     CONV_IN + ["x = x * 2.0", "return torch.min(x, dim=1, keepdim=True)[0]"], [], {}),
]

# Halo forwards whose first stage reduces over channels only: inference folds it into the conv kernel (FUSED_CREDUCE):
# one CTA holding every channel writes the stage's output (a sum, keepdim, then a scalar parameter; a mean without
# keepdim; logsumexp, then a pooling stage of its own), or channel slices (64-channel tiles of 80, two
# groups, the 4-CTA tile of 128) write partials that a finishing kernel combines in order (amax, logsumexp, max values).
_TABLE += [
    ("creduce_ci8_sum_c_keepdim_shift", 1, (2, 8, 13, 37), conv(8, 20, 3, padding=1),
     CONV_IN + ["x = x.sum(dim=1, keepdim=True)", "return x - self.shift"], ["self.shift = nn.Parameter(torch.tensor(0.25))"], {}),
    ("creduce_ci16_relu_mean_c_sigmoid", 2, (2, 16, 11, 21), conv(16, 24, 3),
     CONV_IN + ["x = torch.relu(x)", "x = torch.mean(x, 1)", "return torch.sigmoid(x)"], [], {}),
    ("creduce_ci8_lse_c_keepdim_avgpool2", 0, (2, 8, 17, 15), conv(8, 32, 3, padding=1, bias=False),
     CONV_IN + ["x = torch.logsumexp(x, dim=1, keepdim=True)", "return F.avg_pool2d(x, 2)"], [], {}),
    ("creduce_ci8_co80_amax_c_tanh", 1, (2, 8, 10, 34), conv(8, 80, 3),
     CONV_IN + ["x = torch.amax(x, dim=-3)", "return torch.tanh(x)"], [], {}),
    ("creduce_groups2_lse_c_half", 1, (2, 16, 12, 18), conv(16, 24, 3, groups=2),
     CONV_IN + ["x = torch.logsumexp(x, 1)", "return x * 0.5"], [], {}),
    ("creduce_ci24_wide_max_c_values", 0, (3, 24, 9, 40), conv(24, 48, 3, padding=(0, 1)),
     CONV_IN + ["return x.max(dim=1).values"], [], {}),
    # 3+ chunks (4 x 1 warps: one warp column), with padding columns (40 of a 48-wide tile), two channel
    # tiles, two groups
    ("creduce_reg_ci24_co40_lse_c_keepdim_scale", 1, (2, 24, 11, 30), conv(24, 40, 3, padding=1),
     CONV_IN + ["x = torch.logsumexp(x, dim=1, keepdim=True)", "return x * self.scale"],
     ["self.scale = nn.Parameter(torch.tensor(0.75))"], {}),
    ("creduce_reg_ci32_co96_relu_mean_c", 1, (2, 32, 10, 21), conv(32, 96, 3), CONV_IN + ["x = torch.relu(x)",
                                                                                   "return x.mean(1)"], [], {}),
    ("creduce_reg_groups2_ci48_sum_c_tanh", 1, (2, 48, 12, 17), conv(48, 64, 3, groups=2, bias=False),
     CONV_IN + ["x = torch.sum(x, dim=1)", "return torch.tanh(x)"], [], {}),
    ("creduce_reg_ci24_co80_lse_c", 0, (2, 24, 9, 14), conv(24, 80, (3, 2)), CONV_IN + ["return torch.logsumexp(x, 1)"],
     [], {}),
    # groups of at most 4 input channels: the fold in the forward on FMAs (each thread its CT channels a column, then
    # cfold_finish): one tile of 16, three (16, 16, 8) with logsumexp, two groups, two tiles at stride 2
    ("fma_creduce_c3_min_c_keepdim_tanh", 1, (2, 3, 17, 30), conv(3, 16, 3),
     CONV_IN + ["x = torch.min(x, dim=1, keepdim=True)[0]", "return torch.tanh(x)"], [], {}),
    ("fma_creduce_c3_co40_lse_c_half", 1, (2, 3, 13, 22), conv(3, 40, 3, padding=1),
     CONV_IN + ["return torch.logsumexp(x, 1) * 0.5"], [], {}),
    ("fma_creduce_g2_ci4_relu_mean_c", 1, (2, 4, 15, 19), conv(4, 12, 3, groups=2),
     CONV_IN + ["x = torch.relu(x)", "return x.mean(dim=1)"], [], {}),
    ("fma_creduce_c3_co20_k5s2_amax_c", 0, (3, 3, 21, 26), conv(3, 20, 5, stride=2, bias=False),
     CONV_IN + ["return torch.amax(x, dim=1)"], [], {}),
]

# 4 x 1 warp halo tiles narrowed to out channels that are not a power of two (trim_halo_n): 80 as two 48-wide tiles
# under a folded max pooling, and two groups of 48 with the staged training epilogue (34-wide rows)
_TABLE += [
    ("halo_trim_ci24_co80_relu_maxpool2", 1, (2, 24, 14, 18), conv(24, 80, 3, padding=1),
     CONV_IN + ["x = torch.relu(x)", "return F.max_pool2d(x, 2)"], [], {}),
    ("halo_trim_groups2_co96_silu_bias_c", 2, (2, 48, 9, 36), conv(48, 96, 3, groups=2),
     CONV_IN + ["x = F.silu(x)", "return x + self.bias"], ["self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
]

# After the convolution's program: 2-d pooling, reductions and views, each followed by a program (issue 9's stages).
_TABLE += [
    ("maxpool2_mish", 3, (2, 4, 22, 20), conv(4, 16, 3), CONV_IN + ["x = F.hardswish(x - 0.5)", "x = F.max_pool2d(x, 2)",
                                                              "return F.mish(x)"], [], {}),
    ("gelu_global_avg_squeeze", 1, (3, 5, 31, 29), conv(5, 12, 5, stride=2),
     CONV_IN + ["x = F.gelu(x)", "x = F.adaptive_avg_pool2d(x, 1)", "return x.squeeze()"], [], {}),
    ("min_channels_keepdim_tanh", 1, (2, 6, 19, 23), conv(6, 12, 3), CONV_IN + ["x = torch.min(x, dim=1, keepdim=True)[0]",
                                                                           "return torch.tanh(x)"], [], {}),
    ("avgpool_ceil_pad_nopadcount_sigmoid_sum", 1, (2, 3, 21, 18), conv(3, 8, 3, padding=1),
     CONV_IN + ["x = self.pool(x)", "x = torch.sigmoid(x)", "return torch.sum(x, dim=[1, 2, 3])"],
     ["self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)"], {}),
    ("avgpool_divisor_relu_mean_hw", 1, (2, 3, 17, 20), conv(3, 6, 3), CONV_IN + ["x = F.avg_pool2d(x, (2, 3), divisor_override=4)",
                                                                           "return torch.relu(x).mean(dim=(2, 3))"], [], {}),
    ("adaptive_max_5x3_scale_logsumexp_c", 1, (2, 4, 23, 17), conv(4, 10, 3),
     CONV_IN + ["x = F.adaptive_max_pool2d(x, (5, 3))", "x = x * self.scale", "return torch.logsumexp(x, dim=1)"],
     ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) + 0.5)"], {}),
    ("maxpool_dilated_ceil_amax_hw_relu", 1, (2, 3, 26, 25), conv(3, 8, 3),
     CONV_IN + ["x = nn.functional.max_pool2d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True)",
                "return torch.relu(torch.amax(x, dim=(2, 3)))"], [], {}),
    # per-channel parameters and a buffer registered as (C,) and viewed in forward, before and after a reduction
    ("bias_view_sub_relu_scale_index_view", 4, (2, 3, 17, 15), conv(3, 12, 3, padding=1),
     CONV_IN + ["x = x - self.bias.view(1, -1, 1, 1)", "x = torch.relu(x) * self.scale[None, :, None, None]",
                "return x.amax(dim=(2, 3)) + self.shift.unsqueeze(0)"],
     ["self.bias = nn.Parameter(torch.randn(out_channels))", 'self.register_buffer("scale", torch.rand(out_channels) + 0.5)',
      "self.shift = nn.Parameter(torch.randn(out_channels, 1, 1).squeeze(-1).squeeze(-1))"], {}),
    # the conv's own bias read again by the program (its gradient sums both uses)
    ("conv_bias_again_view_tanh", 3, (2, 4, 13, 18), conv(4, 10, 3, stride=(1, 2)),
     CONV_IN + ["return torch.tanh(x) * self.conv.bias.view(1, -1, 1, 1) - 0.5"], [], {}),
    ("mean_keepdim_flatten_bias_c", 1, (3, 3, 15, 16), conv(3, 7, 3, padding=1),
     CONV_IN + ["x = x.mean(dim=[2, 3], keepdim=True)", "x = torch.flatten(x, 1)", "return x + self.bias"],
     ["self.bias = nn.Parameter(torch.randn(out_channels) * 0.5)"], {}),
    ("adaptive_avg_4xNone_sum_batch", 0, (3, 2, 18, 13), conv(2, 5, 3),
     CONV_IN + ["x = F.adaptive_avg_pool2d(x, (4, None))", "return x.sum(0)"], [], {}),
    ("max_w_values_sub_amin_all", 1, (2, 3, 14, 19), conv(3, 6, (3, 2)),
     CONV_IN + ["x = x.max(dim=3).values", "x = x - self.shift", "return x.amin()"],
     ["self.shift = nn.Parameter(torch.tensor(0.25))"], {}),
    ("max_all_relu_clamp", 1, (2, 3, 12, 11), conv(3, 4, 3),
     CONV_IN + ["x = torch.clamp(x, -0.2, 0.3)", "return torch.max(x)"], [], {}),
    ("adaptive_max_global_view_mul", 1, (2, 3, 16, 15), conv(3, 9, 3),
     CONV_IN + ["x = self.pool(x)", "x = x.view(x.size(0), -1)", "return x * 2.0"], ["self.pool = nn.AdaptiveMaxPool2d(1)"], {}),
    # a ResNet stem: 3 input channels, 7x7 taps at stride 2 (grad_x with FMAs over 4 stride phases), overlapping max pool
    ("stem_k7s2p3_relu_maxpool3s2p1", 1, (2, 3, 37, 45), conv(3, 16, 7, stride=2, padding=3),
     CONV_IN + ["return self.pool(torch.relu(x))"], ["self.pool = nn.MaxPool2d(3, 2, 1)"], {}),
    # a sweep's draw (seed 3301) whose TF32 grad_w on two m16 tiles a warp spilled 48 bytes on sm_90 at column stride 2
    ("halo_w_ci14_co53_s12_clamp_add_avgpool", 2, (2, 14, 36, 30), conv(14, 53, 3, stride=(1, 2)),
     CONV_IN + ["return F.avg_pool2d(x + torch.clamp(x, min=-1.0), 3, stride=1, count_include_pad=False)"], [], {}),
    # grad_w on wgmma (HALO_WG): two out-channel tiles of 80 (160 out channels, 2 warpgroups); a (2, 1) kernel's 48
    # (channel, tap) rows on one warpgroup (a 1x1 kernel's 40 rows, once the other such case, now take the pointwise
    # grad_w); a lone dilated 3x5 conv reading gy itself on 4 warpgroups; column stride 2
    # with groups on 3; a dilated 3x3 with 100 out channels (a padded n of 104) and odd rows (one-float gz copies)
    ("wgrad_wg_ci8_co160_relu", 1, (2, 8, 14, 36), conv(8, 160, 3), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("wgrad_wg_ci40_co112_k1_tanh_bias_c", 2, (3, 40, 9, 40), conv(40, 112, 1),
     CONV_IN + ["return torch.tanh(x) + self.bias1"], ["self.bias1 = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
    ("wgrad_wg_ci24_co112_k21_tanh_bias_c", 2, (3, 24, 9, 40), conv(24, 112, (2, 1)),
     CONV_IN + ["return torch.tanh(x) + self.bias1"], ["self.bias1 = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
    ("wgrad_wg_lone_ci16_co128_k3x5_dil21", 0, (2, 16, 13, 24), conv(16, 128, (3, 5), dilation=(2, 1)), ["return self.conv(x)"],
     [], {}),
    ("wgrad_wg_g2_ci32_co192_s12_p1_silu", 1, (2, 32, 17, 34), conv(32, 192, 3, stride=(1, 2), padding=1, groups=2),
     CONV_IN + ["return F.silu(x)"], [], {}),
    ("wgrad_wg_ci8_co100_dil2_gelu_sub", 2, (3, 8, 15, 17), conv(8, 100, 3, dilation=2), CONV_IN + ["return F.gelu(x) - 0.25"],
     [], {}),
    # a sweep's draw (seed 4101) whose direct grad_x (every tap of a 5 x 5 kernel unrolled) spilled 4 bytes on sm_80
    # and sm_90 at 4 blocks an SM (64 registers)
    ("direct_ci1_co72_k5_s2_d3_adaptive2_min_c", 1, (3, 1, 31, 17), conv(1, 72, 5, stride=2, padding=1, dilation=3, bias=False),
     CONV_IN + ["x = F.adaptive_avg_pool2d(x, 2)", "return torch.min(x, 1, False)[0] * 0.5"], [], {}),
    # a sweep's draw (seed 3801) whose FMA forward (16 out channels a thread, 18 input columns a row) spilled 84 bytes
    # on sm_80 and sm_90 while it held a predicate per input column
    ("fma_fwd_ci2_co58_k1x5_s3_d2_mish_shift_clip", 5, (1, 2, 36, 39), conv(2, 58, (1, 5), stride=3, dilation=2, bias=False),
     CONV_IN + ["return torch.clip(torch.tanh(self.shift - F.mish(x)) + self.bias1, -0.5, 0.5)"],
     ['self.register_buffer("shift", torch.randn(1, out_channels, 1, 1) * 0.5)', "self.bias1 = nn.Parameter(torch.rand(1))"], {}),
]

# Shapes of random benchmark draws (thirty-fourth session) that fell off the fast paths: input / out channels a group
# not a multiple of 8 (the halo's last chunk padded with zeros: forward and grad_x), a dilated 5x5 kernel and a
# stride-2 3x5 kernel whose grad_w halo (BM 32) and wgmma plan (fewer warpgroups) shrink to fit, and reductions that
# keep the innermost dim (splits of the reduced range) or reduce everything (the finish a block an output)
_TABLE += [
    ("halo_pad_ci12_co20_k3_p1_leaky_relu", 1, (2, 12, 19, 37), conv(12, 20, 3, padding=1),
     CONV_IN + ["return F.leaky_relu(x, 0.2)"], [], {}),
    ("halo_pad_ci76_co46_k5_p3_dil3_exp_relu", 3, (1, 76, 30, 26), conv(76, 46, 5, padding=3, dilation=3),
     CONV_IN + ["x = torch.clip(x, -0.5, 0.25)", "return F.relu(torch.exp(x))"], [], {}),
    ("halo_wg_s2_co128_k3x5_p1_logsumexp_c_w", 3, (1, 64, 21, 40), conv(64, 128, (3, 5), stride=2, padding=1, bias=False),
     CONV_IN + ["x = torch.maximum(x, torch.tensor(0.75)) * x", "return x.logsumexp((1, 3), keepdim=False).abs()"], [], {}),
    ("reduce_keep_w_mean_ch_hardsigmoid", 1, (2, 16, 70, 21), conv(16, 32, 3, padding=1),
     CONV_IN + ["x = F.hardsigmoid(x)", "return torch.mean(x, [1, 2], False)"], [], {}),
    ("reduce_all_amax_wide_finish_add", 1, (2, 8, 66, 66), conv(8, 8, 3),
     CONV_IN + ["return torch.amax(x + 0.75, dim=(0, 1, 2, 3), keepdim=True)"], [], {}),
]

# Kernels of few taps: halo chunks wider than 8 channels (halo_cc): a 1x1 kernel on two 64-channel chunks, a dilated
# (2, 1) kernel on 24-channel ones (a random benchmark draw's shape) whose grad_x reads 32-channel chunks of gz, and a
# (1, 3) kernel whose second 24-channel chunk is padded (44 channels)
_TABLE += [
    ("halo_wide_k1_ci128_co48_relu", 1, (2, 128, 11, 36), conv(128, 48, 1), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("halo_wide_k21_ci48_co96_p1_dil31_softplus_sub", 2, (2, 48, 17, 20), conv(48, 96, (2, 1), padding=1, dilation=(3, 1)),
     CONV_IN + ["return F.softplus(x) - 0.5"], [], {}),
    ("halo_wide_pad_k13_ci44_co40_p01_silu", 1, (2, 44, 13, 29), conv(44, 40, (1, 3), padding=(0, 1)),
     CONV_IN + ["return F.silu(x)"], [], {}),
]

# Pointwise convolutions (1x1, stride 1, unpadded): grad_w as a plain GEMM (PW_W) on out / input channel tiles that
# the channels do not fill, a plane that is not a multiple of the 32-position slice nor of 4 floats (one- and two-float
# copies), groups with dilation (no effect on a 1x1 kernel), and a lone conv whose grad_w reads the incoming gradient
_TABLE += [
    ("pw_k1_ci20_co40_odd_plane_relu", 1, (3, 20, 7, 9), conv(20, 40, 1), CONV_IN + ["return torch.relu(x)"], [], {}),
    ("pw_k1_groups2_ci64_co96_dil2_silu_bias_c", 2, (2, 64, 10, 12), conv(64, 96, 1, dilation=2, groups=2),
     CONV_IN + ["x = F.silu(x)", "return x + self.bias"], ["self.bias = nn.Parameter(torch.randn(96, 1, 1))"], {}),
    ("pw_lone_k1_ci200_co130_w30", 0, (2, 200, 5, 6), conv(200, 130, 1), ["return self.conv(x)"], [], {}),
]

# The rows beyond issue 9's list, all of them: roots, logs and reciprocals of a value kept >= 1, a fractional power;
# erf and the shrinks before a pooling stage, logsigmoid, expm1, square and the two jumps after it
_TABLE += [
    ("rows_sqrt_log_rsqrt_reciprocal_pow15", 10, (2, 8, 13, 15), conv(8, 16, 3, padding=1),
     CONV_IN + ["y = x * x + 1.0", "x = torch.sqrt(y) + torch.log(y) - torch.rsqrt(y) * torch.reciprocal(y)", "return x ** 1.5"],
     [], {}),
    ("rows_erf_shrinks_maxpool2_logsigmoid_expm1_square_threshold", 13, (2, 4, 14, 16), conv(4, 8, 3),
     CONV_IN + ["x = torch.erf(x) + torch.tanh(x)", "x = F.softshrink(x, 0.25) + F.tanhshrink(x)",
                "x = F.max_pool2d(x, 2)", "x = F.logsigmoid(x) + torch.expm1(x).square()",
                "return F.hardshrink(x, 0.1) + F.threshold(x, -0.5, 0.0)"], [], {}),
]

# F.conv2d on the model's own tensors (conv_epilogue_problem's forms): drawn as nn.Conv2d draws them, or by torch.randn
# under other names; a halo forward with a per-channel parameter, groups at stride 2 without a bias into a pooling
# stage and a channel mean, and a lone 'same' dilated conv
_FUNCTIONAL = [
    ("functional_relu_bias_c", 2, (2, 8, 14, 17), conv(8, 16, 3, padding=1), CONV_IN + ["x = torch.relu(x)", "return x + self.bias"],
     ["self.bias = nn.Parameter(torch.randn(16, 1, 1))"], {}, "functional"),
    ("functional_randn_groups2_s2_no_bias_silu_maxpool2_mean_c", 1, (2, 6, 21, 19), conv(6, 12, 3, stride=2, groups=2, bias=False),
     CONV_IN + ["x = F.silu(x)", "x = F.max_pool2d(x, 2)", "return x.mean(dim=1)"], [], {}, "functional_randn"),
    ("functional_randn_lone_same_k35_dil21", 0, (2, 3, 16, 18), conv(3, 5, (3, 5), padding="same", dilation=(2, 1)),
     ["return self.conv(x)"], [], {}, "functional_randn"),
]

CASES: list[tuple[str, str]] = [(cid, conv_epilogue_problem(shape, c, fwd, init, args))
                                for cid, _, shape, c, fwd, init, args in _TABLE]
CASES += [(cid, conv_epilogue_problem(shape, c, fwd, init, args, form=form))
          for cid, _, shape, c, fwd, init, args, form in _FUNCTIONAL]
CASE = dict(CASES)
CASE_OPS = {row[0]: row[1] for row in _TABLE + _FUNCTIONAL}

# The hardening matrix and the runtime tier (CUDA graphs, torch.compile, streams, a second GPU) run this one: the
# conv with a per-channel parameter, then a max-pooling stage and a reduction stage with their programs.
HARDENING: str = conv_epilogue_problem((2, 3, 18, 20), conv(3, 8, 3),
                                       CONV_IN + ["x = torch.relu(x) + self.bias", "x = F.max_pool2d(x, 2)",
                                                  "return torch.tanh(x).sum(dim=[2, 3])"],
                                       ["self.bias = nn.Parameter(torch.randn(bias_shape))"], {"bias_shape": (8, 1, 1)})


# ------------------------------------------------------------------------------------------------ random problems

CONSTS = (0.25, 0.3, 0.5, 0.75, 1.5, 2.0)
OP_PARAMS = {"slope": (0.01, 0.1, 0.2), "alpha": (0.5, 1.0, 1.5), "beta": (0.5, 1, 2), "threshold": (5, 10, 20),
             "lo": (-1.0, -0.5, -0.25, 0.0), "hi": (0.25, 0.5, 1.0, 2.0)}

# Unary ops: (forms, bound of |result| from the operand's bound m and the drawn parameters p). A form is an
# expression over {v} or a module constructor "nn.X(...)" (then self.act<i> in __init__).
UNARY = {
    "relu": (("torch.relu({v})", "F.relu({v})", "{v}.relu()", "nn.ReLU()"), lambda m, p: m),
    "relu6": (("F.relu6({v})", "nn.ReLU6()"), lambda m, p: min(m, 6)),
    "leaky_relu": (("F.leaky_relu({v}, {slope})", "F.leaky_relu({v}, negative_slope={slope})", "nn.LeakyReLU({slope})"),
                   lambda m, p: m),
    "elu": (("F.elu({v}, alpha={alpha})", "nn.ELU(alpha={alpha})"), lambda m, p: max(m, p["alpha"])),
    "selu": (("torch.selu({v})", "F.selu({v})", "nn.SELU()"), lambda m, p: 1.1 * m + 1.8),
    "celu": (("F.celu({v}, alpha={alpha})", "nn.CELU({alpha})"), lambda m, p: max(m, p["alpha"])),
    "gelu": (("F.gelu({v})", "F.gelu({v}, approximate='tanh')", "nn.GELU()", "nn.GELU(approximate='tanh')"), lambda m, p: m),
    "silu": (("F.silu({v})", "nn.SiLU()"), lambda m, p: m),
    "mish": (("F.mish({v})", "nn.Mish()"), lambda m, p: m),
    "softplus": (("F.softplus({v})", "F.softplus({v}, beta={beta}, threshold={threshold})",
                  "nn.Softplus(beta={beta}, threshold={threshold})"), lambda m, p: m + 2),
    "sigmoid": (("torch.sigmoid({v})", "{v}.sigmoid()", "nn.Sigmoid()"), lambda m, p: 1),
    "tanh": (("torch.tanh({v})", "{v}.tanh()", "nn.Tanh()"), lambda m, p: 1),
    "hardtanh": (("F.hardtanh({v}, {lo}, {hi})", "nn.Hardtanh({lo}, {hi})"), lambda m, p: 2),
    "hardswish": (("F.hardswish({v})", "nn.Hardswish()"), lambda m, p: m),
    "hardsigmoid": (("F.hardsigmoid({v})", "nn.Hardsigmoid()"), lambda m, p: 1),
    "softsign": (("F.softsign({v})", "nn.Softsign()"), lambda m, p: 1),
    "abs": (("torch.abs({v})", "{v}.abs()"), lambda m, p: m),
    "neg": (("-{v}", "torch.neg({v})"), lambda m, p: m),
    "exp": (("torch.exp({v})", "{v}.exp()"), lambda m, p: math.exp(m)),  # drawn only for m <= EXP_MAX
    "clamp": (("torch.clamp({v}, {lo}, {hi})", "{v}.clamp(min={lo}, max={hi})", "torch.clip({v}, {lo}, {hi})"), lambda m, p: 2),
    "clamp_min": (("torch.clamp({v}, min={lo})", "{v}.clamp_min({lo})"), lambda m, p: max(m, 1)),
    "clamp_max": (("torch.clamp_max({v}, {hi})", "{v}.clamp(max={hi})"), lambda m, p: max(m, 2)),
    # beyond issue 9's list; continuous on the whole line (the roots, logs and reciprocals need a positive operand
    # and hardshrink / threshold jump at their bands: tests/test_pointwise.py checks those rows)
    "square": (("torch.square({v})", "{v} ** 2", "{v}.pow(2)"), lambda m, p: m * m),
    "pow": (("{v} ** 3", "torch.pow({v}, 3)"), lambda m, p: m ** 3),
    "expm1": (("torch.expm1({v})", "{v}.expm1()"), lambda m, p: math.exp(m)),  # drawn only for m <= EXP_MAX
    "erf": (("torch.erf({v})", "{v}.erf()", "torch.special.erf({v})"), lambda m, p: 1),
    "logsigmoid": (("F.logsigmoid({v})", "nn.LogSigmoid()"), lambda m, p: m + 1),
    "tanhshrink": (("F.tanhshrink({v})", "nn.Tanhshrink()"), lambda m, p: m + 1),
    "softshrink": (("F.softshrink({v}, {hi})", "nn.Softshrink({hi})"), lambda m, p: m),
}
EXP_MAX = 2.5  # exp only of values bounded by this (tanh, sigmoid, clamp, ... or a conv output scaled down)
CONV_MAG = 4.0  # |conv output| with PyTorch's default init on rand/randn inputs, with margin
MAG_MAX = 100.0  # a program whose values may exceed this is redrawn (float32 at atol=rtol=1e-4)

# Binary ops with a constant {c} (a Python number or a 0-d tensor constant).
CONST_FORMS = {
    "add": ("{v} + {c}", "{c} + {v}", "torch.add({v}, {c})", "{v}.add({c})"),
    "sub": ("{v} - {c}", "{c} - {v}", "torch.sub({v}, {c})", "torch.rsub({v}, {c})"),
    "mul": ("{v} * {c}", "{c} * {v}", "torch.mul({v}, {c})", "{v}.mul({c})", "{v} * torch.tensor({c})"),
    "div": ("{v} / {c}", "torch.div({v}, {c})", "{v}.div({c})"),
    "maximum": ("torch.maximum({v}, torch.tensor({c}))", "torch.max({v}, torch.tensor({c}))", "{v}.maximum(torch.tensor({c}))"),
    "minimum": ("torch.minimum({v}, torch.tensor({c}))", "torch.min({v}, torch.tensor({c}))"),
}
# Binary ops with a model parameter or buffer self.{p}: its name, initializations ({shape}: scalar or per channel).
PARAM_FORMS = {
    "add": ("bias", ("torch.randn({shape}) * 0.5", "torch.rand({shape})"), ("{v} + self.{p}", "self.{p} + {v}", "torch.add({v}, self.{p})")),
    "sub": ("shift", ("torch.randn({shape}) * 0.5",), ("{v} - self.{p}", "self.{p} - {v}")),
    "mul": ("scale", ("torch.rand({shape}) + 0.5", "torch.ones({shape})"), ("{v} * self.{p}", "self.{p} * {v}", "{v}.mul(self.{p})")),
    "div": ("divisor", ("torch.rand({shape}) + 1",), ("{v} / self.{p}", "torch.div({v}, self.{p})")),
}
PARAM_SHAPES = ("out_channels, 1, 1", "1, out_channels, 1, 1", "1", "()", "out_channels")
# how forward reads a parameter registered as (out_channels,): through a view to (1, C, 1, 1)
PARAM_VIEWS = ("{p}.view(1, -1, 1, 1)", "{p}[None, :, None, None]", "{p}.unsqueeze(-1).unsqueeze(-1)",
               "{p}.reshape(1, -1, 1, 1)", "{p}.view(-1, 1, 1)")
# Binary ops of two program values (a DAG edge to an earlier value {u}). No maximum/minimum here: two values equal on
# a region (relu(y) and y) tie there, and ties decided by the last bit differ between any two implementations.
VALUE_FORMS = {"add": ("{v} + {u}", "torch.add({u}, {v})"), "sub": ("{v} - {u}", "{u} - {v}"),
               "mul": ("{v} * {u}", "torch.mul({u}, {v})")}


def _fresh(base: str, init: list[str]) -> str:
    """A new attribute name (each __init__ line adds one attribute)."""
    return f"{base}{len(init)}" if init else base


def _random_op(rng: random.Random, v: str, m: float, earlier: list[tuple[str, float]], init: list[str]):
    """One pointwise op on the value named v (|v| <~ m): (expression, __init__ line or None, bound of |result|)."""
    kind = rng.choices(("unary", "const", "param", "value"), (5, 2, 1.5, 1.5 if earlier else 0))[0]
    if kind == "unary":
        names = [k for k in UNARY if k not in ("exp", "expm1") or m <= EXP_MAX]
        forms, bound = UNARY["exp" if "exp" in names and rng.random() < 0.25 else rng.choice(names)]
        p = {k: rng.choice(vals) for k, vals in OP_PARAMS.items()}
        form = rng.choice(forms).format(v=v, **p)
        if form.startswith("nn."):
            name = _fresh("act", init)
            return f"self.{name}({v})", f"self.{name} = {form}", bound(m, p)
        return form, None, bound(m, p)
    if kind == "const":
        op, c = rng.choice(tuple(CONST_FORMS)), rng.choice(CONSTS)
        c = -c if op in ("maximum", "minimum") and rng.random() < 0.5 else c
        mag = {"add": m + c, "sub": m + c, "mul": m * c, "div": m / c}.get(op, max(m, abs(c)))
        return rng.choice(CONST_FORMS[op]).format(v=v, c=c), None, mag
    if kind == "param":
        op = rng.choice(tuple(PARAM_FORMS))
        base, inits, forms = PARAM_FORMS[op]
        name, shape = _fresh(base, init), rng.choice(PARAM_SHAPES)
        value = rng.choice(inits).format(shape=shape)
        line = f"self.{name} = nn.Parameter({value})" if rng.random() < 0.7 else f'self.register_buffer("{name}", {value})'
        read = rng.choice(PARAM_VIEWS).format(p=name) if shape == "out_channels" else name
        return rng.choice(forms).format(v=v, p=read), line, {"add": m + 2, "sub": m + 2, "mul": 2 * m, "div": m}[op]
    op, (u, mu) = rng.choice(tuple(VALUE_FORMS)), rng.choice(earlier)
    return rng.choice(VALUE_FORMS[op]).format(v=v, u=u), None, m * mu if op == "mul" else m + mu


def _random_program(rng: random.Random) -> tuple[list[str], list[str], int]:
    """(forward lines, __init__ lines, number of ops): 0..5 ops, each on the previous value, binary ones also on
    constants, parameters/buffers or an earlier value."""
    n_ops = rng.randint(0, 5)
    if n_ops == 0:
        return ["return self.conv(x)"], [], 0
    forward, init, values = ["y = self.conv(x)"], [], [("y", CONV_MAG)]
    for i in range(1, n_ops + 1):
        while True:
            expr, line, mag = _random_op(rng, *values[-1], values[:-1], init)
            if mag <= MAG_MAX:
                break
        forward.append(f"h{i} = {expr}" if i < n_ops else f"return {expr}")
        init += [line] if line else []
        values.append((f"h{i}", mag))
    return forward, init, n_ops


def _pair(v) -> tuple[int, int]:
    return v if isinstance(v, tuple) else (v, v)


def _random_conv(rng: random.Random, halo: bool = False, few: bool = False) -> tuple[tuple[int, int, int, int], dict]:
    """(input shape, Conv2d kwargs): every argument of the family's scope, output at least 1x1; halo: a shape the
    halo forward takes (channels per group a multiple of 8, stride within the kernel); few: at most 4 input channels
    a group (the forward on FMAs)."""
    if few:
        groups = rng.choice((1, 1, 2))
        ci, co = groups * rng.randint(1, 4), groups * rng.randint(4, 40)
    elif halo:
        groups = rng.choice((1, 1, 2))
        ci, co = groups * rng.choice((8, 8, 16, 24, 32)), groups * rng.choice((8, 16, 24, 32, 40, 72))
        if rng.random() < 0.3:  # wide groups: grad_w on wgmma (WG_COG_MIN), two out-channel tiles past 128
            co = groups * rng.choice((96, 104, 128, 136, 160))
    elif rng.random() < 0.2:  # depthwise, channel multiplier 1..3
        ci = rng.randint(1, 24)
        groups, co = ci, ci * rng.randint(1, min(3, 72 // ci))
    elif rng.random() < 0.4:  # channels per group in multiples of 8, as most models have (the halo kernels' shapes)
        groups = rng.choice((1, 1, 1, 2, 4))
        ci, co = groups * rng.choice((8, 16, 24)), groups * rng.choice((8, 16, 24, 32, 40, 96, 128))
    else:
        groups = rng.choice((1, 1, 1, 2, 3, 4))
        ci, co = groups * rng.randint(1, 24 // groups), groups * rng.randint(1, 72 // groups)
    kernel = rng.randint(1, 5) if rng.random() < 0.6 else (rng.randint(1, 5), rng.randint(1, 5))
    stride = rng.choice((1, 1, 2, 3)) if rng.random() < 0.8 else (rng.randint(1, 3), rng.randint(1, 3))
    dilation = rng.choice((1, 1, 2, 3)) if rng.random() < 0.85 else (rng.randint(1, 3), rng.randint(1, 3))
    k, s, d = _pair(kernel), _pair(stride), _pair(dilation)
    if halo and (s[0] > k[0] or s[1] > k[1]):
        stride = s = (min(s[0], k[0]), min(s[1], k[1]))
    r = rng.random()
    if r < 0.15 and s == (1, 1):
        padding = "same"  # PyTorch takes 'same' only with stride 1; asymmetric for even effective kernels
    elif r < 0.3:
        padding = "valid"
    elif r < 0.5:
        padding = (rng.randint(0, k[0] // 2 + 1), rng.randint(0, k[1] // 2 + 1))
    else:
        padding = rng.randint(0, max(k) // 2)
    kw = conv(ci, co, kernel)
    for key, value, default in (("stride", stride, s == (1, 1)), ("padding", padding, padding == 0),
                                ("dilation", dilation, d == (1, 1)), ("groups", groups, groups == 1)):
        if not default or rng.random() < 0.2:  # defaults written out now and then
            kw[key] = value
    if rng.random() < 0.25:
        kw["bias"] = False
    p = (0, 0) if padding in ("same", "valid") else _pair(padding)
    lo = [1 if padding == "same" else max(1, dd * (kk - 1) + 1 - 2 * pp) for kk, dd, pp in zip(k, d, p)]
    return (rng.randint(1, 3), ci, rng.randint(lo[0], 40), rng.randint(lo[1], 40)), kw


# Stages after the convolution's program: a shape-changing op on the value v of rank r, then 0..2 pointwise ops.
def _random_pool(rng: random.Random, v: str) -> str:
    kind = rng.choice(("avg", "max", "max", "adaptive_avg", "adaptive_max"))
    if kind.startswith("adaptive"):
        size = rng.choice((1, 1, 2, 3, (2, 3), (None, 2), (3, None)))
        fn = f"F.{kind}_pool2d"
        if kind == "adaptive_max" and side_draw(f"{v}{size}", 10):  # the (values, indices) pair, values read
            return f"{fn}({v}, {size!r}, return_indices=True)[0]"
        return rng.choice((f"{fn}({v}, {size!r})", f"{fn}({v}, output_size={size!r})"))
    k = rng.randint(1, 3) if rng.random() < 0.7 else (rng.randint(1, 3), rng.randint(1, 3))
    kk = _pair(k)
    args = [repr(k)]
    if rng.random() < 0.3:  # windows that tile the input (stride = kernel, no padding): a halo forward folds them in
        return f"F.{kind}_pool2d({v}, {', '.join(args + (['ceil_mode=True'] if rng.random() < 0.2 else []))})"
    if rng.random() < 0.7:
        args.append(f"stride={rng.choice((1, 2, 2, 3))!r}")
    if rng.random() < 0.4:
        args.append(f"padding={min(kk) // 2 if rng.random() < 0.5 else (kk[0] // 2, kk[1] // 2)!r}")
    if rng.random() < 0.3:
        args.append("ceil_mode=True")
    if kind == "avg":
        if rng.random() < 0.3:
            args.append("count_include_pad=False")
        if rng.random() < 0.2:
            args.append(f"divisor_override={rng.randint(1, 5)}")
    elif rng.random() < 0.3:
        args.append(f"dilation={rng.choice((2, (1, 2), (2, 1)))!r}")
    if kind == "max" and side_draw(f"{v}{args}", 10):  # the (values, indices) pair, values read
        return f"F.max_pool2d({v}, {', '.join(args + ['return_indices=True'])})[0]"
    return f"F.{kind}_pool2d({v}, {', '.join(args)})"


def _random_reduction(rng: random.Random, v: str, rank: int) -> tuple[str, int]:
    """(expression, rank after it)."""
    op = rng.choice(("sum", "mean", "amax", "amin", "logsumexp", "max_dim", "min_dim", "max_all", "min_all"))
    if op in ("max_all", "min_all"):
        return rng.choice((f"torch.{op[:3]}({v})", f"{v}.{op[:3]}()")), 0
    keep = rng.random() < 0.4
    if op in ("max_dim", "min_dim"):
        d = rng.randrange(rank) if rng.random() < 0.8 else rng.randrange(rank) - rank
        form = rng.choice(("torch.{f}({v}, dim={d}, keepdim={k})[0]", "{v}.{f}({d}, keepdim={k}).values",
                           "torch.{f}({v}, {d}, {k})[0]"))
        return form.format(f=op[:3], v=v, d=d, k=keep), rank - (0 if keep else 1)
    dims = sorted(rng.sample(range(rank), rng.randint(1, rank)))
    if rng.random() < 0.15:
        dims = [0] if rank > 1 else dims
    elif rank == 4 and rng.random() < 0.3:  # over (H, W), as a global pool: a halo forward folds it in for inference
        dims = rng.choice(([2, 3], [-2, -1], [-1, -2]))
    dim = dims[0] if len(dims) == 1 and rng.random() < 0.5 else (tuple(dims) if rng.random() < 0.5 else dims)
    form = rng.choice(("torch.{f}({v}, dim={d!r}, keepdim={k})", "{v}.{f}({d!r}, keepdim={k})", "torch.{f}({v}, {d!r}, {k})"))
    return form.format(f=op, v=v, d=dim, k=keep), rank - (0 if keep else len(dims))


STAGE_UNARY = ("torch.tanh({v})", "torch.sigmoid({v})", "torch.relu({v})", "{v}.abs()", "F.silu({v})", "{v} * 0.5",
               "{v} - 0.25", "torch.clamp({v}, -1.0, 1.0)", "F.gelu({v})")


def _random_fold(rng: random.Random, v: str) -> tuple[str, int, bool]:
    """A first stage that a halo forward folds in: pooling whose windows tile its CTA's block, a reduction over
    (H, W) (sum, mean, amax, amin; adaptive avg / max pooling to 1x1) or over the channels alone (sum, mean, amax,
    amin, logsumexp, max / min values). (expression, rank after it, whether its dim 1 is still the conv's channels)."""
    if rng.random() < 0.5:
        k = rng.choice((1, 2, 2, (1, 2), (2, 1), (2, 2)))
        return f"F.{rng.choice(('avg', 'max'))}_pool2d({v}, {k!r})", 4, True
    if rng.random() < 0.3:
        return f"F.adaptive_{rng.choice(('avg', 'max'))}_pool2d({v}, 1)", 4, True
    keep = rng.random() < 0.5
    if rng.random() < 0.5:  # over the channels alone (FUSED_CREDUCE)
        op, dim = rng.choice(("sum", "mean", "amax", "amin", "logsumexp", "max", "min")), rng.choice((1, -3))
        if op in ("max", "min"):
            expr = rng.choice((f"torch.{op}({v}, dim={dim}, keepdim={keep})[0]", f"{v}.{op}({dim}, keepdim={keep}).values"))
        else:
            expr = f"torch.{op}({v}, dim={dim}, keepdim={keep})"
        return expr, 4 if keep else 3, False
    op, dims = rng.choice(("sum", "mean", "amax", "amin")), rng.choice(("(2, 3)", "[-2, -1]", "(-1, -2)"))
    return f"torch.{op}({v}, dim={dims}, keepdim={keep})", 4 if keep else 2, keep


def _random_tail(rng: random.Random, forward: list[str], init: list[str], fold: bool = False) -> int:
    """Replaces forward's return with 1..2 stages (pooling, a reduction or a view, each then 0..2 pointwise ops,
    sometimes with a scalar or per-channel parameter); fold: the first stage is one a halo forward folds in
    (_random_fold). The number of pointwise ops added."""
    last = forward.pop()
    value = last[len("return "):]
    if value == "self.conv(x)":
        forward.append("y = self.conv(x)")
        value = "y"
    else:
        forward.append(f"t0 = {value}")
        value = "t0"
    rank, channels, n_ops = 4, True, 0
    for i in range(1, rng.randint(1, 2) + 1):
        r = rng.random()
        if fold and i == 1:
            expr, rank, channels = _random_fold(rng, value)
        elif rank == 4 and r < 0.45:
            expr = _random_pool(rng, value)
        elif rank >= 2 and r < 0.55:
            expr = rng.choice((f"{value}.flatten(1)", f"torch.flatten({value}, 1)", f"{value}.view({value}.size(0), -1)"))
            rank, channels = 2, False
        else:
            expr, rank = _random_reduction(rng, value, rank)
            channels = False
        if expr.endswith(")[0]") and side_draw(expr, 2):  # a (values, indices) pair unpacked, the indices unread
            forward.append(f"s{i}, _ = {expr[:-3]}")
        else:
            forward.append(f"s{i} = {expr}")
        value = f"s{i}"
        for j in range(rng.randint(0, 2)):
            if rng.random() < 0.25:
                per_channel = channels and rng.random() < 0.6
                name = _fresh("post", init)
                shape = "out_channels, 1, 1" if per_channel else "()"
                init.append(f"self.{name} = nn.Parameter(torch.rand({shape}) + 0.5)")
                expr = rng.choice(("{v} * self.{p}", "{v} + self.{p}")).format(v=value, p=name)
            else:
                expr = rng.choice(STAGE_UNARY).format(v=value)
            forward.append(f"s{i}_{j} = {expr}")
            value = f"s{i}_{j}"
            n_ops += 1
        if rank == 0:
            break
    forward.append(f"return {value}")
    return n_ops


def _user(source: str) -> dict:
    ns: dict = {"__name__": "kgen_reference"}
    exec(compile(source, "<problem>", "exec"), ns)
    return ns


def _meta_run(source: str):
    """(Model, input, output) on the meta device."""
    ns = _user(source)
    with torch.device("meta"):
        model = ns["Model"](*ns["get_init_inputs"]())
        x = ns["get_inputs"]()[0]
        return model, x, model(x)


def _valid(source: str) -> bool:
    try:
        _meta_run(source)
    except (RuntimeError, ValueError, IndexError):
        return False
    return True


# Changes a Model may make to what nn.Conv2d drew (init_plan replays each as an "adjust" step)
CONV_INIT_CHANGES = [
    "self.conv.bias = nn.Parameter(self.conv.bias + torch.ones_like(self.conv.bias) * 0.02)",
    "nn.init.xavier_uniform_(self.conv.weight)",
    "nn.init.kaiming_normal_(self.conv.weight, mode='fan_out', nonlinearity='relu')",
    "nn.init.zeros_(self.conv.bias)",
    "nn.init.normal_(self.conv.weight, 0.0, 0.05)",
]


def _random_case(rng: random.Random) -> tuple[str, int]:
    """(problem source, number of pointwise ops written): a random conv and program, and about half the time stages
    after it; redrawn until PyTorch takes it (a pooling window may not fit a small conv output)."""
    while True:
        fold = rng.random() < 0.15  # a halo conv (or, a quarter of them, few input channels) whose first stage inference folds into it
        few = fold and rng.random() < 0.25
        shape, kw = _random_conv(rng, halo=fold and not few, few=few)
        forward, init, n_ops = _random_program(rng)
        if fold or rng.random() < 0.5:
            n_ops += _random_tail(rng, forward, init, fold)
        fill = rng.choice(("rand", "randn"))
        form = "functional" if rng.random() < 0.2 else "module"  # F.conv2d, its tensors drawn as nn.Conv2d's
        source = conv_epilogue_problem(shape, kw, forward, init, fill=fill, form=form)
        if form == "module":  # a sixth of them change the conv's own draws (drawn from the text: rng's draws stay)
            pick = random.Random(source)
            if pick.random() < 1 / 6:
                change = pick.choice([c for c in CONV_INIT_CHANGES if kw.get("bias", True) or "bias" not in c])
                source = conv_epilogue_problem(shape, kw, forward, [change] + init, fill=fill, form=form)
        if _valid(source):
            return source, n_ops


def random_problem(rng: random.Random) -> str:
    """A random problem anywhere in the family's scope: random conv arguments and a random pointwise program of
    0..5 ops (chains and small DAGs; module, functional, method and operator forms; constants, scalar and
    per-channel parameters and buffers), its values bounded for float32 comparison at atol=rtol=1e-4."""
    return _random_case(rng)[0]


RANDOM = [_random_case(random.Random(f"{NAME}:{seed}")) for seed in range(30)]


# ------------------------------------------------------------------------------------------------------- CPU tier


def _spec(source: str):
    family, spec = match(load_problem(write_problem(source)))
    assert family.NAME == NAME
    return spec


_CONV_ARGS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_CONV_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


class _ConvCalls(torch.overrides.TorchFunctionMode):
    """Records every conv2d call a model makes (nn.Conv2d's and F.conv2d / torch.conv2d alike): its arguments by name
    and its output."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[dict, torch.Tensor]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.conv2d:
            self.calls.append(({**_CONV_DEFAULTS, **dict(zip(_CONV_ARGS, args)), **kwargs}, out))
        return out


def _conv_arguments(model: nn.Module, x: torch.Tensor) -> SimpleNamespace:
    """The convolution's arguments as nn.Conv2d holds them (pairs; padding a pair or a string) and its tensors'
    names: read off model.conv where it is an nn.Conv2d, else recorded from the F.conv2d call model.conv(x) makes
    (the problem files of these tests name the conv's method `conv` in both forms)."""
    if isinstance(model.conv, nn.Conv2d):
        c = model.conv
        return SimpleNamespace(groups=c.groups, kernel_size=c.kernel_size, stride=c.stride, dilation=c.dilation,
                               padding=c.padding, names=("conv.weight", "conv.bias" if c.bias is not None else None))
    tensors = list(model.named_parameters()) + list(model.named_buffers())  # F.conv2d may take either
    with _ConvCalls() as rec:
        model.conv(x)
    assert len(rec.calls) == 1, rec.calls
    c = rec.calls[0][0]
    return SimpleNamespace(groups=c["groups"], kernel_size=tuple(c["weight"].shape[2:]), stride=_pair(c["stride"]),
                           dilation=_pair(c["dilation"]),
                           padding=c["padding"] if isinstance(c["padding"], str) else _pair(c["padding"]),
                           names=tuple(next((n for n, t in tensors if t is v), None) for v in (c["weight"], c["bias"])))


def check_spec(source: str, n_ops: int) -> None:
    spec = _spec(source)
    model, x, y = _meta_run(source)
    conv_mod = _conv_arguments(model, x)
    assert (spec.CI, spec.H, spec.W) == tuple(x.shape[1:])
    assert (spec.CO, spec.HO, spec.WO) == tuple(model.conv(x).shape[1:])
    assert (spec.stages[-1].out_shape if spec.stages else (x.shape[0], spec.CO, spec.HO, spec.WO)) == tuple(y.shape)
    assert (spec.G, spec.KH, spec.KW, spec.SH, spec.SW, spec.DH, spec.DW) == (
        conv_mod.groups, *conv_mod.kernel_size, *conv_mod.stride, *conv_mod.dilation)
    if conv_mod.padding == "same":  # PyTorch pads the odd element of an even effective kernel on the right
        assert (spec.PH, spec.PW) == tuple(d * (k - 1) // 2 for k, d in zip(conv_mod.kernel_size, conv_mod.dilation))
    else:
        assert (spec.PH, spec.PW) == ((0, 0) if conv_mod.padding == "valid" else tuple(conv_mod.padding))
    assert (spec.weight_name, spec.bias_name) == conv_mod.names and spec.HAS_BIAS == (conv_mod.names[1] is not None)
    assert len(spec.program.nodes) + sum(len(st.program.nodes) for st in spec.stages) == n_ops, str(spec.program)


def _stage_reference(st, v: torch.Tensor) -> torch.Tensor:
    """PyTorch's own op for a matched stage (from the stage's fields alone), so a wrong capture shows."""
    if st.kind == "view":
        return v.reshape((v.shape[0], *st.out_shape[1:]) if st.in_batched else st.out_shape)
    if st.kind == "pool":
        if st.op.startswith("adaptive"):
            fn = F.adaptive_avg_pool2d if st.op == "adaptive_avg" else F.adaptive_max_pool2d
            return fn(v, st.out_shape[2:])
        kh, kw, sh, sw, ph, pw, dh, dw = st.window
        if st.op == "avg":
            return F.avg_pool2d(v, (kh, kw), (sh, sw), (ph, pw), st.ceil_mode, st.count_include_pad, st.divisor or None)
        return F.max_pool2d(v, (kh, kw), (sh, sw), (ph, pw), (dh, dw), st.ceil_mode)
    dims, keep = st.dims, st.keepdim
    if st.op in ("max_dim", "min_dim"):
        return getattr(torch, st.op[:3])(v, dims[0], keep)[0]
    if st.op in ("max_all", "min_all"):
        return getattr(torch, st.op[:3])(v)
    if st.op == "window_max":
        return torch.amax(v, dims, keep)
    return getattr(torch, st.op)(v, dims, keep)


def check_program(source: str) -> None:
    """The matched program applied to the float64 conv output equals the Model's float64 forward (constants are
    float32 in the program, division by a constant a float32 reciprocal: hence rtol 1e-5, not 0)."""
    spec = _spec(source)
    ns = _user(source)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]()).double()
    with torch.device("meta"):
        shape = ns["get_inputs"]()[0].shape
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=torch.float64)
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        y = model.conv(x)
        got = reference_forward(spec.program, y, params)[spec.program.output]
        for st in spec.stages:
            got = reference_forward(st.program, _stage_reference(st, got), params)[st.program.output]
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cid", CASE, ids=list(CASE))
def test_case_spec_and_program_match_the_model(cid):
    check_spec(CASE[cid], CASE_OPS[cid])
    check_program(CASE[cid])


@pytest.mark.parametrize("i", range(len(RANDOM)))
def test_random_problem_spec_and_program_match_the_model(i):
    check_spec(*RANDOM[i])
    check_program(RANDOM[i][0])


@pytest.mark.parametrize("seed", range(100))
def test_random_draws_are_valid_pytorch(seed):
    model, x, y = _meta_run(random_problem(random.Random(seed)))
    assert y.numel() >= 1


def test_dev_template_edits_still_apply(tmp_path):
    """tests/dev/variants.py's conv2d_epilogue edits match the templates exactly once and change the rendered kernel of
    some benchmark problem (an edit that stopped matching fails here, not on the device)."""
    from tests.bench.bench_conv2d_epilogue import PROBLEMS, problem_source
    from tests.dev.variants import EDITS, template_edits

    paths = []
    for name, row in PROBLEMS.items():
        paths.append(tmp_path / f"{name}.py")
        paths[-1].write_text(problem_source(*row))
    default = [emit.generate_problem(load_problem(p), str(p)).files for p in paths]
    labels = [label for label in EDITS if label.startswith("conv_")]
    assert labels
    for label in labels:
        with template_edits(EDITS[label]):
            rendered = [emit.generate_problem(load_problem(p), str(p)).files for p in paths]
        assert rendered != default, f"edit {label} changes no benchmark problem's sources"
    assert [emit.generate_problem(load_problem(p), str(p)).files for p in paths] == default


def _bench_problems_of_this_family(tmp_path, sources: dict[str, str]):
    """(name, source, loaded problem, spec) of each benchmark problem text, asserting this family matches it."""
    for name, src in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        problem = load_problem(path)
        family, spec = match(problem)
        assert family is fam, name
        yield name, src, problem, spec


def test_random_benchmark_draws_are_problems_of_this_family_at_benchmark_size(tmp_path):
    """bench_conv2d_epilogue.py --random: each draw (module and functional convolutions alike) is a problem this
    family takes, resized to an input of 8-400 MB, and has its one-line description (the summary's)."""
    from tests.bench.bench_conv2d_epilogue import describe, random_benchmark_sources

    sources = random_benchmark_sources(24, 1)
    assert len(sources) == 24
    assert any("F.conv2d(" in src for src in sources.values())  # the generator's functional form is drawn
    for name, src, problem, _ in _bench_problems_of_this_family(tmp_path, sources):
        x = problem.input_shapes[0]
        mb = 4 * math.prod(x) / 1e6
        assert 4 <= mb <= 800, (name, x)  # 8-400 MB drawn; the batch rounds (at least 1, at most 512)
        line = describe(src)
        assert line.startswith("x".join(map(str, x)) + " "), (name, line)


def test_few_channel_bench_problems_take_the_fma_kernels(tmp_path):
    """bench_conv2d_epilogue.py --few: each problem matches this family; a group of at most 4 input channels runs its
    forward and grad_x on float32 FMAs (the ResNet stem: 16 out channels a thread), 12 channels stay on the GEMMs."""
    from tests.bench.bench_conv2d_epilogue import problem_sources

    sources = problem_sources(few=True)
    assert len(sources) == 5
    for name, _, problem, spec in _bench_problems_of_this_family(tmp_path, sources):
        d = fam.derive(spec)
        few = d["CIG"] <= fam.FMA_FWD_CIG_MAX
        assert (d["FMA_FWD"] is not None) is few, name
        assert (d["FMA_DX"] is not None) is (few and d["HALO_DX"] is None), name
        if name == "c3_stem_relu_maxpool":
            assert d["FMA_FWD"]["CT"] == 16 and d["FMA_FWD"]["CTILES"] == 4 and d["FMA_DX"] is not None
        emit.generate_problem(problem, str(tmp_path / f"{name}.py"))


def test_dev_diff_edits_are_exact_replacements():
    """tests/dev/variants.py reads a `git diff` of templates as (old, new) pairs: context and removed lines, context
    and added lines, per hunk and file; a diff touching anything outside templates/ is refused."""
    from tests.dev.variants import diff_edits

    text = ("diff --git a/templates/f/a.j2 b/templates/f/a.j2\nindex 1..2 100644\n--- a/templates/f/a.j2\n"
            "+++ b/templates/f/a.j2\n@@ -1,3 +1,3 @@\n keep\n-gone\n+new\n tail\n@@ -9,2 +9,3 @@\n x\n+y\n z\n"
            "--- a/templates/g.j2\n+++ b/templates/g.j2\n@@ -1 +1 @@\n-1\n+2\n")
    assert diff_edits(text) == {"f/a.j2": [("keep\ngone\ntail\n", "keep\nnew\ntail\n"), ("x\nz\n", "x\ny\nz\n")],
                                "g.j2": [("1\n", "2\n")]}
    with pytest.raises(ValueError, match="templates/ only"):
        diff_edits("--- a/kgen/x.py\n+++ b/kgen/x.py\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a git checkout")
def test_dev_patches_still_apply():
    """A prepared change kept as a patch (tests/dev/edits/*.patch: plan fields as well as templates) still applies to
    this tree, so the next device session can time it."""
    patches = sorted((REPO / "tests" / "dev" / "edits").glob("*.patch"))
    if not patches:
        pytest.skip("no prepared patch in tests/dev/edits")
    for patch in patches:
        r = subprocess.run(["git", "apply", "--check", str(patch)], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, f"{patch.name} no longer applies: {r.stderr}"


def test_tf32_round():
    one_ulp = 2.0**-10  # TF32 keeps 10 mantissa bits
    t = torch.tensor([1 + one_ulp / 2, 1 + one_ulp / 2 - 2.0**-23, -(1 + one_ulp / 2), 3.0, 0.0, -0.0,
                      torch.finfo(torch.float32).max, math.inf, -math.inf, math.nan])
    want = torch.tensor([1 + one_ulp, 1.0, -(1 + one_ulp), 3.0, 0.0, -0.0, math.inf, math.inf, -math.inf, math.nan])
    torch.testing.assert_close(tf32_round(t), want, atol=0, rtol=0, equal_nan=True)
    assert torch.signbit(tf32_round(t))[5]


SHAPE, CONV = (2, 3, 16, 16), conv(3, 8, 3)
RELU = ["x = torch.relu(self.conv(x))"]  # in scope; the refused op follows on its own line, so only its name matches


@pytest.mark.parametrize("source,message", [
    (conv_epilogue_problem(SHAPE, dict(CONV, padding=1, padding_mode="reflect"), CONV_IN + ["return torch.relu(x)"]), "reflect"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return self.bn(x)"], ["self.bn = nn.BatchNorm2d(out_channels)"]), "BatchNorm2d"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return torch.softmax(x, dim=1)"]), "softmax"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return self.conv2(x)"], ["self.conv2 = nn.Conv2d(out_channels, out_channels, 1)"]),
     r"self\.conv2\b"),
    (conv_epilogue_problem(SHAPE, dict(CONV, dtype=torch.float64), CONV_IN + ["return torch.relu(x)"], dtype="float64"), "float64"),
    (conv_epilogue_problem(SHAPE, CONV, ["return F.conv2d(x, self.w * 2.0, self.b)"], form="functional"),
     "F.conv2d's weight is not one of the model's parameters or buffers"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return x - self.bias.view(1, 1, 1, -1)"],
                           ["self.bias = nn.Parameter(torch.randn(14))"]),
     r"self\.bias \(through view\) of shape \(1, 1, 1, 14\) varies over dims other than the channel dim"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return x - self.bias[None, :8, None, None]"],
                           ["self.bias = nn.Parameter(torch.randn(16))"]),
     r"reads getitem, computed in forward from the model's tensor\(s\) self\.bias by an op other than a view"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return x * self.s.view(1, -1, 1, 1)"], ["self.s = torch.rand(out_channels)"]),
     r"computed while tracing from a plain tensor attribute .*register it with self\.register_buffer"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return x * (self.s * 2)"], ['self.register_buffer("s", torch.rand(out_channels, 1, 1))']),
     r"computed in forward from the model's tensor\(s\) self\.s by an op other than a view"),
    (conv_epilogue_problem(SHAPE, CONV, RELU + ["return x + torch.ones(1, 8, 1, 1, device=x.device)"]),
     r"reads a value's \.device to make a tensor in forward.*register it as a buffer"),
], ids=["padding_mode", "batchnorm", "softmax", "second_conv", "float64", "computed_weight", "param_view_width",
        "param_slice", "attribute_view", "buffer_times_2", "tensor_made_in_forward"])
def test_out_of_scope_is_refused_naming_the_op(source, message):
    with pytest.raises(Unsupported, match=message):
        match(load_problem(write_problem(source)))


@pytest.mark.parametrize("read", ["self.t.view(1, -1, 1, 1)", "self.t[None, :, None, None]", "self.t[:, None, None]",
                                  "self.t.unsqueeze(-1).unsqueeze(-1)", "torch.reshape(self.t, (1, 8, 1, 1))",
                                  "self.t.unsqueeze(1).unsqueeze(2).view(8, 1, 1)", "self.t.view(1, x.size(1), 1, 1)",
                                  "self.t.to(x.device).view(-1, 1, 1).contiguous()"])
@pytest.mark.parametrize("register", ["self.t = nn.Parameter(torch.rand(out_channels) + 0.5)",
                                      'self.register_buffer("t", torch.rand(out_channels) + 0.5)'])
def test_a_model_tensor_read_through_views_is_the_registered_tensor(read, register):
    """A (C,) parameter or buffer viewed to broadcast per channel is the registered tensor read by channel: the same
    program as a tensor registered as (C, 1, 1), its own shape kept for the binding's check and its gradient."""
    viewed = _spec(conv_epilogue_problem(SHAPE, CONV, RELU + [f"return x * {read} + 1.0"], [register]))
    direct = _spec(conv_epilogue_problem(SHAPE, CONV, RELU + ["return x * self.t + 1.0"],
                                         [register.replace("(out_channels)", "(out_channels, 1, 1)")]))
    assert viewed.program == direct.program
    kind = "parameter" if "Parameter" in register else "buffer"
    assert [(p.name, p.broadcast, p.shape, p.kind) for p in viewed.params] == [("t", "channel", (8,), kind)]


GPOOL = CONV_IN + ["x = F.adaptive_avg_pool2d(torch.tanh(x), 1)"]
BATCH_VIEWS = [  # (the view after a global pool on (2, 8, 1, 1), the stage ops it gives)
    ("return x.squeeze()", ("mean", "squeeze_batch")),
    ("return torch.squeeze(x)", ("mean", "squeeze_batch")),
    ("return x.squeeze(0).flatten(1)", ("mean", "squeeze_batch", "view")),
    ("return x.squeeze(dim=(0, 3))", ("mean", "squeeze_batch")),
    ("return x.squeeze(-1).squeeze(-1)", ("mean", "view", "view")),
    ("return torch.squeeze(x, 2)", ("mean", "view")),
    ("return x.view(2, -1)", ("mean", "fixed_batch")),
    ("return x.reshape((2, 8))", ("mean", "fixed_batch")),
    ("return torch.reshape(x, (x.shape[0], -1))", ("mean", "view")),
    ("return x.view(x.size(0), -1)", ("mean", "view")),
    ("return x.view(-1, 8)", ("mean", "view")),
    ("return x.flatten(1)", ("mean", "view")),
    ("return x.mean(dim=0).squeeze()", ("mean", "mean", "view")),  # the batch is gone: no rule
]


@pytest.mark.parametrize("line,ops", BATCH_VIEWS, ids=[v[0].split("return ")[1] for v in BATCH_VIEWS])
def test_views_pytorch_applies_differently_at_other_batches_restrict_the_batch(line, ops):
    """kgen keeps the batch as dim 0 at every batch size. A squeeze that drops dim 0 when it is 1 (no dim, or dim 0
    named) gives PyTorch a different shape at batch 1, and a view that writes dim 0 as a constant gives it another at
    any batch but the traced one: the generated binding refuses those batch sizes with a clear error instead."""
    source = conv_epilogue_problem((2, 4, 9, 8), conv(4, 8, 3), GPOOL + [line])
    spec = _spec(source)
    assert tuple(st.op for st in spec.stages) == ops
    rule = fam.batch_rule(spec)
    assert rule == {"BATCH_NOT_ONE": "squeeze_batch" in ops, "BATCH_EXACT": 2 if "fixed_batch" in ops else 0}
    binding = emit.generate(write_problem(source)).files["binding.cpp"]
    assert ("batch size 1 is not supported" in binding) == rule["BATCH_NOT_ONE"]
    assert ("only batch size 2 is supported" in binding) == bool(rule["BATCH_EXACT"])


# Writes in place and numbers read from shapes (kgen.problem's _follow_writes and _fold_shape_numbers): each form, as
# written, against the same forward written out of place with literal numbers. Both must match a spec whose program
# is the Model's forward, and generate the same files (names aside): the form then runs what the GPU tier has run.
REWRITTEN = [  # (id, forward as written, the same forward written out of place)
    ("mul_result_dropped", ["x.mul_(2.0)", "return torch.relu(x)"], ["x = x * 2.0", "return torch.relu(x)"]),
    ("relu_inplace_kw_dropped", ["F.relu(x, inplace=True)", "return x * 3"], ["x = F.relu(x)", "return x * 3"]),
    ("leaky_inplace_positional", ["F.leaky_relu(x, 0.2, True)", "return x * 2"], ["x = F.leaky_relu(x, 0.2)", "return x * 2"]),
    ("module_inplace_dropped", ["self.act(x)", "return x + 1"], ["x = torch.relu(x)", "return x + 1"]),
    ("augmented_on_an_alias", ["y = x", "y *= 2.0", "return x + y"], ["x = x * 2.0", "return x + x"]),
    ("residual_alias_scaled", ["identity = x", "x *= self.alpha", "return x + identity"],
     ["x = x * self.alpha", "return x + x"]),
    ("read_before_the_write", ["y = torch.sigmoid(x)", "x.mul_(2)", "x.add_(y)", "return x"],
     ["y = torch.sigmoid(x)", "x = x * 2", "x = x + y", "return x"]),
    ("global_avg_from_size", ["return F.avg_pool2d(x, x.size()[2:])"], ["return F.avg_pool2d(x, (10, 11))"]),
    ("max_window_from_shape", ["return F.max_pool2d(x, kernel_size=x.shape[2:])"], ["return F.max_pool2d(x, kernel_size=(10, 11))"]),
    ("mean_by_channel_count", ["return x.sum(dim=1) / x.size(1)"], ["return x.sum(dim=1) / 8"]),
    ("mean_by_plane_size", ["return x.sum(dim=(2, 3)) / (x.shape[2] * x.shape[3])"], ["return x.sum(dim=(2, 3)) / 110"]),
    ("numel_over_batch", ["return x.sum(dim=(1, 2, 3)) / (x.numel() // x.shape[0])"], ["return x.sum(dim=(1, 2, 3)) / 880"]),
    ("augmented_number", ["n = x.size(1)", "n += 2", "return x / n"], ["return x / 10"]),
    ("view_of_batch_and_channels", ["x = x.amax(dim=(2, 3), keepdim=True)", "return x.view(x.size(0), x.size(1))"],
     ["x = x.amax(dim=(2, 3), keepdim=True)", "return x.view(x.size(0), 8)"]),
    ("max_pool_values_of_indices", ["return torch.tanh(F.max_pool2d(x, 2, return_indices=True)[0])"],
     ["return torch.tanh(F.max_pool2d(x, 2))"]),
    ("adaptive_max_values_of_indices", ["y = F.adaptive_max_pool2d(x, (3, 4), True)", "return y[0] * 2"],
     ["return F.adaptive_max_pool2d(x, (3, 4)) * 2"]),
    ("global_max_with_indices", ["return F.adaptive_max_pool2d_with_indices(x, 1)[0].flatten(1)"],
     ["return F.adaptive_max_pool2d(x, 1).flatten(1)"]),
    ("keyword_input", ["x = F.relu(input=x)", "x = torch.clamp(input=x, min=-0.5, max=2.0)", "return torch.sum(input=x, dim=1)"],
     ["x = F.relu(x)", "x = torch.clamp(x, min=-0.5, max=2.0)", "return torch.sum(x, dim=1)"]),
]
_REWRITE_INIT = ["self.act = nn.ReLU(inplace=True)", "self.alpha = nn.Parameter(torch.tensor(0.7))"]


def _rewrite_problem(lines: list[str]) -> str:
    return conv_epilogue_problem((2, 4, 10, 11), conv(4, 8, 3, padding=1), CONV_IN + lines, _REWRITE_INIT)


def _files_unnamed(source: str) -> dict[str, str]:
    """The generated files, names by content hash, the problem file's name and checksum aside."""
    out = emit.generate(write_problem(source)).files
    return {k: re.sub(r"kgen_conv2d_epilogue_[0-9a-f]{8}|p_[0-9a-f]{12}|kgen-checksum: [0-9a-f]+", "NAME", v)
            for k, v in out.items()}


@pytest.mark.parametrize("written,plain", [r[1:] for r in REWRITTEN], ids=[r[0] for r in REWRITTEN])
def test_writes_in_place_and_numbers_from_shapes_mean_what_pytorch_computes(written, plain):
    check_program(_rewrite_problem(written))
    assert _files_unnamed(_rewrite_problem(written)) == _files_unnamed(_rewrite_problem(plain))


@pytest.mark.parametrize("form,written", [("module", "self.conv(input=x)"), ("functional", "F.conv2d(input=x, weight=self.w, bias=self.b")])
def test_the_convolution_called_with_keywords_is_the_same_problem(form, written):
    """F.conv2d(input=x, weight=..., bias=...) and self.conv(input=x) were refused (the family reads a call's tensor
    as its first positional argument; kgen.problem now moves input= there): the same files as the positional call."""
    plain = conv_epilogue_problem((2, 4, 10, 11), conv(4, 8, 3, stride=2), CONV_IN + ["return torch.tanh(x)"], form=form)
    positional = "self.conv(x)" if form == "module" else "F.conv2d(x, self.w, self.b"
    assert plain.count(positional) == 1
    source = plain.replace(positional, written)
    check_program(source)
    assert _files_unnamed(source) == _files_unnamed(plain)


def test_an_op_outside_the_family_is_named_whatever_its_arguments():
    """torch.where(x > 0, x, 0.1 * x) was refused as "an argument is computed at run time"; the refusal names the
    first op the family does not take."""
    with pytest.raises(KgenError, match=r"torch.where\(x > 0, x, 0.1 \* x\): torch.gt is not a pointwise op"):
        _spec(_rewrite_problem(["return torch.where(x > 0, x, 0.1 * x)"]))


@pytest.mark.parametrize("lines,message", [
    (["return x * x.shape[0]"], r"x \* x.shape\[0\]: a number computed from the batch size"),
    (["x = x.mean(dim=(2, 3))", "y = x.view(x.size(0), -1)", "y.mul_(2)", "return x + 1"],
     r"y.mul_\(2\): writes in place into view, whose storage a view shares with a value read after the write"),
    (["x //= 2", "return x"], r"x //= 2: .* is not a pointwise op"),
], ids=["batch_number", "write_through_a_view", "augmented_floordiv"])
def test_what_kgen_cannot_follow_is_refused_at_the_users_line(lines, message):
    with pytest.raises(KgenError, match=message):
        _spec(_rewrite_problem(lines))


def test_a_write_into_the_input_is_refused_and_tracing_leaves_fx_as_it_was():
    with pytest.raises(KgenError, match=r"x.mul_\(2\): writes in place into the model's input x.*out of place"):
        _spec(conv_epilogue_problem((2, 4, 10, 11), conv(4, 8, 3), ["x.mul_(2)"] + CONV_IN + ["return x"]))
    assert not hasattr(torch.fx.Proxy, "__iadd__")  # the tracer's augmented-assignment methods are gone again


@pytest.mark.gpu
def test_batch_sizes_a_view_makes_differ_from_pytorch_are_refused():
    """At the batch sizes where PyTorch's view would give another shape than kgen's, the module raises naming the
    view and what to do; at the others it matches PyTorch."""
    squeeze = conv_epilogue_problem((2, 4, 9, 8), conv(4, 8, 3), GPOOL + ["return x.squeeze()"])
    model, new, _ = setup_problem(squeeze)
    check_training_step(model, new, new, (3, 4, 9, 8))
    with pytest.raises(RuntimeError, match="batch size 1 is not supported.*squeeze named dims"):
        new(torch.randn(1, 4, 9, 8, device="cuda"))
    fixed = conv_epilogue_problem((2, 4, 9, 8), conv(4, 8, 3), GPOOL + ["return x.view(2, -1)"])
    model, new, _ = setup_problem(fixed)
    check_training_step(model, new, new, (2, 4, 9, 8))
    with pytest.raises(RuntimeError, match="only batch size 2 is supported, got 3.*x.size"):
        new(torch.randn(3, 4, 9, 8, device="cuda"))


@pytest.mark.parametrize("source", [
    (REPO / "kgen" / "problems" / "conv2d_avgpool_sigmoid_sum.py").read_text(),
    conv_problem((2, 3, 19, 17), CONV, dict(kernel_size=2), act="relu", reduce="mean"),
], ids=["bundled", "relu_mean"])
def test_conv_avgpool_act_reduce_keeps_its_family(source):
    family, _ = match(load_problem(write_problem(source)))
    assert family.NAME == "conv2d_avgpool_act_reduce"


@pytest.mark.parametrize("cid", CASE, ids=list(CASE))
def test_generated_model_mirrors_parameters_and_initialization(cid):
    gen = emit.generate(write_problem(CASE[cid]))
    assert set(gen.files) == {"model_new.py", "kernel.cu", "binding.cpp"}
    ns: dict = {"__name__": "x"}
    exec(compile(gen.files["model_new.py"], f"<{cid}/model_new.py>", "exec"), ns)  # the text alone; no GPU, no build
    user = _user(CASE[cid])
    init = user["get_init_inputs"]()
    for seed in (0, 42):  # kgen replays the draws under seeds 0 and 1; 42 is one it never saw
        torch.manual_seed(seed)
        want = user["Model"](*init).state_dict()
        torch.manual_seed(seed)
        got = ns["ModelNew"](*init).state_dict()
        assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in want.items()}
        for k in want:
            assert torch.equal(got[k], want[k]), f"{k} is initialized differently from Model's under seed {seed}"


def test_tf32_gradient_bound_allows_rounding_and_rejects_a_missing_term():
    """The GPU checks' TF32 gradient bound (_rounding_bound, _assert_within_rounding), on the CPU, for a conv like
    the random draw it was written for (sweep seed 5104: batch 1, 42 positions, groups 2, stride 2): gradients whose
    every rounded dL/dz moved 2^-10 of itself (the most the kernel's rounding from float32 can differ) pass, for the
    weight and the input; the same gradients with the largest term of one element left out fail."""
    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 12, (4, 3), stride=2, padding=1, groups=2)

    torch.manual_seed(5104)
    model = Conv()
    x64 = tf32_round(torch.randn(1, 8, 29, 6)).double()
    c = _conv_arguments(model, x64.float())
    c.w64 = tf32_round(model.conv.weight.detach()).double()

    def grads(g):
        w, xx = c.w64.clone().requires_grad_(True), x64.clone().requires_grad_(True)
        z = F.conv2d(xx, w, None, c.stride, c.padding, c.dilation, c.groups)
        return torch.autograd.grad(z, (w, xx), g)

    g_r = tf32_round(3 * torch.randn(1, 12, 14, 3)).double()
    gw, gx = grads(g_r)
    bw, bx = _rounding_bound(x64, g_r, c, "weight"), _rounding_bound(x64, g_r, c, "input")
    moved = g_r * (1 + 2.0 ** -10 * torch.sign(torch.randn_like(g_r)))
    gw_moved, gx_moved = grads(moved)
    assert not torch.equal(gw_moved, gw)
    _assert_within_rounding(gw_moved, gw, bw, 1e-3 * max(float(gw.abs().mean()), 1.0), "weight gradient")
    _assert_within_rounding(gx_moved, gx, bx, 1e-3, "input gradient")
    missing = g_r.clone()
    missing.view(-1)[int(g_r.abs().argmax())] = 0
    gw_missing, gx_missing = grads(missing)
    with pytest.raises(AssertionError, match="off by more than the TF32 rounding bound"):
        _assert_within_rounding(gw_missing, gw, bw, 1e-3 * max(float(gw.abs().mean()), 1.0), "weight gradient")
    with pytest.raises(AssertionError, match="off by more than the TF32 rounding bound"):
        _assert_within_rounding(gx_missing, gx, bx, 1e-3, "input gradient")


# ------------------------------------------------------------------------------------------------------- GPU tier


@pytest.mark.gpu
@pytest.mark.parametrize("cid", ["relu", "groups2_gelu_tanh_div_param", "depthwise_hardswish", "pointwise_1x1_ci1_co70_chain",
                                 "gelu_global_avg_squeeze", "stem_k7s2p3_relu_maxpool3s2p1"])
def test_tf32_mode_matches_float64_of_tf32_rounded_operands(cid):
    """With cudnn.allow_tf32 the GEMM kernels multiply TF32-rounded x and weight, exactly as float64 does, and
    accumulate in float32: forward within 1e-4 of float64 on the rounded operands. The input gradient multiplies the
    rounded gradient of the conv output, which the kernel rounds from its float32 value and the reference from its
    float64 value: the two may land one TF32 ulp (2^-10 relative) apart, hence 1e-3 there. The direct kernels (one
    input channel per group: depthwise_hardswish, pointwise_1x1_ci1_co70_chain) compute in float32 in both modes, as
    cuDNN's depthwise kernels do, so their reference rounds nothing."""
    model, new, shape = setup_problem(CASE[cid])
    rnd = (lambda t: t) if fam.derive(_spec(CASE[cid]))["DIRECT"] else tf32_round
    torch.manual_seed(1)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    x64, y64, z64 = _float64_of_rounded(model, x, rnd)
    with tf32_mode(True, every_pass=True):  # TF32 kernels even where cuDNN would run this small shape exactly
        y = new(x)
        g = torch.randn_like(y)
        y.backward(g)
    torch.testing.assert_close(y.double(), y64, atol=1e-4, rtol=1e-4)
    _check_grad_x_of_rounded(model, x, x64, y64, z64, g, rnd)
    _check_grad_w_of_rounded(new, model, x64, y64, z64, g, rnd)


def _float64_of_rounded(model, x, rnd):
    """The Model in float64 on rnd(x) with rnd(weight) (TF32 rounding, or none): (x64, y64, the conv output z64).
    The conv may be nn.Conv2d or F.conv2d on the model's own tensors (_conv_arguments)."""
    ref = copy.deepcopy(model).double()
    with torch.no_grad():
        name = _conv_arguments(model, x.detach()).names[0]
        ref.get_parameter(name).copy_(rnd(model.get_parameter(name)))
    x64 = rnd(x.detach()).double().requires_grad_(True)
    with _ConvCalls() as rec:
        y64 = ref(x64)
    return x64, y64, rec.calls[0][1]


def tf32_inference_check(source: str, seed: int = 0) -> None:
    """GPU: a problem whose forward runs from halo tiles, its inference output with TF32 in every pass (wgmma in an
    sm_90a build, where the tile takes it) against the Model in float64 on TF32-rounded x and weight, within 1e-4.
    tests/dev/sweep.py runs it on every random draw that takes the halo forward."""
    model, new, shape = setup_problem(source, seed=seed)
    torch.manual_seed(seed + 3)
    x = torch.randn(shape, device="cuda")
    _, y64, _ = _float64_of_rounded(model, x, tf32_round)
    with tf32_mode(True, every_pass=True), torch.no_grad():
        y = new(x)
    torch.testing.assert_close(y.double(), y64, atol=1e-4, rtol=1e-4)


def _rounding_bound(x64, g_r, c, wrt):
    """Per element of the conv's weight gradient (wrt "weight") or input gradient (wrt "input"), the sum of the
    magnitudes of its terms: |x| times |g_r| summed as the weight gradient sums x * dL/dz, |W| (c.w64) times |g_r| as
    the input gradient sums W * dL/dz. The kernel rounds dL/dz to TF32 from its float32 value, the reference from
    float64's; each term's two roundings land at most one TF32 ulp apart, 2^-10 of the term at most, so the two
    gradients differ by at most 2^-10 times this sum (plus float32 accumulation, far smaller): the exact error model
    of TF32's rounded gradient."""
    xa, wa = x64.detach().abs(), c.w64.detach().abs()
    target = (wa if wrt == "weight" else xa).requires_grad_(True)
    z = F.conv2d(xa, wa, None, c.stride, c.padding, c.dilation, c.groups)
    return torch.autograd.grad(z, target, g_r.abs())[0]


def _assert_within_rounding(got, want, bound, floor, what):
    """|got - want| <= max(floor, 1e-3 * bound) + 1e-3 |want| elementwise (bound: _rounding_bound; 1e-3 > 2^-10
    leaves room for float32's accumulation). A wrong or missing term moves an element by the whole term, about a
    thousand times its share of the bound."""
    diff = (got.double() - want).abs()
    allowed = torch.clamp(1e-3 * bound, min=floor) + 1e-3 * want.abs()
    bad = diff > allowed
    if bad.any():
        i = int((diff / allowed).flatten().argmax())
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), want.shape))
        raise AssertionError(f"{what}: {int(bad.sum())} of {want.numel()} elements off by more than the TF32 rounding "
                             f"bound; worst at {idx}: got {float(got.flatten()[i]):.6g}, float64 {float(want.flatten()[i]):.6g}, "
                             f"|diff| {float(diff.flatten()[i]):.3g} > allowed {float(allowed.flatten()[i]):.3g} "
                             f"(sum of |terms| {float(bound.flatten()[i]):.3g})")


def _rounded_reference(model, x64, y64, z64, g, rnd):
    """(c, rnd(dL/dz) in float64): the conv's arguments with c.w64 = rnd(weight) in float64, and the conv output's
    gradient of float64's program (from y.backward(g)) rounded as the kernel rounds it."""
    (g_conv,) = torch.autograd.grad(y64, z64, g.double(), retain_graph=True)
    with torch.no_grad():
        c = _conv_arguments(model, x64.detach().to(torch.float32))
    c.w64 = rnd(model.get_parameter(c.names[0]).detach()).double()
    return c, rnd(g_conv).double()


def _check_grad_w_of_rounded(new, model, x64, y64, z64, g, rnd):
    """new's conv.weight.grad (from y.backward(g)) against float64's, which multiplies rnd(x) by rnd(dL/dz). The
    kernel rounds dL/dz from its float32 value, the reference from float64's: a few terms of each sum over positions
    land one TF32 ulp apart and move it by up to 2^-10 |x dL/dz| each. The check allows 1e-3 of the gradient's mean
    magnitude, or where more, 1e-3 of the element's sum of |x dL/dz| (_rounding_bound: a sum of few large terms,
    as a batch of one with few positions has, can move more than the mean allows), besides 1e-3 relative."""
    c, g_r = _rounded_reference(model, x64, y64, z64, g, rnd)
    w64 = c.w64.clone().requires_grad_(True)
    z = F.conv2d(x64.detach(), w64, None, c.stride, c.padding, c.dilation, c.groups)
    (gw,) = torch.autograd.grad(z, w64, g_r)
    bound = _rounding_bound(x64, g_r, c, "weight")
    scale = max(float(gw.abs().mean()), 1.0)
    _assert_within_rounding(new.get_parameter(c.names[0]).grad, gw, bound, 1e-3 * scale, "conv weight gradient")


def _check_grad_x_of_rounded(model, x, x64, y64, z64, g, rnd):
    """x.grad (from y.backward(g)) against float64's, whose conv's input gradient multiplies rnd(dL/dz): 1e-3, or
    where more, 1e-3 of the element's sum of |W dL/dz| (the kernel rounds dL/dz from float32, the reference from
    float64: _rounding_bound), besides 1e-3 relative."""
    c, g_r = _rounded_reference(model, x64, y64, z64, g, rnd)
    (gx,) = torch.autograd.grad(z64, x64, g_r, retain_graph=True)
    bound = _rounding_bound(x64, g_r, c, "input")
    _assert_within_rounding(x.grad, gx, bound, 1e-3, "input gradient")


# CASES whose halo forward runs its single-pass TF32 inference instances on wgmma in an sm_90a build (HALO["WGMMA"]:
# 4 x 1 and 4 x 2 warp tiles (one or two warpgroups), no flushed chain): the unfolded forward, a folded pooling stage,
# (H, W) and channel reductions, n from 8 to 64, one and two operand stages, groups.
WGMMA_CASES = [cid for cid in CASE if (fam.derive(_spec(CASE[cid]))["HALO"] or {}).get("WGMMA")]


def test_wgmma_plan_and_render():
    """CPU: the halo forward takes wgmma exactly on tiles of 4 x WARPS_N warps (each warp column one warpgroup of 128
    threads) without a flushed chain, never for grad_x; the rendered kernel issues m64 x n x k8 TF32 wgmmas, n the
    BN / WARPS_N out channels of a warp column, with n / 2 accumulators a thread, each warp column's descriptor at its
    own out channels, and arranges the weights in wgmma's layout only for the instances that read it (inference, TF32)."""
    assert len(WGMMA_CASES) >= 8
    seen = set()
    for cid in CASE:
        d = fam.derive(_spec(CASE[cid]))
        h, f = d["HALO"], d["HF"]
        if h is None:
            continue
        want = f["WARPS_M"] == 4 and f["THREADS"] == 128 * f["WARPS_N"] and not h["FLUSH_TF32"]
        assert h["WGMMA"] is want, cid
        assert d["HALO_DX"] is None or not d["HALO_DX"]["WGMMA"]
        if not want:
            continue
        seen.add(f["WARPS_N"])
        n = f["BN"] // f["WARPS_N"]
        assert h["WGMMA_N"] == n and n % 8 == 0, cid
        kernel = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{ %0, " in kernel, cid
        assert f"%{n // 2 - 1} }}, {{ %{n // 2}, " in kernel and f'"+f"(d[{n // 8 - 1}][3])' in kernel
        assert "bs + (threadIdx.x >> 7) * (64 * T::NI) : bs;" in kernel
        assert "halo_layout<HaloF>(tf32, " in kernel and "constexpr bool WG = Gm::WGMMA && !SAVE && (!X3 || Gm::X3WG);" in kernel
    assert seen == {1, 2}, "CASES take wgmma on both one- and two-warpgroup tiles"


# CASES whose 3xTF32 (TF32 off) inference forward also runs on wgmma in an sm_90a build (HALO["WGMMA_X3"])
X3_WGMMA_CASES = [cid for cid in WGMMA_CASES if fam.derive(_spec(CASE[cid]))["HALO"]["WGMMA_X3"]]


def test_x3_wgmma_plan_and_render():
    """CPU: the 3xTF32 inference instances take wgmma where the single-pass ones do, the unflushed reduction (three
    products a term) is within NOFLUSH_K_MAX and two CTAs of their shared memory (B's halves both staged) fit an sm_90
    SM; the kernel then declares X3WG from the KGEN_SM90A build define (so host and device agree), stages SMEM_X3
    bytes, one more weight block than the other instances, and issues three wgmmas a k step in kg_mma3's order."""
    assert len(X3_WGMMA_CASES) >= 6
    seen_one = set()
    for cid in CASE:
        d = fam.derive(_spec(CASE[cid]))
        h = d["HALO"]
        if h is None:
            continue
        weights = h["KH"] * h["KW"] * h["CC"] * d["HF"]["BN"] * 4  # a chunk's staged weights, one half
        assert h["SMEM_X3"] == h["STAGES_X3"] * (h["SMEM_BYTES"] // h["STAGES"] + weights), cid
        # one buffer only on 128-thread tiles where two would leave fewer than 3 CTAs an sm_90 SM and one would not
        def ctas(stages: int) -> int:
            x3 = stages * (h["SMEM_BYTES"] // h["STAGES"] + weights)
            return fam.SM90_SMEM_PER_SM // (max(x3, h["SMEM_BYTES"]) + 1024)

        one = h["STAGES"] == 2 and d["HF"]["THREADS"] == 128 and ctas(2) < 3 <= ctas(1)
        assert h["STAGES_X3"] == (1 if one else h["STAGES"]), cid
        assert h["X3_CTAS"] == (3 if one else 2), cid
        seen_one.add(one)
        want = (h["WGMMA"] and 3 * h["CING"] * h["KH"] * h["KW"] <= fam.NOFLUSH_K_MAX
                and 2 * (h["SMEM_X3"] + 1024) <= fam.SM90_SMEM_PER_SM)
        assert h["WGMMA_X3"] is want, cid
        if cid not in X3_WGMMA_CASES[:4]:
            continue
        kernel = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
        assert "static constexpr bool X3WG = KGEN_SM90A != 0;" in kernel, cid
        assert (f"static constexpr int SMEM_X3 = {h['SMEM_X3']}, STAGES_X3 = {h['STAGES_X3']};" in kernel
                and "x3_smem(" in kernel and "HaloF::WT_ALLOC" in kernel), cid
        assert f"static constexpr int X3_CTAS = X3WG ? {h['X3_CTAS']} : 2;" in kernel, cid
        assert "__launch_bounds__(TileH::THREADS, X3 ? (SAVE ? 2 : HaloF::X3_CTAS) :" in kernel, cid
        issue = kernel.split("auto issue = [&](int ks, uint32_t (&ar)[HALVES][T::MI][4])", 1)[1].split("wgmma_commit();", 1)[0]
        order = [ln.strip() for ln in issue.splitlines() if ln.strip().startswith("wgmma_tf32(")]
        assert order == ["wgmma_tf32(acc[mi], ar[1][mi], desc);", "wgmma_tf32(acc[mi], ar[0][mi], desc_lo);",
                         "wgmma_tf32(acc[mi], ar[0][mi], desc);"], cid
    assert seen_one == {False, True}, "CASES stage the 3xTF32 wgmma instance in one buffer and in two"
    none = next(cid for cid in WGMMA_CASES if cid not in X3_WGMMA_CASES)
    assert "static constexpr bool X3WG = false;" in emit.generate(write_problem(CASE[none])).files["kernel.cu"]


@pytest.mark.gpu
@pytest.mark.parametrize("cid", X3_WGMMA_CASES)
def test_x3_wgmma_forward_matches_float64(cid):
    """TF32 off: the inference forward (3xTF32 on wgmma in an sm_90a build, mma.sync elsewhere) and a training
    forward against the Model in float64 on the same x and weight, within 1e-4."""
    model, new, shape = setup_problem(CASE[cid])
    torch.manual_seed(5)
    x = torch.randn(shape, device="cuda")
    _, y64, _ = _float64_of_rounded(model, x, lambda t: t)
    with tf32_mode(False):
        with torch.no_grad():
            y_inf = new(x)
        y_train = new(x.requires_grad_(True))
    torch.testing.assert_close(y_inf.double(), y64, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y_train.double(), y64, atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("cid", WGMMA_CASES)
def test_wgmma_forward_matches_float64_of_tf32_rounded_operands(cid):
    """The inference forward with TF32 (on wgmma in an sm_90a build, mma.sync elsewhere) against float64 on the
    TF32-rounded x and weight, within 1e-4; then a training step's forward (the instance that stays on mma.sync where
    it saves z) and the input gradient, as test_tf32_mode_matches_float64_of_tf32_rounded_operands checks them."""
    model, new, shape = setup_problem(CASE[cid])
    torch.manual_seed(3)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    x64, y64, z64 = _float64_of_rounded(model, x, tf32_round)
    with tf32_mode(True, every_pass=True):
        with torch.no_grad():
            y_inf = new(x)
        torch.testing.assert_close(y_inf.double(), y64, atol=1e-4, rtol=1e-4)
        new.zero_grad(set_to_none=True)
        y = new(x)
        g = torch.randn_like(y)
        y.backward(g)
        y_train = new(x)  # after a backward: the instances that keep what the backward reads
    torch.testing.assert_close(y.double(), y64, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y_train.double(), y64, atol=1e-4, rtol=1e-4)
    _check_grad_x_of_rounded(model, x, x64, y64, z64, g, tf32_round)


# CASES whose TF32 grad_w runs on wgmma in an sm_90a build (HALO_WG): one and two warpgroups, two out-channel tiles,
# groups, strides, dilation, one-, two- and four-float gz copies, gz read from the incoming gradient.
WGMMA_W_CASES = ["wgrad_wg_ci8_co160_relu", "wgrad_wg_ci24_co112_k21_tanh_bias_c", "wgrad_wg_lone_ci16_co128_k3x5_dil21",
                 "wgrad_wg_g2_ci32_co192_s12_p1_silu", "wgrad_wg_ci8_co100_dil2_gelu_sub", "halo_ci64_ctas4_scale_min_c",
                 "halo_ci64_ctas4_hardswish_maxpool2_mish"]


def test_wgmma_grad_w_plan_and_render():
    """CPU: grad_w takes wgmma wherever it runs from halo tiles with WG_COG_MIN or more out channels a group and two
    stages fit WG_SMEM_MAX: m64 x BN x k8 TF32 wgmmas, BN the out-channel tile (a multiple of 8, at most 128), one
    warpgroup per 64 (channel, tap) rows, as few row tiles as WG_WARPGROUPS_MAX allows; the host launches that kernel
    only in KGEN_SM90A builds and only with TF32 allowed for grad_w, reading gz pre-rounded only where kgen's adjoint
    kernel writes it."""
    for cid in CASE:
        d = fam.derive(_spec(CASE[cid]))
        if d["HALO_W"] is not None and d["COG"] < fam.WG_COG_MIN:
            assert d["HALO_WG"] is None, cid
    for cid in WGMMA_W_CASES:
        d = fam.derive(_spec(CASE[cid]))
        w = d["HALO_WG"]
        assert w is not None and d["HALO_W"] is not None, cid
        cog, m64 = d["COG"], -(-d["KTOT"] // 64)
        assert w["BN"] % 8 == 0 and w["BN"] <= fam.WG_BN_MAX and w["CT"] * w["BN"] >= cog > (w["CT"] - 1) * w["BN"], cid
        assert w["JT"] == -(-m64 // fam.WG_WARPGROUPS_MAX) and w["JT"] * w["BM"] >= d["KTOT"] > (w["JT"] - 1) * w["BM"], cid
        assert w["THREADS"] == 2 * w["BM"] and w["SMEM_BYTES"] <= fam.WG_SMEM_MAX
        assert w["ROUNDS"] == ([True, False] if d["write_gz"] else [True])
        kernel = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
        assert f"wgmma.mma_async.sync.aligned.m64n{w['BN']}k8.f32.tf32.tf32 {{ %0, " in kernel, cid
        launch = kernel.split("_backward(const float* gy")[1]
        assert "#if KGEN_SM90A\n    if (tf32 & 2) {  // TF32 on wgmma" in launch
        assert all(f"conv_grad_w_wg<{v}, {str(r).lower()}><<<" in launch for v in w["GZ_VECS"] for r in w["ROUNDS"])
        assert ("epilogue_backward<<<" in launch) is d["write_gz"] or d["NRED"] > 0
        assert ("const int round_gz = (tf32 & 2) && (gx == nullptr || (tf32 & 1)) ? 1 : 0;" in launch) is (
            d["write_gz"] and d["HALO_DX"] is not None)
    plans = [fam.derive(_spec(CASE[c]))["HALO_WG"] for c in WGMMA_W_CASES]
    assert {w["BM"] for w in plans} == {64, 128, 192, 256} and any(w["CT"] > 1 for w in plans)
    assert {v for w in plans for v in w["GZ_VECS"]} == {1, 2, 4}


def tf32_grad_w_check(source: str, seed: int = 0) -> None:
    """GPU: a training step with TF32 in every pass (grad_w on wgmma in an sm_90a build where the plan takes it,
    mma.sync elsewhere; gz then written rounded by the adjoint kernel, which grad_x's halo kernel reads without its
    rounding pass): the weight gradient against float64 of TF32-rounded x and dL/dz (1e-3), bit for bit the same in a
    second run, and the input gradient as _check_grad_x_of_rounded checks it. tests/dev/sweep.py runs it on every random draw whose grad_w takes wgmma (HALO_WG)."""
    model, new, shape = setup_problem(source, seed=seed)
    torch.manual_seed(seed + 5)
    x = torch.randn(shape, device="cuda", requires_grad=True)
    x64, y64, z64 = _float64_of_rounded(model, x, tf32_round)
    with torch.no_grad():
        weight = _conv_arguments(model, x.detach()).names[0]
    runs = []
    with tf32_mode(True, every_pass=True):
        for _ in range(2):
            new.zero_grad(set_to_none=True)
            x.grad = None
            y = new(x)
            torch.manual_seed(seed + 7)
            g = torch.randn_like(y)
            y.backward(g)
            runs.append(new.get_parameter(weight).grad.clone())
    assert torch.equal(runs[0], runs[1])
    _check_grad_w_of_rounded(new, model, x64, y64, z64, g, tf32_round)
    _check_grad_x_of_rounded(model, x, x64, y64, z64, g, tf32_round)  # grad_x too: it reads the same gz, pre-rounded there


@pytest.mark.gpu
@pytest.mark.parametrize("cid", WGMMA_W_CASES)
def test_wgmma_grad_w_matches_float64_of_tf32_rounded_operands(cid):
    tf32_grad_w_check(CASE[cid])


BIG_REDUCTION = conv_epilogue_problem((4, 3, 66, 66), conv(3, 8, 3),
                                      CONV_IN + ["x = x * self.scale", "return torch.logsumexp(torch.sigmoid(x), dim=(0, 2, 3))"],
                                      ["self.scale = nn.Parameter(torch.tensor(1.5))"])  # each output reduces in ~30 split blocks


@pytest.mark.gpu
@pytest.mark.parametrize("cid", ["channel_bias_add_tanh", "depthwise_hardswish", "adaptive_max_5x3_scale_logsumexp_c",
                                 "max_w_values_sub_amin_all", "big_reduction"])
def test_backward_is_bitwise_deterministic(cid):
    model, new, shape = setup_problem(BIG_REDUCTION if cid == "big_reduction" else CASE[cid])
    x = torch.randn(shape, device="cuda", requires_grad=True)
    g = torch.randn_like(new(x))
    runs = []
    for _ in range(2):
        x.grad = None
        new.zero_grad(set_to_none=True)
        new(x).backward(g)
        runs.append([x.grad.clone()] + [p.grad.clone() for p in new.parameters()])
    assert len(runs[0]) >= 3  # x, conv weight, conv bias (+ the extra parameter)
    for (name, _), a, b in zip([("x", None), *new.named_parameters()], *runs):
        assert torch.equal(a, b), f"{name}.grad differs between two identical backward passes"


@pytest.mark.gpu
@pytest.mark.parametrize("cid", ["hardswish_dag", "mean_keepdim_flatten_bias_c", "adaptive_avg_4xNone_sum_batch", "big_reduction"])
@pytest.mark.parametrize("batch", [1, 5])
def test_batch_is_a_runtime_value(cid, batch):
    """Batch sizes other than the traced one, also through reductions over the batch dim."""
    model, new, shape = setup_problem(BIG_REDUCTION if cid == "big_reduction" else CASE[cid])
    assert shape[0] not in (1, 5)
    check_training_step(model, new, new, (batch,) + shape[1:])


def check_training_step(model, new, run, shape) -> None:
    """run (new, or new compiled) against model on fresh inputs: the output, x's gradient and every parameter's."""
    x = torch.randn(shape, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    ref, out = model(xr), run(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    for (name, p), (_, pr) in zip(new.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}: {m}")


FUSED = ["halo_ci16_avgpool2_divisor_scale_c", "halo_ci8_maxpool_ceil_even_sum", "halo_ci8_small_tanh_maxpool"]
FUSED_REDUCE = ["halo_ci8_k5s2_gelu_global_avg_squeeze", "halo_ci16_amax_hw_keepdim_scale_c", "halo_groups2_relu_sum_hw",
                "halo_ci8_tanh_adaptive_max1_flatten", "halo_ci8_dil_amin_hw_sub"]
FMA_FUSED_REDUCE = ["mean_keepdim_flatten_bias_c", "adaptive_max_global_view_mul"]  # folded into the forward on FMAs
FUSED_CREDUCE = ["creduce_ci8_sum_c_keepdim_shift", "creduce_ci16_relu_mean_c_sigmoid", "creduce_ci8_lse_c_keepdim_avgpool2",
                 "creduce_ci8_co80_amax_c_tanh", "creduce_groups2_lse_c_half", "creduce_ci24_wide_max_c_values",
                 "halo_ci64_ctas4_scale_min_c", "creduce_reg_ci24_co40_lse_c_keepdim_scale", "creduce_reg_ci32_co96_relu_mean_c",
                 "creduce_reg_groups2_ci48_sum_c_tanh", "creduce_reg_ci24_co80_lse_c"]
FMA_FUSED_CREDUCE = ["fma_creduce_c3_min_c_keepdim_tanh", "fma_creduce_c3_co40_lse_c_half", "fma_creduce_g2_ci4_relu_mean_c",
                     "fma_creduce_c3_co20_k5s2_amax_c"]  # folded into the forward on FMAs


@pytest.mark.parametrize("cid", FUSED)
def test_pooling_after_a_halo_forward_is_folded_in(cid):
    """For inference and training: the binding takes the folded path either way, and the kernel has both the
    instantiation that writes z, the pre-program value and the winners (SAVE) and the one that does not."""
    d = fam.derive(_spec(CASE[cid]))
    assert d["HALO"] is not None and d["FUSED_POOL"] is not None and d["FUSED_REDUCE"] is None
    files = emit.generate(write_problem(CASE[cid])).files
    for tf32 in ("false", "true"):
        for save in ("false", "true"):
            assert f"conv_forward_halo<{tf32}, true, {save}><<<" in files["kernel.cu"]
    run_forward = files["binding.cpp"].split("run_forward(")[1].split("\n}\n")[0]
    assert "_forward_pooled(" in run_forward and "_forward(c.x" not in run_forward  # no unfused path left
    assert "_forward(const float* x" not in files["kernel.cu"] + files["binding.cpp"]  # nor its launcher and kernels
    assert "conv_forward_halo<true, false, false>" not in files["kernel.cu"]
    # nor the folded stage's own forward kernel and launcher (its backward stays: the binding runs it)
    assert "_s1_forward(" not in files["kernel.cu"] + files["binding.cpp"]
    assert "_s1_backward(" in files["kernel.cu"] and "_s1_backward(" in files["binding.cpp"]
    for st in d["stages"][1:]:  # the later stages run as before
        assert f"_s{st['k']}_forward(" in files["kernel.cu"] and f"_s{st['k']}_forward(" in files["binding.cpp"]


@pytest.mark.parametrize("cid", ["buffer_1c11_mul_silu", "halo_ci16_pad1_relu", "halo_ci32_k5_wide_onestage_silu_mean_hw",
                                 "halo_ci24_k3x5_dil21_bias_c", "halo_w_ci14_co53_s12_clamp_add_avgpool"])
def test_grad_w_tf32_chains_stay_within_the_no_flush_bound(cid):
    """With TF32 allowed grad_w's halo kernel accumulates its mmas without a flush, two m16 tiles a warp where the
    out-channel tile allows at column stride 1 (at 2, one: two spilled on sm_90); the launcher splits the position tiles so that a split covers at most CHAIN_TILES of them,
    which keeps each thread's chain on one accumulator within NOFLUSH_K_MAX positions, as the halo forward's."""
    hw = fam.derive(_spec(CASE[cid]))["HALO_W"]
    warps_m = hw["BM"] // (16 * hw["MI_TF32"])
    positions = hw["TH"] * hw["TW"] // (fam.HALO_W_WARPS // warps_m)  # a warp's share of a tile
    assert hw["CHAIN_TILES"] >= 1 and hw["CHAIN_TILES"] * positions <= fam.NOFLUSH_K_MAX
    spec = _spec(CASE[cid])
    assert hw["MI_TF32"] == (2 if hw["BM"] >= 32 and spec.SW == 1 else 1)
    launch = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
    assert "if (s < (tiles + chain - 1) / chain) s = (tiles + chain - 1) / chain;" in launch
    assert "tile_splits(n * hw::TILES_H * hw::TILES_W, hw::COMBOS, hw::CHAIN_TILES, " in launch
    wg = fam.derive(spec)["HALO_WG"]  # grad_w on wgmma: a thread's accumulator sums every position of its split's tiles
    if wg is not None:
        assert wg["CHAIN_TILES"] >= 1 and wg["CHAIN_TILES"] * wg["TH"] * wg["TW"] <= fam.WG_CHAIN_MAX <= 4 * fam.NOFLUSH_K_MAX
        assert "tile_splits(n * hwg::TILES_H * hwg::TILES_W, hwg::COMBOS, hwg::CHAIN_TILES, " in launch


def test_grad_w_copies_gz_in_vectors_where_aligned():
    """grad_w's halo kernel copies gz GZV floats a cp.async (WO % GZV == 0): only that width where gz is kgen's own
    workspace, and the one-float kernel beside it where gz is the incoming gradient, whose alignment is the caller's."""
    for cid, vecs in (("halo_lone_ci8_wo16", [4, 1]), ("buffer_1c11_mul_silu", [4]), ("lone_conv", [1]),
                      ("halo_ci16_pad1_relu", [1])):
        d = fam.derive(_spec(CASE[cid]))
        assert d["HALO_W"]["GZ_VECS"] == vecs, cid
        launch = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
        for v in (1, 2, 4):
            assert (f"conv_grad_w_halo<false, {v}><<<" in launch) == (v in vecs), (cid, v)


@pytest.mark.parametrize("cid,hv_fwd,hv_dx", [
    ("halo_ci16_w32_pad1_relu_bias_c", 4, 4),     # 32-wide x and gz rows, padding 1 (LOFF 3)
    ("halo_lone_ci8_wo16", 2, 4),                 # 18-wide x rows (8-byte aligned), 16-wide grad_y rows
    ("halo_ci16_amax_hw_keepdim_scale_c", 2, 2),  # even rows that are not 16-byte multiples, both ways
    ("halo_ci16_pad1_relu", 1, 1),                # 37-wide x rows, 37-wide gz rows: 4-byte copies
])
def test_halo_copies_as_wide_as_the_rows_allow(cid, hv_fwd, hv_dx):
    """The halo loaders copy HV floats at a time: 16 bytes where every input row starts 16-byte aligned (W % 4 == 0), 8
    where it starts 8-byte aligned (W % 2 == 0: grad_x of an unpadded odd kernel on an even-width image), else 4; rows
    are staged from LOFF columns left of the tile's first (the padding's residue mod HV). The binding then hands
    copies wider than 4 bytes an aligned input: x for the forward, grad_y where grad_x reads it directly (gz is kgen's
    16-byte aligned workspace), and each launcher checks it."""
    d = fam.derive(_spec(CASE[cid]))
    for h, hv in ((d["HALO"], hv_fwd), (d["HALO_DX"], hv_dx)):
        assert h["HV"] == hv and h["LOFF"] == (-h["PW"]) % hv
        assert h["WIN"] % hv == 0 and h["HROW"] % hv == 0 and h["HROW"] >= h["LOFF"] + h["HW"]
        assert h["HCS"] % 32 == 8 and h["HCS"] >= h["HH"] * h["HROW"]
    assert d["ALIGN16_X"] is (hv_fwd > 1)
    assert d["ALIGN16_GY"] is (hv_dx > 1 and not d["write_gz"])
    files = emit.generate(write_problem(CASE[cid])).files
    assert ("aligned16(kgen_glue::check_input(x_in" in files["binding.cpp"]) is (hv_fwd > 1)
    assert "halo_input_aligned<HaloF>(x)" in files["kernel.cu"] and "halo_input_aligned<HaloD>(gzsrc)" in files["kernel.cu"]
    assert f"static constexpr int HV = {hv_fwd}," in files["kernel.cu"] and f"static constexpr int HV = {hv_dx}," in files["kernel.cu"]


@pytest.mark.parametrize("cid,phs,hv,loff", [
    ("halo_ci8_k5s2_p1_w44_hardswish_maxpool2", 2, 4, 3),
    ("halo_ci8_k3s2_p1_w38_relu_bias_c", 2, 2, 1),
    ("halo_ci8_k5s2_gelu_global_avg_squeeze", 2, 1, 0),
    ("halo_ci8_small_tanh_maxpool", 1, 2, 0),              # stride 1: one buffer through registers, rows unsplit
    ("halo_ci16_k5_onestage_relu_bias_c", 1, 4, 2),        # two chunks in one buffer: each through registers
])
def test_one_buffer_halo_staged_through_registers(cid, phs, hv, loff):
    """A forward whose halo has one buffer stages it through registers (REG) in its single-pass TF32 instances,
    RB HV-float groups a thread in each of NB batches covering every group of the staged rows exactly, and at stride 2
    stores each row's even columns, then its odd ones (PHS = 2, HP floats each), so a fragment's loads read
    consecutive floats. Double-buffered forwards and grad_x keep cp.async."""
    d = fam.derive(_spec(CASE[cid]))
    h = d["HALO"]
    assert (h["STAGES"], h["REG"], h["PHS"], h["HV"], h["LOFF"]) == (1, True, phs, hv, loff)
    assert h["HP"] * phs == h["HROW"] and h["HROW"] >= h["LOFF"] + h["HW"] and h["HCS"] % 32 == 8
    groups, threads = h["CC"] * h["HH"] * (h["HROW"] // hv), d["HF"]["THREADS"]
    assert (h["NB"] - 1) * h["RB"] * threads < groups <= h["NB"] * h["RB"] * threads
    assert h["RB"] * fam.REG_GROUP_REGS[hv] <= fam.REG_STAGE_REGS
    if d["HALO_DX"] is not None:
        assert not d["HALO_DX"]["REG"] and d["HALO_DX"]["PHS"] == 1
    kernel = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
    assert f"static constexpr int PHS = {phs}, HP = {h['HP']}, RB = {h['RB']}, NB = {h['NB']};" in kernel


def test_double_buffered_halo_keeps_cp_async():
    d = fam.derive(_spec(CASE["halo_ci16_w32_pad1_relu_bias_c"]))
    assert d["HALO"]["STAGES"] == 2 and not d["HALO"]["REG"] and d["HALO"]["PHS"] == 1


def test_halo_forward_takes_one_buffer_where_two_do_not_fit():
    """A 5x5 kernel on two 8-channel chunks for 64 out channels: two buffers (each chunk's halo and 25 taps of
    weights) would pass HALO_SMEM_MAX, so the forward stages each chunk in one buffer instead of falling back to the
    im2col GEMM; the template loads the next chunk after the current one's mmas."""
    d = fam.derive(_spec(CASE["halo_ci16_k5_onestage_relu_bias_c"]))
    h = d["HALO"]
    assert h is not None and h["STAGES"] == 1 and d["CIG"] // h["CC"] == 2
    assert h["SMEM_BYTES"] <= fam.HALO_SMEM_MAX < 2 * h["SMEM_BYTES"]
    assert d["HALO_DX"]["STAGES"] == 2  # grad_x's weights are 16 channels wide: two buffers fit
    kernel = emit.generate(write_problem(CASE["halo_ci16_k5_onestage_relu_bias_c"])).files["kernel.cu"]
    assert "static constexpr int STAGES = 1;" in kernel
    assert "if (ST == 1 && ch + 1 < Gm::NCH) load(ch + 1, 0);" in kernel  # ST: STAGES (STAGES_X3 where X3WG)


@pytest.mark.parametrize("pad,staged", [(0, True), (1, False)])
def test_halo_forward_stages_its_training_epilogue_where_rows_split_sectors(pad, staged):
    """Output rows of 254 floats (not whole 32-byte sectors): the training instance of the forward (z written) stages
    the CTA's conv outputs in shared memory and writes y and z a tile row at a time; inference, and 256-wide rows,
    keep the direct stores. The 5x5 staged instance unrolls one row of taps (all 25 spilled on sm_80), and so do the
    other TF32 instances of a 256-thread tile (all 25 spilled 4 bytes on sm_90), while a 128-thread tile's unroll all."""
    src = conv_epilogue_problem((2, 16, 256, 256), conv(16, 64, 3, padding=pad), CONV_IN + ["return F.hardswish(x - 0.5)"])
    d = fam.derive(_spec(src))
    assert d["HALO"] is not None and d["EPI_STAGED"] is staged and d["EPI_TAP_UNROLL"] == d["HALO"]["TAP_UNROLL"] == 9
    assert d["HALO_FWD_SMEM"] >= d["HF"]["BN"] * (d["HALO"]["TH"] * d["HALO"]["TW"] + fam.EPI_PAD) * 4 if staged else \
        d["HALO_FWD_SMEM"] == d["HALO"]["SMEM_BYTES"]
    kernel = emit.generate(write_problem(src)).files["kernel.cu"]
    assert ("zs[col * ZLD + row] = v;" in kernel) is staged
    assert ("conv_forward_halo<false, false, true><<<" in kernel) is staged  # launched only when z is written
    assert "stored straight from the fragments" in kernel
    d5 = fam.derive(_spec(CASE["halo_ci16_k5_onestage_relu_bias_c"]))  # 256 threads: 128 registers a thread
    assert d5["EPI_STAGED"] and d5["EPI_TAP_UNROLL"] == 5 and d5["HF"]["THREADS"] == 256 and d5["HALO"]["TAP_UNROLL"] == 5
    d5w = fam.derive(_spec(CASE["halo_ci32_k5_wide_onestage_silu_mean_hw"]))  # 128 threads: every tap unrolled
    assert d5w["HF"]["THREADS"] == 128 and d5w["HALO"]["TAP_UNROLL"] == 25


@pytest.mark.parametrize("cid,dx_unroll", [("halo_ci32_k5_wide_onestage_silu_mean_hw", 5), ("halo_ci24_k3x5_dil21_bias_c", 5),
                                            ("halo_ci16_w32_pad1_relu_bias_c", 9)])
def test_halo_grad_x_unrolls_all_taps_only_up_to_3x3(cid, dx_unroll):
    """grad_x from halo tiles with TF32 allowed unrolls every tap up to FULL_UNROLL_MAX (3x3), else one row of taps
    (all 25 of a 5x5 kernel spilled on sm_90); the forward keeps all of them."""
    spec = _spec(CASE[cid])
    d = fam.derive(spec)
    assert d["HALO_DX"]["TAP_UNROLL"] == dx_unroll and d["HALO"]["TAP_UNROLL"] == spec.KH * spec.KW
    assert "conv_grad_x_halo" in emit.generate(write_problem(CASE[cid])).files["kernel.cu"]


@pytest.mark.parametrize("co,stride,dil,wide", [(64, 1, 1, True), (24, 1, 1, True), (16, 1, 1, False), (64, 2, 1, True),
                                                (64, 2, 2, False)])
def test_halo_grad_x_warps_own_every_in_channel_from_three_gz_chunks(co, stride, dil, wide):
    """grad_x from halo tiles (every stride phase) over HALO_WIDE_MIN_CHUNKS or more chunks of gz channels runs on
    4 x 1 warps, each owning all BN in channels of 32 positions, as the halo forward; with fewer chunks, or the im2col
    grad_x (stride 2 with dilation 2: odd rows reached by no tap), the 2 x 4 grid stays."""
    src = conv_epilogue_problem((2, 64, 40, 44), conv(64, co, 3, stride=stride, dilation=dil), CONV_IN + ["return torch.relu(x)"])
    d = fam.derive(_spec(src))
    assert (d["HALO_DX"] is not None) is (dil == 1)
    assert d["HALO_DX"] is None or len(d["HALO_DX"]["PHASES"]) == stride * stride
    assert (d["D"]["WARPS_M"], d["D"]["WARPS_N"], d["D"]["BN"]) == ((4, 1, 64) if wide else (4, 2, 64))
    kernel = emit.generate(write_problem(src)).files["kernel.cu"]
    assert f"using TileD = Tile<128, 64, 4, {1 if wide else 2}," in kernel


def test_halo_forward_warps_own_every_out_channel_from_three_chunks():
    """From HALO_WIDE_MIN_CHUNKS input-channel chunks on, the halo forward's CTA tile gives each warp all BN out
    channels of 32 positions (4 x 1 warps, 128 threads); with fewer chunks, and in the im2col forward, the 2 x 4 grid
    stays (grad_x: halo_dx_tile). The fold's lane count follows the halo tile's threads."""
    wide = fam.derive(_spec(CASE["halo_ci32_k5_wide_onestage_silu_mean_hw"]))
    assert (wide["HF"]["WARPS_M"], wide["HF"]["WARPS_N"], wide["HF"]["THREADS"]) == (4, 1, 128)
    assert wide["F"]["WARPS_N"] == 2 and wide["HALO_DX"] is not None and wide["D"]["WARPS_N"] == 1  # halo_dx_tile
    assert wide["HALO"]["STAGES"] == 1 and wide["FUSED_REDUCE"]["LANES"] == 128 // 64
    narrow = fam.derive(_spec(CASE["halo_ci16_w32_pad1_relu_bias_c"]))
    assert (narrow["HF"]["WARPS_N"], narrow["HF"]["THREADS"]) == (2, 256)
    kernel = emit.generate(write_problem(CASE["halo_ci32_k5_wide_onestage_silu_mean_hw"])).files["kernel.cu"]
    assert "using TileH = Tile<128, 64, 4, 1," in kernel and "using TileF = Tile<128, 64, 4, 2," in kernel


def test_a_folded_first_stage_takes_4x1_warps_from_one_chunk():
    """halo_fold_tile: where the halo forward folds its first stage (a pool, an (H, W) or a channel reduction), its
    tile is 4 x 1 warps (128 threads) from one input chunk on, and the fold is planned on that tile; an unfolded
    forward over fewer than HALO_WIDE_MIN_CHUNKS chunks keeps 2 x 4 warps."""
    for cid, fold in (("halo_ci8_k5s2_gelu_global_avg_squeeze", "FUSED_REDUCE"), ("halo_ci8_small_tanh_maxpool", "FUSED_POOL"),
                      ("halo_ci16_avgpool2_divisor_scale_c", "FUSED_POOL"), ("creduce_ci8_sum_c_keepdim_shift", "FUSED_CREDUCE")):
        spec = _spec(CASE[cid])
        assert spec.CI // spec.G // fam.HALO_CC < fam.HALO_WIDE_MIN_CHUNKS, cid
        d = fam.derive(spec)
        assert d[fold] is not None and (d["HF"]["WARPS_N"], d["HF"]["THREADS"]) == (1, 128), cid
        if fold == "FUSED_REDUCE":
            assert d[fold]["LANES"] * d["HF"]["BN"] == 128
    narrow = fam.derive(_spec(CASE["halo_ci16_w32_pad1_relu_bias_c"]))
    assert not (narrow["FUSED_POOL"] or narrow["FUSED_REDUCE"] or narrow["FUSED_CREDUCE"])
    assert (narrow["HF"]["WARPS_N"], narrow["HF"]["THREADS"]) == (2, 256)


def test_tf32_halo_accumulates_unflushed_up_to_noflush_k_max():
    """With TF32 allowed the halo forward / grad_x run their mma.sync on acc directly where the reduction (channels a
    group x taps) is at most NOFLUSH_K_MAX, and flush a `part` accumulator every chunk beyond it; the template reads
    the plan's choice."""
    d = fam.derive(_spec(CASE["halo_ci256_k3_noflush_tanh"]))
    assert d["HALO"]["CING"] * 9 == fam.NOFLUSH_K_MAX and not d["HALO"]["FLUSH_TF32"]
    tile = fam.gemm_tile(128, 64)
    for cin_g, flush in ((8, False), (256, False), (264, True), (512, True)):
        h = fam._halo(cin_g, 16, 16, cin_g, 16, 16, 64, (3, 3), (1, 1), (1, 1), (1, 1), tile, False)
        assert h["FLUSH_TF32"] is flush, cin_g
    kernel = emit.generate(write_problem(CASE["halo_ci256_k3_noflush_tanh"])).files["kernel.cu"]
    assert "static constexpr bool FLUSH_TF32 = false;" in kernel and "constexpr bool FLUSH = !X3 && Gm::FLUSH_TF32;" in kernel


def test_halo_tf32_forward_asks_for_four_ctas_an_sm_where_they_fit():
    """The halo forward's single-pass TF32 instances ask ptxas for HALO_TF32_CTAS CTAs an SM (sm_90) on
    128-thread tiles over HALO_TF32_CTAS_MIN_CHUNKS or more chunks without a flush, where that many CTAs' largest
    shared memory fits an SM; else 2, as the 3xTF32 instances. The template reads the plan's number."""
    wide, narrow = fam.halo_warp_tile(128, 8), fam.halo_warp_tile(64, 1)
    assert (wide["THREADS"], narrow["THREADS"]) == (128, 256)

    def halo(cin_g, tile=wide, k=(3, 3)):
        return fam._halo(cin_g, 64, 64, cin_g, 62, 62, 128, k, (1, 1), (0, 0), (1, 1), tile, False)

    h64 = halo(64)
    def ctas(h, tile, folds=(None, None)):
        return fam.halo_tf32_ctas(h, tile, fam.halo_fwd_smem(h, tile, False), folds)

    h64 = halo(64)
    assert ctas(h64, wide) == fam.HALO_TF32_CTAS == 4
    assert ctas(halo(32), wide) == 2  # 4 chunks
    assert ctas(halo(64, narrow), narrow) == 2  # 2 x 4 warps
    assert ctas(halo(512), wide) == 2  # long k: flushed each chunk
    big = dict(SMEM_BYTES=fam.SM90_SMEM_PER_SM // 4)  # a folded stage whose 4 copies do not fit with the reserve
    assert ctas(h64, wide, (None, big)) == 2
    assert ctas(h64, wide, (dict(SMEM_BYTES=h64["SMEM_BYTES"]), None)) == 4
    assert fam.halo_tf32_ctas(None, wide, 0, (None, None)) == 2
    for cid in ("halo_ci64_ctas4_hardswish_maxpool2_mish", "halo_ci64_ctas4_scale_min_c", "halo_ci256_k3_noflush_tanh"):
        d = fam.derive(_spec(CASE[cid]))
        assert (d["HALO_TF32_CTAS"], d["HALO_TF32_CTAS_POOL_SAVE"]) == (4, 3), cid
    assert fam.derive(_spec(CASE["halo_ci64_ctas4_hardswish_maxpool2_mish"]))["FUSED_POOL"] is not None
    assert fam.derive(_spec(CASE["halo_ci64_ctas4_scale_min_c"]))["EPI_STAGED"]
    assert fam.derive(_spec(CASE["halo_ci32_k5_wide_onestage_silu_mean_hw"]))["HALO_TF32_CTAS"] == 2
    kernel = emit.generate(write_problem(CASE["halo_ci64_ctas4_scale_min_c"])).files["kernel.cu"]
    assert ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900\nconstexpr int HALO_TF32_CTAS = 4, HALO_TF32_CTAS_POOL_SAVE = 3;\n"
            "#else\nconstexpr int HALO_TF32_CTAS = 2, HALO_TF32_CTAS_POOL_SAVE = 2;") in kernel
    assert "__launch_bounds__(TileH::THREADS, X3 ? (SAVE ? 2 : HaloF::X3_CTAS) : POOL && SAVE ? HALO_TF32_CTAS_POOL_SAVE : HALO_TF32_CTAS)" in kernel
    other = emit.generate(write_problem(CASE["halo_ci32_k5_wide_onestage_silu_mean_hw"])).files["kernel.cu"]
    assert "constexpr int HALO_TF32_CTAS = 2, HALO_TF32_CTAS_POOL_SAVE = 2;" in other and "__CUDA_ARCH__ == 900" not in other


@pytest.mark.gpu
def test_halo_forward_takes_a_misaligned_input():
    """An input 4 bytes past an aligned address goes through the binding's aligned copy: the same bits as an aligned
    input, forward and every gradient, TF32 off and allowed."""
    model, new, shape = setup_problem(CASE["halo_ci16_w32_pad1_relu_bias_c"])
    x = torch.randn(math.prod(shape) + 1, device="cuda")[1:].view(shape)
    assert x.data_ptr() % 16 == 4
    g = torch.randn_like(model(x))
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        try:
            runs = []
            for xi in (x, x.clone()):
                xi = xi.detach().requires_grad_(True)
                new.zero_grad(set_to_none=True)
                y = new(xi)
                y.backward(g)
                runs.append([y.detach(), xi.grad] + [p.grad for p in new.parameters()])
        finally:
            torch.backends.cudnn.allow_tf32 = False
        for a, b in zip(*runs):
            assert torch.equal(a, b), f"allow_tf32={tf32}"
    new.zero_grad(set_to_none=True)  # check_training_step compares freshly accumulated gradients
    check_training_step(model, new, new, shape)


@pytest.mark.gpu
@pytest.mark.parametrize("cid", ["halo_lone_ci8_wo16", "wgrad_wg_lone_ci16_co128_k3x5_dil21"])
def test_grad_w_takes_a_misaligned_incoming_gradient(cid):
    """A lone conv's grad_w reads gy itself: one that starts 4 bytes past an aligned address takes the one-float
    copies and gives the same bits as an aligned copy of it (TF32 off and allowed; allowed on wgmma in an sm_90a build
    for the second), within 1e-4 of PyTorch (off)."""
    model, new, shape = setup_problem(CASE[cid])
    x = torch.randn(shape, device="cuda")
    y = model(x)
    g = torch.randn(y.numel() + 1, device="cuda")[1:].view(y.shape)
    assert g.data_ptr() % 16 == 4 and g.is_contiguous()

    def grad_w(gy):
        new.zero_grad(set_to_none=True)
        new(x).backward(gy)
        return new.conv.weight.grad.clone()
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        try:
            misaligned, aligned = grad_w(g), grad_w(g.clone())
        finally:
            torch.backends.cudnn.allow_tf32 = False
        assert torch.equal(misaligned, aligned), f"allow_tf32={tf32}"
    model(x).backward(g)
    torch.testing.assert_close(misaligned, model.conv.weight.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cid", FUSED_REDUCE)
def test_a_reduction_over_hw_after_a_halo_forward_is_folded_in_for_inference(cid):
    """The fold's plan: one partial per spatial tile, whole lane groups per channel, the staged tile within the
    kernel's shared memory; a single 8-channel chunk takes one shared-memory stage (the 5x5 stride-2 case fits only so)."""
    spec = _spec(CASE[cid])
    d = fam.derive(spec)
    h, f, r = d["HALO"], d["HF"], d["FUSED_REDUCE"]  # f: the halo forward's tile, which the fold runs on
    assert h is not None and r is not None and d["FUSED_POOL"] is None
    assert r["TILES"] == h["TILES_H"] * h["TILES_W"] and r["LANES"] * f["BN"] == f["THREADS"]
    assert r["PLD"] >= f["BM"] and r["SMEM_BYTES"] >= max(h["SMEM_BYTES"], f["BN"] * r["PLD"] * 4)
    assert h["STAGES"] == (1 if spec.CI // spec.G == 8 else 2)
    assert r["PASS"] == {"mean": "SUM", "sum": "SUM", "amax": "MAX", "window_max": "MAX", "amin": "MIN"}[spec.stages[0].op]


@pytest.mark.parametrize("cid", FUSED_CREDUCE)
def test_a_reduction_over_channels_after_a_halo_forward_is_folded_in_for_inference(cid):
    """The channel fold's plan: one CTA per position tile holds all of a group's channels (PARTS = 1, the stage's
    output written by the conv kernel) or the G x CTILES channel slices write partials in channel order; the combine
    runs in registers, and tiles of several warp columns exchange their partials through shared memory (one thread a
    position: the tile's positions fit its threads); the kernel and its finish rendered."""
    spec = _spec(CASE[cid])
    d = fam.derive(spec)
    h, f, r = d["HALO"], d["HF"], d["FUSED_CREDUCE"]
    assert h is not None and r is not None and d["FUSED_POOL"] is None and d["FUSED_REDUCE"] is None
    cog = spec.CO // spec.G
    assert r["PARTS"] == spec.G * -(-cog // f["BN"])
    assert r["SMEM_BYTES"] >= h["SMEM_BYTES"] >= f["WARPS_N"] * f["BM"] * (2 if r["PAIR"] else 1) * 4
    assert f["THREADS"] >= h["TH"] * h["TW"]
    assert r["PAIR"] is (spec.stages[0].op == "logsumexp") and d["TRAIN_EXTRA"]
    files = emit.generate(write_problem(CASE[cid])).files
    kernel = files["kernel.cu"]
    assert "conv_forward_halo<false, true, false><<<" in kernel and "conv_forward_halo<true, true, false><<<" in kernel
    assert "conv_forward_halo<false, true, true>" not in kernel  # inference only: training runs the stage's own kernel
    assert ("cfold_finish<<<" in kernel) is (r["PARTS"] > 1)
    assert f"constexpr int XN = TileH::WARPS_N" in kernel and ("if constexpr (XN > 1)" in kernel)
    run_forward = files["binding.cpp"].split("run_forward(")[1].split("\n}\n")[0]
    assert "if (!save)" in run_forward and "_forward_pooled(" in run_forward and "_forward(c.x" in run_forward


@pytest.mark.parametrize("cid", FMA_FUSED_CREDUCE)
def test_a_reduction_over_channels_after_a_forward_on_fmas_is_folded_in_for_inference(cid):
    """Few input channels: the channel fold in the forward on FMAs, one partial plane per (image, channel tile) for
    cfold_finish (always: it applies the stage's program), the unfolded forward's grid."""
    spec = _spec(CASE[cid])
    d = fam.derive(spec)
    r, f = d["FUSED_CREDUCE"], d["FMA_FWD"]
    assert d["HALO"] is None and f is not None and r is not None and r["FINISH"]
    assert r["PARTS"] == spec.G * f["CTILES"] and r["PAIR"] is (spec.stages[0].op == "logsumexp")
    kernel = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
    assert "conv_forward_fma<true, true><<<" in kernel and "cfold_finish<<<" in kernel
    assert "(n * HO * ffw::GW + ffw::THREADS - 1) / ffw::THREADS, &gx);  // the unfolded forward's grid" in kernel


@pytest.mark.parametrize("co,groups,bn", [(48, 1, 48), (80, 1, 48), (96, 2, 48), (40, 1, 48), (64, 1, 64), (112, 1, 64),
                                           (192, 1, 64), (24, 1, 32), (100, 1, 64)])
def test_halo_forward_tiles_narrow_to_the_out_channels(co, groups, bn):
    """4 x 1 warp halo tiles (3+ chunks of input channels) take BN = 16 * ceil(COG / (16 * CTILES)) with CTILES as at
    the power-of-two width: no more tiles, fewer padding columns; the kernel renders with that tile."""
    src = conv_epilogue_problem((2, 24 * groups, 10, 20), conv(24 * groups, co, 3, groups=groups), CONV_IN + ["return torch.tanh(x)"])
    d = fam.derive(_spec(src))
    hf, cog = d["HF"], co // groups
    assert (hf["WARPS_M"], hf["WARPS_N"], hf["BN"]) == (4, 1, bn)
    assert -(-cog // hf["BN"]) == -(-cog // min(64, 1 << (cog - 1).bit_length()))  # as many channel tiles
    assert f"using TileH = Tile<128, {bn}, 4, 1," in emit.generate(write_problem(src)).files["kernel.cu"]


def test_a_reduction_over_hw_keeps_a_power_of_two_halo_tile():
    """The (H, W) fold splits THREADS / BN lanes a channel: a first stage reducing over (H, W) keeps the 64-wide tile."""
    src = conv_epilogue_problem((2, 24, 10, 20), conv(24, 48, 3), CONV_IN + ["return x.mean(dim=(2, 3))"])
    d = fam.derive(_spec(src))
    assert d["HF"]["BN"] == 64 and d["FUSED_REDUCE"] is not None


def test_reductions_not_over_channels_alone_are_not_folded_as_one():
    """Only dims (1,) (or -3) take the channel fold; with the batch or spatial dims too, or without a halo forward
    (a 1x1 kernel at stride 2), the stage keeps its own kernel."""
    base = CASE["creduce_ci8_co80_amax_c_tanh"]
    assert fam.derive(_spec(base))["FUSED_CREDUCE"] is not None
    for dims in ("(1, 2)", "(1, 2, 3)", "0", "2"):
        src = base.replace("dim=-3", f"dim={dims}")
        assert fam.derive(_spec(src))["FUSED_CREDUCE"] is None, dims
    src = conv_epilogue_problem((2, 12, 20, 19), conv(12, 12, 1, stride=2), CONV_IN + ["return x.sum(dim=1)"])
    d = fam.derive(_spec(src))
    assert d["HALO"] is None and d["FMA_FWD"] is None and d["FUSED_CREDUCE"] is None


def test_random_draws_reach_the_folded_first_stages():
    """The sweep's generator (random_problem) draws halo convolutions whose first stage inference folds in, and few
    input channels whose grad_x runs on FMAs over several stride phases, so the GPU sweeps check those kernels on shapes
    no table lists."""
    plans = [fam.derive(_spec(_random_case(random.Random(f"fold:{i}"))[0])) for i in range(80)]
    assert sum(d["FUSED_POOL"] is not None for d in plans) >= 3
    assert sum(d["FUSED_REDUCE"] is not None for d in plans) >= 3
    assert sum(d["FUSED_CREDUCE"] is not None for d in plans) >= 3
    assert sum(d["FUSED_CREDUCE"] is not None and d["FUSED_CREDUCE"]["PARTS"] > 1 for d in plans) >= 1
    assert sum(d["FMA_DX"] is not None and len(d["FMA_DX"]["PHASES"]) > 1 for d in plans) >= 2
    assert sum(d["FMA_FWD"] is not None for d in plans) >= 3


def test_reductions_not_over_exactly_hw_are_not_folded():
    for cid in ("maxpool_dilated_ceil_amax_hw_relu", "halo_ci8_maxpool_ceil_even_sum"):
        assert fam.derive(_spec(CASE[cid]))["FUSED_REDUCE"] is None, cid  # pooling first
    src = conv_epilogue_problem((2, 12, 20, 19), conv(12, 12, 1, stride=2), CONV_IN + ["return x.mean(dim=(2, 3))"])
    d = fam.derive(_spec(src))  # a 1x1 kernel at stride 2, 12 input channels: neither the halo forward nor FMAs
    assert d["HALO"] is None and d["FMA_FWD"] is None and d["FUSED_REDUCE"] is None
    src = CASE["halo_groups2_relu_sum_hw"].replace("x.sum(dim=[2, 3])", "x.sum(dim=[1, 2, 3])")
    assert fam.derive(_spec(src))["FUSED_REDUCE"] is None


@pytest.mark.parametrize("body,folds", [
    ("return x.mean(dim=(2, 3))", True),
    ("return F.adaptive_avg_pool2d(torch.tanh(x), 1).flatten(1)", True),
    ("return torch.amax(x, dim=(2, 3), keepdim=True) * 2.0", True),
    ("return x.sum(dim=(1, 2, 3))", False),  # the channel dim too
    ("return x.mean(dim=2)", False),
    ("return F.max_pool2d(x, 2).sum(dim=(2, 3))", False),  # pooling first
])
def test_few_input_channels_fold_a_reduction_over_hw_into_the_fma_forward(body, folds):
    """Inference folds a first reduction over exactly (H, W) into the forward on FMAs (FUSED_REDUCE without HALO):
    one partial per (image, channel, block of THREADS column groups), so TILES blocks an image."""
    src = conv_epilogue_problem((2, 3, 80, 45), conv(3, 16, 3, stride=(1, 2)), CONV_IN + [body])
    spec = _spec(src)
    d = fam.derive(spec)
    assert d["FMA_FWD"] is not None and d["HALO"] is None
    r = d["FUSED_REDUCE"]
    assert (r is not None) is folds
    if folds:
        assert r["TILES"] == -(-spec.HO * d["FMA_FWD"]["GW"] // d["FMA_FWD"]["THREADS"]) == 2
        kernel = emit.generate(write_problem(src)).files["kernel.cu"]
        assert "conv_forward_fma<true, true><<<" in kernel and "fold_finish<<<" in kernel


# halo-shaped grad_x (stride 1, out channels a multiple of 8) of at most FMA_DX_CIG_MAX input channels a group: on FMAs
DX_FEW = ["dxhalo_ci3_co16_k3_pad3_relu", "dxhalo_groups2_co16_k3x2_pad02_tanh"]
DX_HALO = [cid for cid in CASE if cid.startswith("dxhalo_") and cid not in DX_FEW] + ["halo_ci16_pad1_relu", "halo_ci24_k3x5_dil21_bias_c"]


@pytest.mark.parametrize("cid", DX_FEW)
def test_few_input_channels_take_grad_x_on_fmas_over_halo_tiles(cid):
    d = fam.derive(_spec(CASE[cid]))
    assert d["CIG"] <= fam.FMA_DX_CIG_MAX and d["FMA_DX"] is not None and d["HALO_DX"] is None


@pytest.mark.parametrize("cid", DX_HALO)
def test_grad_x_from_halo_tiles_is_the_convolution_of_gz_with_flipped_weights(cid):
    """halo_dx_plan's padding and the template's weight map (tap (kh, kw) = w's (KH-1-kh, KW-1-kw), in / out channels
    swapped per group) give PyTorch's grad_x: here on the CPU in float64, a negative padding cropping gz."""
    spec = _spec(CASE[cid])
    plan = fam.derive(spec)["HALO_DX"]
    assert plan is not None and plan["FLIP"] and (plan["SH"], plan["SW"]) == (1, 1)
    s, g = spec, spec.G
    torch.manual_seed(0)
    x = torch.randn(2, s.CI, s.H, s.W, dtype=torch.float64, requires_grad=True)
    w = torch.randn(s.CO, s.CI // g, s.KH, s.KW, dtype=torch.float64)
    y = F.conv2d(F.pad(x, (s.PW, s.PW_END, s.PH, s.PH_END)), w, dilation=(s.DH, s.DW), groups=g)
    gz = torch.randn_like(y)
    y.backward(gz)
    wf = w.flip(2, 3).reshape(g, s.CO // g, s.CI // g, s.KH, s.KW).transpose(1, 2).reshape(s.CI, s.CO // g, s.KH, s.KW)
    ph, pw = plan["PH"], plan["PW"]  # top / left; the bottom / right follow from the output size H x W
    pb, pr = (s.H - 1) + (s.KH - 1) * s.DH - ph - (s.HO - 1), (s.W - 1) + (s.KW - 1) * s.DW - pw - (s.WO - 1)
    gx = F.conv2d(F.pad(gz, (pw, pr, ph, pb)), wf, dilation=(s.DH, s.DW), groups=g)  # F.pad crops where negative
    assert gx.shape == x.shape
    torch.testing.assert_close(gx, x.grad)


def _phase_grad_x(plan: dict, gz: torch.Tensor, w: torch.Tensor, spec) -> torch.Tensor:
    """grad_x as the template computes it from halo_dx_plan's phases, on the CPU: phase output (i, j) at grad_x's
    (OH0 + OSH*i, OW0 + OSW*j) sums, over flipped taps (u, v) and the group's gz channels, gz at (i - PH + u*DH,
    j - PW + v*DW) (zero outside) times w's (KH0 + KSH*(KH-1-u), KW0 + KSW*(KW-1-v)), in / out channels swapped."""
    s, g = spec, spec.G
    n, cog, cig = gz.shape[0], s.CO // g, s.CI // g
    gx = torch.zeros(n, s.CI, s.H, s.W, dtype=gz.dtype)
    big = 64
    gzp = F.pad(gz, (big, big, big, big))
    for ph in plan["PHASES"]:
        out = torch.zeros(n, s.CI, ph["HOUT"], ph["WOUT"], dtype=gz.dtype)
        for u in range(ph["KH"]):
            for v in range(ph["KW"]):
                r0, c0 = big - ph["PH"] + u * ph["DH"], big - ph["PW"] + v * ph["DW"]
                win = gzp[:, :, r0:r0 + ph["HOUT"], c0:c0 + ph["WOUT"]]
                kh, kw = ph["KH0"] + ph["KSH"] * (ph["KH"] - 1 - u), ph["KW0"] + ph["KSW"] * (ph["KW"] - 1 - v)
                for gi in range(g):
                    wt = w[gi * cog:(gi + 1) * cog, :, kh, kw]  # (cog, cig)
                    out[:, gi * cig:(gi + 1) * cig] += torch.einsum("nohw,oc->nchw", win[:, gi * cog:(gi + 1) * cog], wt)
        rows = range(ph["OH0"], ph["OH0"] + ph["OSH"] * ph["HOUT"], ph["OSH"])
        cols = range(ph["OW0"], ph["OW0"] + ph["OSW"] * ph["WOUT"], ph["OSW"])
        assert rows[-1] < s.H and cols[-1] < s.W and (ph["OH0"] + ph["OSH"] * ph["HOUT"] >= s.H)
        gx[:, :, ph["OH0"]::ph["OSH"], ph["OW0"]::ph["OSW"]] = out
    return gx


@pytest.mark.parametrize("shape,kw", [((2, 16, 21, 40), dict(kernel_size=(3, 5), stride=2, padding=1)),
                                      ((1, 8, 19, 23), dict(kernel_size=3, stride=2)),
                                      ((2, 16, 20, 17), dict(kernel_size=5, stride=(2, 3), padding=(2, 1), dilation=(1, 2))),
                                      ((1, 12, 17, 18), dict(kernel_size=4, stride=3, padding=2, groups=2)),
                                      ((1, 8, 23, 22), dict(kernel_size=(3, 2), stride=(1, 2), dilation=(3, 1)))])
def test_strided_grad_x_phases_from_halo_tiles_give_pytorchs_grad_x(shape, kw, monkeypatch):
    """halo_dx_plan at strides > 1: one flipped stride-1 halo convolution of gz a stride phase (_dx_axis's taps,
    dilation and padding, the weight map and the output placement) gives PyTorch's grad_x, in float64 on the CPU; the
    phases cover every row and column of grad_x once. Past HALO_DX_MAX_PHASES phases (stride 3 here) the im2col
    phases stay; the decomposition is checked there too, with the cap lifted."""
    phases = (kw["stride"] if isinstance(kw["stride"], int) else kw["stride"][0]) * \
        (kw["stride"] if isinstance(kw["stride"], int) else kw["stride"][1])
    kw = dict(kw)
    src = conv_epilogue_problem(shape, conv(shape[1], 24, kw.pop("kernel_size"), **kw), CONV_IN + ["return torch.relu(x)"])
    assert (fam.derive(_spec(src))["HALO_DX"] is None) is (phases > fam.HALO_DX_MAX_PHASES)
    monkeypatch.setattr(fam, "HALO_DX_MAX_PHASES", 9)
    spec = _spec(src)
    plan = fam.derive(spec)["HALO_DX"]
    assert plan is not None and len(plan["PHASES"]) == len(fam.stride_phases(spec)) == spec.SH * spec.SW
    s, g = spec, spec.G
    torch.manual_seed(0)
    x = torch.randn(2, s.CI, s.H, s.W, dtype=torch.float64, requires_grad=True)
    w = torch.randn(s.CO, s.CI // g, s.KH, s.KW, dtype=torch.float64)
    y = F.conv2d(F.pad(x, (s.PW, s.PW_END, s.PH, s.PH_END)), w, stride=(s.SH, s.SW), dilation=(s.DH, s.DW), groups=g)
    gz = torch.randn_like(y)
    y.backward(gz)
    torch.testing.assert_close(_phase_grad_x(plan, gz, w, spec), x.grad)


def test_strided_grad_x_keeps_the_gemm_where_a_phase_has_no_taps():
    """Dilation 2 at stride 2: odd rows are reached by no tap (their grad_x is zero), so the im2col phases stay."""
    spec = _spec(conv_epilogue_problem((1, 8, 21, 22), conv(8, 16, 3, stride=2, dilation=2), CONV_IN + ["return torch.relu(x)"]))
    assert fam.derive(spec)["HALO_DX"] is None and fam._dx_axis(1, 3, 2, 2, 0) is None


@pytest.mark.parametrize("cid", ["relu", "halo_groups2_k5_s2_p2_silu", "dilation2_stride2_softplus", "maxpool2_mish",
                                 "pw_k1_ci20_co40_odd_plane_relu", "pw_lone_k1_ci200_co130_w30", "halo_w_ci14_co53_s12_clamp_add_avgpool"])
def test_backward_kernels_are_chosen_by_shape(cid):
    """grad_x on FMAs for groups of at most 4 input channels, else from halo tiles only at stride 1 with out channels
    per group a multiple of 8; grad_w as a plain GEMM for a pointwise convolution (1x1, stride 1, unpadded), else from
    halo tiles wherever the stride is within the kernel; a first pooling stage's backward folded into the adjoint
    kernel."""
    spec = _spec(CASE[cid])
    d = fam.derive(spec)
    few = spec.CI // spec.G <= fam.FMA_DX_CIG_MAX and not d["DIRECT"]  # grad_x on FMAs (fma_dx_plan)
    assert (d["FMA_DX"] is not None) == few
    reached = all(fam._dx_axis(rh, spec.KH, spec.SH, spec.DH, spec.PH) and fam._dx_axis(rw, spec.KW, spec.SW, spec.DW, spec.PW)
                  for rh, rw, *_ in fam.stride_phases(spec))  # every stride phase reached by some tap
    reached = reached and len(fam.stride_phases(spec)) <= fam.HALO_DX_MAX_PHASES
    assert (d["HALO_DX"] is not None) == (reached and fam.halo_channels_ok(spec.CO // spec.G) and not few)
    pointwise = (spec.KH, spec.KW, spec.SH, spec.SW, spec.PH, spec.PW, spec.PH_END, spec.PW_END) == (1, 1, 1, 1, 0, 0, 0, 0)
    assert (d["PW_W"] is not None) == (pointwise and not d["DIRECT"])
    assert (d["HALO_W"] is not None) == (spec.SH <= spec.KH and spec.SW <= spec.KW and d["PW_W"] is None)
    if d["PW_W"]:  # its instance for gz pre-rounded by the adjoint kernel exists where grad_x from halo tiles reads gz too
        assert d["PW_W"]["ROUNDS"] == ([True, False] if d["write_gz"] and d["HALO_DX"] else [True])
        assert d["ALIGN16_X"] == (d["PW_W"]["V"] > 1 or bool(d["HALO"] and d["HALO"]["HV"] > 1))
    assert (d["FOLD_POOL_BWD"] is not None) == bool(spec.stages and spec.stages[0].kind == "pool")
    if d["FOLD_POOL_BWD"]:
        assert d["write_gz"]  # the adjoint kernel materializes gz from the pooled gradient


@pytest.mark.gpu
@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32_on"])
@pytest.mark.parametrize("cid", FUSED + FUSED_REDUCE + FMA_FUSED_REDUCE + FUSED_CREDUCE + FMA_FUSED_CREDUCE)
def test_inference_with_pooling_folded_in_matches(cid, tf32):
    """Without autograd the first pooling stage, or a first reduction over (H, W), runs inside the convolution's
    kernel. Training folds the pooling too, in the kernel built with SAVE (the numerics tier checks its gradients);
    a reduction's training forward stays unfused (the numerics tier does not reach its inference fold)."""
    model, new, shape = setup_problem(CASE[cid])
    ops = setup_ops(CASE[cid])
    x = torch.randn(shape, device="cuda")
    with torch.no_grad():
        ref = model(x)
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        with torch.no_grad():
            poison_cuda_allocator(4 * ref.numel() + 4096)
            out = new(x)
        ops.save_policy("store")  # the training forward runs in the forward (else the backward would run it)
        train = new(x.clone().requires_grad_(True)).detach()  # the SAVE kernel (pooling) or the unfused ones (reduction)
    finally:
        torch.backends.cudnn.allow_tf32 = False
        ops.save_policy("auto")
    tol = 2e-3 if tf32 else 1e-4
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    torch.testing.assert_close(out, train, atol=1e-5 if not tf32 else 2e-3, rtol=1e-5 if not tf32 else 2e-3)


def setup_ops(source: str):
    """The generated module's ops (torch.ops.<namespace>), its extension loaded."""
    return generate_module(source)["kgen_load"]()


SAVE_POLICY_CASES = ["relu", "maxpool2_mish", "halo_ci16_avgpool2_divisor_scale_c", "halo_ci8_k5s2_gelu_global_avg_squeeze",
                     "adaptive_max_5x3_scale_logsumexp_c", "halo_ci8_tanh_adaptive_max1_flatten",
                     "mean_keepdim_flatten_bias_c"]  # the last: a mean folded into the forward on FMAs


def test_training_extra_work_is_derived_from_what_the_backward_reads():
    """TRAIN_EXTRA (the binding may leave the training forward's extra work to the backward) holds exactly where the
    training forward writes more than inference: z, a stage's pre-program value or winners, or an unfolded reduction."""
    for cid in SAVE_POLICY_CASES:
        assert fam.derive(_spec(CASE[cid]))["TRAIN_EXTRA"], cid
    for cid in ["lone_conv", "halo_ci24_k3x5_dil21_bias_c", "adaptive_avg_4xNone_sum_batch"]:
        d = fam.derive(_spec(CASE[cid]))
        assert not d["TRAIN_EXTRA"] and not d["needs_z"] and not d["FUSED_REDUCE"], cid
    binding = emit.generate(write_problem(CASE["relu"])).files["binding.cpp"]
    assert 'm.def("save_policy(str mode) -> str", &save_policy);' in binding
    assert "constexpr bool kTrainExtra = true;" in binding


@pytest.mark.gpu
@pytest.mark.parametrize("cid", SAVE_POLICY_CASES)
def test_save_policies_give_the_same_gradients(cid):
    """"store" (forward_train in the forward) and "recompute" (the inference forward; the backward runs forward_train
    first): the same bits in every gradient, and both match PyTorch."""
    model, new, shape = setup_problem(CASE[cid])
    ops = setup_ops(CASE[cid])
    x = torch.randn(shape, device="cuda")
    g = torch.randn_like(model(x))
    grads = {}
    try:
        for mode in ("recompute", "store"):
            ops.save_policy(mode)
            xg = x.clone().requires_grad_(True)
            new.zero_grad(set_to_none=True)
            out = new(xg)
            torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
            out.backward(g)
            grads[mode] = [xg.grad] + [p.grad for p in new.parameters()]
    finally:
        ops.save_policy("auto")
    xr = x.clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    model(xr).backward(g)
    names = ["x"] + [n for n, _ in new.named_parameters()]
    for name, a, b, want in zip(names, grads["recompute"], grads["store"], [xr.grad] + [p.grad for p in model.parameters()]):
        assert torch.equal(a, b), f"{name}.grad differs between the save policies"
        torch.testing.assert_close(a, want, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}: {m}")


@pytest.mark.gpu
def test_auto_save_policy_stores_after_the_first_backward():
    """"auto": a forward with autograd on keeps only its inputs (no z allocated) until a backward has run; then the
    forward stores z. Bad modes are refused by name."""
    src = conv_epilogue_problem((8, 16, 64, 64), conv(16, 32, 3, padding=1), CONV_IN + ["return torch.tanh(x)"])
    model, new, shape = setup_problem(src)
    ops = setup_ops(src)
    z_bytes = 8 * 32 * 64 * 64 * 4
    x = torch.randn(shape, device="cuda")

    def forward_bytes() -> int:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = new(x)  # the parameters require grad: autograd records the call
        torch.cuda.synchronize()
        grown = torch.cuda.memory_allocated() - before
        out.sum().backward()
        return grown

    assert ops.save_policy("auto") == "auto"
    lazy = forward_bytes()  # no backward seen yet: recompute
    stored = forward_bytes()  # after one backward: store
    assert stored - lazy >= z_bytes, (lazy, stored)
    assert ops.save_policy("recompute") == "auto"
    assert forward_bytes() < stored
    assert ops.save_policy("auto") == "recompute"
    assert forward_bytes() == lazy  # "auto" forgets the backwards it saw
    with pytest.raises(RuntimeError, match='save_policy takes "auto", "store" or "recompute", got "always"'):
        ops.save_policy("always")


@pytest.mark.gpu
@pytest.mark.parametrize("cid", ["maxpool2_mish", "adaptive_max_5x3_scale_logsumexp_c", "max_w_values_sub_amin_all"])
def test_stages_under_torch_compile_fullgraph(cid):
    """The fake kernels give forward_train's saved tensors their real shapes and dtypes (int32 indices), so a
    compiled training step matches eager."""
    model, new, shape = setup_problem(CASE[cid])
    check_training_step(model, new, torch.compile(new, fullgraph=True), shape)


@pytest.mark.gpu
@pytest.mark.parametrize("bad", ["channels", "height", "float64", "cpu"])
def test_bad_input_names_what_is_wrong(bad):
    model, new, (n, c, h, w) = setup_problem(HARDENING)
    want = rf"but this module was generated for \[N, {c}, {h}, {w}\]"
    x, message = {
        "channels": (torch.rand(n, c + 1, h, w, device="cuda"), rf"has shape \[{n}, {c + 1}, {h}, {w}\] {want}"),
        "height": (torch.rand(n, c, h + 3, w, device="cuda"), rf"has shape \[{n}, {c}, {h + 3}, {w}\] {want}"),
        "float64": (torch.rand(n, c, h, w, device="cuda", dtype=torch.float64), "must be float32, got float64"),
        "cpu": (torch.rand(n, c, h, w), "must be a CUDA tensor, got device cpu"),
    }[bad]
    with pytest.raises((RuntimeError, ValueError), match=message):
        new(x)


@pytest.mark.parametrize("cid,direct", [("depthwise_hardswish", True), ("pointwise_1x1_ci1_co70_chain", True),
                                        ("groups2_gelu_tanh_div_param", False), ("relu", False)])
def test_one_input_channel_per_group_takes_the_direct_kernels(cid, direct):
    """Depthwise and one-channel-input convolutions reduce over only the taps: direct kernels, not GEMM tiles."""
    spec = _spec(CASE[cid])
    plan = fam.derive(spec)["DIRECT"]
    assert (plan is not None) is direct and (spec.CI // spec.G == 1) is direct
    src = emit.generate(write_problem(CASE[cid])).files["kernel.cu"]
    assert ("direct_forward<<<" in src) is direct
    if direct:  # strips of RO output rows split HO evenly: the last one is not mostly idle
        ro, strips = plan["RO"], plan["STRIPS"]
        assert ro <= fam.DIRECT_ROWS_OUT and strips == -(-spec.HO // ro) and (strips - 1) * ro < spec.HO
        assert strips == -(-spec.HO // fam.DIRECT_ROWS_OUT) and strips * ro - spec.HO < strips
        assert plan["ROWS"] == (ro - 1) * spec.SH + (spec.KH - 1) * spec.DH + 1


def _fma_path(shape, cv, fma: bool, key: str, kernel_name: str, halo_key: str):
    """The FMA plan `key` of a relu problem; asserts it is taken exactly when `fma` and that the rendered launcher then
    calls `<kernel_name>_fma`, else the GEMM `<kernel_name>` (unless a halo or direct kernel runs)."""
    src = conv_epilogue_problem(shape, cv, CONV_IN + ["return torch.relu(x)"])
    spec = _spec(src)
    d = fam.derive(spec)
    plan = d[key]
    assert (plan is not None) is fma
    kernel = emit.generate(write_problem(src)).files["kernel.cu"]
    assert (f"{kernel_name}_fma<true" in kernel) is fma
    assert (f"{kernel_name}<true><<<" in kernel) is (not fma and not d[halo_key] and not d["DIRECT"])
    return spec, d, plan


@pytest.mark.parametrize("shape,cv,fma", [
    ((2, 3, 37, 45), conv(3, 16, 7, stride=2, padding=3), True),  # a stem: strided, so no halo grad_x
    ((2, 4, 20, 19), conv(4, 12, 3), True),  # 12 out channels: not whole 8-channel gz chunks
    ((2, 8, 21, 22), conv(8, 12, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4), True),  # 2 a group
    ((2, 4, 20, 19), conv(4, 16, 3), True),  # halo-shaped: FMAs all the same
    ((2, 5, 19, 18), conv(5, 12, 3, stride=2), False),  # 5 input channels: the GEMM's columns are used
    ((2, 4, 20, 19), conv(4, 4, 3, groups=4), False),  # depthwise: the direct kernels
])
def test_few_input_channels_take_grad_x_with_fmas(shape, cv, fma):
    """grad_x of a group with at most FMA_DX_CIG_MAX input channels, where it is no halo convolution, runs on float32
    FMAs (an n8 GEMM tile would be mostly padding); its stride phases cover every input pixel exactly once, and its
    weight chunks are equal and fit the static shared memory."""
    spec, d, plan = _fma_path(shape, cv, fma, "FMA_DX", "conv_grad_x", "HALO_DX")
    if not fma:
        return
    pixels = sorted((ph["ih0"] + spec.SH * i, ph["iw0"] + spec.SW * j)
                    for ph in plan["PHASES"] for i in range(ph["hp"]) for j in range(ph["wp"]))
    assert pixels == [(h, w) for h in range(spec.H) for w in range(spec.W)]
    assert all(ph["ih0"] < spec.SH and ph["iw0"] < spec.SW for ph in plan["PHASES"])
    assert plan["MAX_GROUPS"] == max(ph["hp"] * -(-ph["wp"] // plan["PXW"]) for ph in plan["PHASES"])
    cig, cog, kk = d["CIG"], d["COG"], spec.KH * spec.KW
    assert plan["CIGP"] in (1, 2, 4) and cig <= plan["CIGP"] < 2 * cig
    chunks = -(-cog // plan["CO_CHUNK"])
    assert plan["CO_CHUNK"] * kk * plan["CIGP"] <= fam.FMA_DX_WS_FLOATS and chunks * plan["CO_CHUNK"] - cog < chunks


@pytest.mark.parametrize("shape,cv,fma", [
    ((2, 3, 37, 45), conv(3, 16, 7, stride=2, padding=3), True),  # a stem
    ((2, 8, 21, 22), conv(8, 12, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=4), True),  # 2 a group
    ((2, 4, 20, 19), conv(4, 3, 3), True),  # 3 out channels: a tile of 4
    ((2, 8, 20, 19), conv(8, 16, 3), False),  # the halo forward
    ((2, 5, 19, 18), conv(5, 12, 3, stride=2), False),  # 5 input channels: the implicit GEMM
    ((2, 4, 20, 19), conv(4, 4, 3, groups=4), False),  # depthwise: the direct kernels
])
def test_few_input_channels_take_the_forward_with_fmas(shape, cv, fma):
    """The forward of a group with at most FMA_FWD_CIG_MAX input channels and no halo forward runs on float32 FMAs
    (an implicit GEMM's k would be a few taps padded to BK); its tiles cover every output column and channel."""
    spec, d, plan = _fma_path(shape, cv, fma, "FMA_FWD", "conv_forward", "HALO")
    if not fma:
        return
    assert plan["CT"] == (16 if d["COG"] > 8 else 8 if d["COG"] > 4 else 4) and plan["CTILES"] * plan["CT"] >= d["COG"] > (plan["CTILES"] - 1) * plan["CT"]
    assert plan["GW"] * plan["PXW"] >= spec.WO > (plan["GW"] - 1) * plan["PXW"]
    assert plan["SPAN"] == (plan["PXW"] - 1) * spec.SW + (spec.KW - 1) * spec.DW + 1
    assert d["CIG"] * spec.KH * spec.KW * plan["CT"] + plan["THREADS"] * plan["PXW"] <= fam.FMA_FWD_SMEM_FLOATS


@pytest.mark.parametrize("init,expr", [
    (["self.scale = nn.Parameter(torch.ones(out_channels, 1, 1) * 0.5)"], "torch.full((8, 1, 1), 0.5)"),
    (["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1) * 2 - 1)"], "torch.rand((8, 1, 1)) * 2.0 + -1.0"),
    (["self.scale = nn.Parameter(torch.randn(()) * 0.1)"], "torch.randn(()) * 0.1"),
])
def test_initialization_recipes_are_found_in_models_draw_order(init, expr):
    """The scale is created after the conv, so ModelNew must draw the conv first and then this exact recipe."""
    src = conv_epilogue_problem((2, 3, 12, 13), conv(3, 8, 3), CONV_IN + ["return x * self.scale"], init)
    spec = _spec(src)
    plan = fam.init_plan(spec, load_problem(write_problem(src)))
    assert plan == [dict(kind="conv"), dict(kind="tensor", name="scale", expr=expr)]


@pytest.mark.parametrize("form,plan", [
    ("functional", [dict(kind="conv"), dict(kind="tensor", name="scale", expr="torch.rand((8, 1, 1))")]),
    ("functional_kaiming", [dict(kind="tensor", name="w", expr="nn.init.kaiming_uniform_(torch.empty((8, 3, 3, 3)), a=math.sqrt(5))"),
                            dict(kind="tensor", name="b", expr="torch.full((8,), 0.0)"),
                            dict(kind="tensor", name="scale", expr="torch.rand((8, 1, 1))")]),
    ("functional_randn", [dict(kind="tensor", name="w", expr="torch.randn((8, 3, 3, 3)) * 0.05"),
                          dict(kind="tensor", name="b", expr="torch.randn((8,)) * 0.1"),
                          dict(kind="tensor", name="scale", expr="torch.rand((8, 1, 1))")]),
])
def test_functional_conv_tensors_are_drawn_as_model_draws_them(form, plan):
    """F.conv2d's weight and bias: drawn together as nn.Conv2d draws them where Model does that, else each by its own
    recipe, in Model's order; ModelNew holds them under Model's names with Model's values under any seed."""
    src = conv_epilogue_problem((2, 3, 12, 13), conv(3, 8, 3), CONV_IN + ["return x * self.scale"],
                                ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1))"], form=form)
    spec = _spec(src)
    assert (spec.weight_name, spec.bias_name) == ("w", "b")
    assert fam.init_plan(spec, load_problem(write_problem(src))) == plan
    ns: dict = {"__name__": "x"}
    exec(compile(emit.generate(write_problem(src)).files["model_new.py"], "<model_new.py>", "exec"), ns)
    user = _user(src)
    for seed in (3, 42):
        torch.manual_seed(seed)
        want = user["Model"](*user["get_init_inputs"]()).state_dict()
        torch.manual_seed(seed)
        got = ns["ModelNew"](*user["get_init_inputs"]()).state_dict()
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("init,steps", [
    (["self.conv.bias = nn.Parameter(self.conv.bias + torch.ones_like(self.conv.bias) * 0.02)"],
     [("conv.bias", "add_", "torch.full((8,), 0.02)")]),
    (["self.conv.bias = nn.Parameter(self.conv.bias + torch.randn(self.conv.bias.shape) * 0.02)"],
     [("conv.bias", "add_", "torch.randn((8,)) * 0.02")]),
    (["nn.init.xavier_uniform_(self.conv.weight)", "nn.init.zeros_(self.conv.bias)"],
     [("conv.weight", "copy_", "nn.init.xavier_uniform_(torch.empty((8, 3, 3, 3)))"),
      ("conv.bias", "copy_", "torch.full((8,), 0.0)")]),
    (["nn.init.kaiming_normal_(self.conv.weight, mode='fan_out', nonlinearity='relu')"],
     [("conv.weight", "copy_", None)]),
    (["nn.init.normal_(self.conv.weight, 0.0, 0.02)", "nn.init.uniform_(self.conv.bias, -0.1, 0.1)"],
     [("conv.weight", "copy_", None), ("conv.bias", "copy_", None)]),
    (["with torch.no_grad():", "    self.conv.weight.mul_(0.5)"], [("conv.weight", "mul_", "0.5")]),
    (["nn.init.constant_(self.conv.bias, 0.1)", "nn.init.xavier_normal_(self.conv.weight)"],  # bias first: no draw
     [("conv.weight", "copy_", None), ("conv.bias", "copy_", "torch.full((8,), 0.1)")]),
])
def test_changes_to_the_convs_own_draws_are_replayed(init, steps):
    """Model may change what nn.Conv2d drew in __init__ (a user's nn.init call, the benchmarks' `+ 0.02` on the conv
    bias): ModelNew draws the conv as nn.Conv2d does, then the same change, then the program's tensors, so its state
    is Model's under any seed."""
    src = conv_epilogue_problem((2, 3, 12, 13), conv(3, 8, 3), CONV_IN + ["return x * self.scale"],
                                init + ["self.scale = nn.Parameter(torch.rand(out_channels, 1, 1))"])
    spec = _spec(src)
    plan = fam.init_plan(spec, load_problem(write_problem(src)))
    # an expression may differ from the one written where both draw the same values (torch.randn(...) * 0.02 is
    # nn.init.normal_(..., 0.0, 0.02)): the state_dicts below are the check; None leaves the text open
    assert [(p["kind"], p.get("name"), p.get("op")) for p in plan] == (
        [("conv", None, None)] + [("adjust", n, op) for n, op, _ in steps] + [("tensor", "scale", None)])
    assert all(e is None or p["expr"] == e for p, (_, _, e) in zip(plan[1:], steps)), plan
    _assert_draws_as_model(src)


def _assert_draws_as_model(src: str) -> None:
    """The generated module passes the static rules, and ModelNew built under seeds kgen never replayed holds Model's
    state_dict key for key (in order) and value for value, its buffers (non-persistent too) under Model's names, and
    leaves the generator where Model's __init__ leaves it; built with autograd on and, as KernelBench's harness builds
    both, under torch.no_grad()."""
    from tests.test_static_rules import violations  # it imports this module (tests/families.py)

    text = emit.generate(write_problem(src)).files["model_new.py"]
    assert violations(text) == []
    ns: dict = {"__name__": "x"}
    exec(compile(text, "<model_new.py>", "exec"), ns)
    user = _user(src)
    for seed, grad in ((3, True), (42, False)):  # KernelBench's harness builds both under torch.no_grad(), seed 42
        with torch.set_grad_enabled(grad):
            torch.manual_seed(seed)
            model = user["Model"](*user["get_init_inputs"]())
            want, want_next = model.state_dict(), torch.rand(3)
            torch.manual_seed(seed)
            new = ns["ModelNew"](*user["get_init_inputs"]())
            got, got_next = new.state_dict(), torch.rand(3)
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
        assert torch.equal(got_next, want_next), "ModelNew's __init__ consumed other draws than Model's"
        assert [n for n, _ in new.named_buffers()] == [n for n, _ in model.named_buffers()]


@pytest.mark.parametrize("before,after", [
    ([], ["self.bn = nn.BatchNorm2d(out_channels)", "self.fc = nn.Linear(out_channels, 4)",
          "self.scale = nn.Parameter(torch.rand(out_channels, 1, 1))"]),
    (["self.head = nn.Linear(3, 5)"], ["self.scale = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)",
                                       "self.register_buffer('steps', torch.zeros((), dtype=torch.long))",
                                       "self.register_buffer('noise', torch.randn(6), persistent=False)"]),
])
def test_unused_tensors_are_held_and_drawn_as_model_draws_them(before, after):
    """Tensors Model holds but its forward never reads (an unused BatchNorm2d or Linear, its own buffers, one created
    before the conv): ModelNew holds them under the same names, kinds and order and draws them in Model's order, so
    its state_dict is Model's key for key and value for value under unseen seeds, and the draws after __init__ agree."""
    src = conv_epilogue_problem((2, 3, 12, 13), conv(3, 8, 3), CONV_IN + ["return x * self.scale"], after)
    src = src.replace("        self.conv = nn.Conv2d(", "".join(f"        {b}\n" for b in before) + "        self.conv = nn.Conv2d(")
    assert all(b in src for b in before)
    spec = _spec(src)
    plan = fam.init_plan(spec, load_problem(write_problem(src)))
    assert plan is not None and plan[2 * len(before)] == dict(kind="conv"), plan  # after a Linear's weight and bias
    _assert_draws_as_model(src)


@pytest.mark.parametrize("line,init,random_form", [
    ("x = self.drop(x)", ["self.drop = nn.Dropout(0.0)"], ("nn.Dropout(0.0)", "nn.Dropout(0.25)")),
    ("x = self.drop(x)", ["self.drop = nn.Dropout2d(p=0)"], ("p=0)", "p=0.25)")),
    ("x = self.skip(x)", ["self.skip = nn.Identity()"], None),
    ("x = F.dropout(x, p=0.0, training=self.training)", [], ("p=0.0", "p=0.25")),
    ("x = torch.dropout(x, 0.0, True)", [], ("0.0, True", "0.25, True")),
    ("x = x.contiguous()", [], None),
    ("x = x.float()", [], None),
    ("x = x.to(torch.float32)", [], None),
    ("x = x.to(dtype=x.dtype)", [], None),
    ("x = x.to(x.device)", [], None),
    ("x = x.to(device=x.device, dtype=torch.float32, non_blocking=True)", [], None),
])
def test_ops_that_return_their_input_are_dropped(line, init, random_form):
    """nn.Identity, dropout with p = 0, .contiguous(), casts to the value's own dtype and moves to a tensor's device
    between the program's ops
    render the same kernels as the problem without them (the binding differs only in the problem's id); dropout with
    p > 0 (random masks in training mode) is refused by name."""
    forward = CONV_IN + ["x = torch.relu(x)", line, "return x * 2.0"]
    src = conv_epilogue_problem((2, 8, 12, 13), conv(8, 8, 3), forward, init)
    plain = conv_epilogue_problem((2, 8, 12, 13), conv(8, 8, 3), [f for f in forward if f != line], init)
    got, want = (emit.generate(write_problem(t)) for t in (src, plain))
    assert got.files["kernel.cu"].replace(got.name, "NAME") == want.files["kernel.cu"].replace(want.name, "NAME")
    if random_form:
        assert random_form[0] in src
        with pytest.raises(Unsupported, match="[Dd]ropout"):
            match(load_problem(write_problem(src.replace(*random_form))))


@pytest.mark.parametrize("unpacked,indexed", [
    (["v, i = torch.max(x, dim=1)", "return torch.tanh(v)"], ["return torch.tanh(torch.max(x, dim=1)[0])"]),
    (["x, _ = torch.min(x, dim=1, keepdim=True)", "return x * 2.0"], ["return torch.min(x, dim=1, keepdim=True)[0] * 2.0"]),
    (["v, idx = F.max_pool2d(x, 2, return_indices=True)", "return torch.relu(v)"], ["return torch.relu(F.max_pool2d(x, 2))"]),
])
def test_a_values_indices_pair_unpacked_with_unused_indices_is_its_values(unpacked, indexed):
    """`v, i = torch.max(x, dim=1)` (or a max pool's return_indices) with i never read renders the same kernels and
    binding as reading [0] (the problem's id aside); reading the indices stays refused."""
    src, plain = (conv_epilogue_problem((2, 8, 12, 13), conv(8, 8, 3), CONV_IN + lines) for lines in (unpacked, indexed))
    paths = [write_problem(t) for t in (src, plain)]
    gens = [emit.generate(p) for p in paths]
    for f in ("kernel.cu", "binding.cpp"):
        norm = [g.files[f].replace(g.name, "NAME").replace(p.stem, "PROBLEM") for g, p in zip(gens, paths)]
        assert norm[0] == norm[1], f
    name = unpacked[0].split(", ")[1].split(" =")[0]
    reads = src.replace(unpacked[1], unpacked[1] + f" + {name}.float()")  # the indices read after all
    with pytest.raises(Unsupported, match="through its values"):
        match(load_problem(write_problem(reads)))


def test_forward_arguments_with_defaults_are_the_constants_every_call_passes():
    """forward(self, x, alpha=0.5, clamp=True) called with get_inputs()'s one tensor: alpha and clamp are the
    constants they default to (the tracer's guards on them dropped), so the kernel is the literal program's."""
    lines = CONV_IN + ["return torch.relu(x) * 0.5"]
    plain = conv_epilogue_problem((2, 8, 12, 13), conv(8, 8, 3), lines)
    src = plain.replace("def forward(self, x):", "def forward(self, x, alpha=0.5, clamp=True):").replace(
        "return torch.relu(x) * 0.5", "return (torch.relu(x) if clamp else x) * alpha")
    assert "alpha=0.5" in src and "* alpha" in src
    got, want = (emit.generate(write_problem(t)) for t in (src, plain))
    assert got.files["kernel.cu"].replace(got.name, "NAME") == want.files["kernel.cu"].replace(want.name, "NAME")


def test_unknown_initialization_warns_and_keeps_the_state_dict_layout():
    """A custom init kgen cannot replay (orthogonal_ on the weight) gives a warning naming the way out (load Model's
    state_dict), and ModelNew still has Model's parameter names and shapes."""
    src = conv_epilogue_problem((2, 3, 12, 13), conv(3, 8, 3), CONV_IN + ["return torch.relu(x)"],
                                ["nn.init.orthogonal_(self.conv.weight)"])
    with pytest.warns(UserWarning, match="load Model's state_dict"):
        gen = emit.generate(write_problem(src))
    ns: dict = {"__name__": "x"}
    exec(compile(gen.files["model_new.py"], "<model_new.py>", "exec"), ns)
    user = _user(src)
    want = user["Model"](*user["get_init_inputs"]()).state_dict()
    got = ns["ModelNew"](*user["get_init_inputs"]()).state_dict()
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in want.items()}


# KernelBench-style level-2 conv blocks at benchmark sizes (the benchmark's own problem files are not in this repo;
# tests/bench/bench_conv2d_epilogue.py --blocks times them):
# (id, input shape, conv kwargs, forward lines, __init__ lines, extra constructor args)
BENCH_STYLE_BLOCKS = [
    ("scaling_min_c", (64, 64, 64, 64), conv(64, 128, 3),
     CONV_IN + ["x = x * self.scale_factor", "return torch.min(x, dim=1, keepdim=True)[0]"],
     ["self.scale_factor = scale_factor"], {"scale_factor": 2.0}),
    ("sub_tanh_sub_avgpool", (128, 64, 128, 128), conv(64, 128, 3),
     CONV_IN + ["x = torch.tanh(x - 0.5)", "return self.avgpool(x - 0.2)"], ["self.avgpool = nn.AvgPool2d(2)"], {}),
    ("mul_param_leaky_gelu", (64, 64, 256, 256), conv(64, 64, 3),
     CONV_IN + ["x = self.leaky_relu(x * self.multiplier)", "return F.gelu(x)"],
     ["self.multiplier = nn.Parameter(torch.randn(out_channels, 1, 1))", "self.leaky_relu = nn.LeakyReLU()"], {}),
    ("tanh_scale_bias_maxpool4", (128, 8, 256, 256), conv(8, 64, 3),
     CONV_IN + ["x = torch.tanh(x) * 2.0 + self.bias", "return self.max_pool(x)"],
     ["self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))", "self.max_pool = nn.MaxPool2d(4)"], {}),
    ("min_const_bias_scale", (128, 64, 128, 128), conv(64, 128, 3),
     CONV_IN + ["x = torch.min(x, torch.tensor(0.5))", "return (x + self.bias) * 2.0"],
     ["self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
    ("gelu_global_avg", (128, 8, 256, 256), conv(8, 64, 3),
     CONV_IN + ["x = F.adaptive_avg_pool2d(F.gelu(x), 1)", "return x.squeeze(-1).squeeze(-1)"], [], {}),
    ("sub_hardswish_maxpool_mish", (128, 64, 128, 128), conv(64, 128, 3),
     CONV_IN + ["x = F.hardswish(x - 0.5)", "return F.mish(self.pool(x))"], ["self.pool = nn.MaxPool2d(2)"], {}),
    ("padded_relu_bias", (64, 32, 192, 192), conv(32, 64, 3, padding=1),
     CONV_IN + ["return torch.relu(x) + self.bias"], ["self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))"], {}),
]


@pytest.mark.parametrize("cid,shape,cv,forward,init,args", BENCH_STYLE_BLOCKS, ids=[c[0] for c in BENCH_STYLE_BLOCKS])
def test_benchmark_style_blocks_take_the_fused_paths(cid, shape, cv, forward, init, args):
    """CPU: conv blocks as public benchmarks write them, at their sizes, take this family's fast paths: the halo
    forward (input channels a multiple of 8), its halo grad_x / grad_w, a first pooling stage folded into the conv
    kernel, a global average folded for inference, and the staged training epilogue exactly where output rows are not
    whole 32-byte sectors; and the generated module passes the static rules. A plan change that sends one of them to a
    slower path fails here."""
    from tests.test_static_rules import computes_in_float32, violations  # it imports this module (tests/families.py)
    src = conv_epilogue_problem(shape, cv, forward, init, args)
    d = fam.derive(_spec(src))
    wo = shape[3] + 2 * cv.get("padding", 0) - cv["kernel_size"] + 1
    assert d["HALO"] is not None and d["HALO_DX"] is not None and d["HALO_W"] is not None
    assert (d["FUSED_POOL"] is not None) is ("pool" in " ".join(init).lower())
    assert (d["FUSED_REDUCE"] is not None) is ("adaptive_avg_pool2d" in " ".join(forward))
    assert d["EPI_STAGED"] is (wo % 8 != 0)
    path = write_problem(src)
    assert not violations(emit.generate(path).files["model_new.py"], computes_in_float32(path))
