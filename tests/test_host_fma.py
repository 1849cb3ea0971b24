"""GPU-free checks of conv2d_epilogue's float32-FMA kernels: each runs on the CPU from its rendered text
(tests/host_fma.py: g++, one std::thread a CUDA thread) and must give PyTorch's result, in both TF32 modes, with
poisoned outputs (NaN) so an element no thread writes fails."""

import copy

import pytest
import torch

from kgen import emit
from kgen.families import conv2d_epilogue as fam
from kgen.problem import load_problem
from kgen.spec import match
from tests.helpers import tf32_round, write_problem
from tests.host_fma import GXX, read_floats, run_host
from tests.test_conv2d_epilogue import CASE, CONV_IN, conv, conv_epilogue_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not on PATH")


def _takes(src: str, key: str) -> bool:
    return fam.derive(match(load_problem(write_problem(src)))[1])[key] is not None


FMA_DX_CASES = [(cid, src) for cid, src in CASE.items() if _takes(src, "FMA_DX")]  # every CASE that takes it
GRAD_X = FMA_DX_CASES + [
    ("s23_d21_g4_p12", conv_epilogue_problem((2, 8, 21, 22), conv(8, 12, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1),
                                                                   groups=4), CONV_IN + ["return torch.relu(x)"])),
    ("s12_k2x3_g2_co3", conv_epilogue_problem((3, 4, 17, 19), conv(4, 6, (2, 3), stride=(1, 2), groups=2), CONV_IN + ["return x"])),
    ("s3_k1_phases_without_taps", conv_epilogue_problem((2, 3, 10, 11), conv(3, 5, 1, stride=3), CONV_IN + ["return x"])),
    # 'same' with an even kernel: one more row and column of padding after than before
    ("same_k4_co5_asymmetric_pad", conv_epilogue_problem((2, 3, 12, 15), conv(3, 5, 4, padding="same"), CONV_IN + ["return x"])),
]


def test_the_cases_reach_grad_x_with_fmas():
    """The CASES keep reaching the FMA grad_x (so the host checks above cover it on the family's own shapes)."""
    ids = [cid for cid, _ in FMA_DX_CASES]
    assert len(ids) >= 8 and "stem_k7s2p3_relu_maxpool3s2p1" in ids and "groups2_gelu_tanh_div_param" in ids


def _problem(src: str):
    path = write_problem(src)
    family, spec = match(load_problem(path))
    return spec, family.derive(spec), emit.generate(path).files["kernel.cu"]


def _taking(cid: str, src: str, key: str, what: str):
    """_problem of a case that must take the kernel path derive()[key] (`what`, for the failure message)."""
    spec, d, kernel = _problem(src)
    if d[key] is None:
        pytest.fail(f"{cid} no longer takes {what}: pick a case that does")
    return spec, d, kernel


def _forward_inputs(src: str, spec, d: dict, n: int):
    """The problem's Model (seed 0), a random input of batch n and the forward kernels' inputs: x, the weight, the bias
    (empty without one) and the program's parameters in the kernel's order."""
    user: dict = {"__name__": "problem"}
    exec(compile(src, "problem.py", "exec"), user)
    torch.manual_seed(0)
    model = user["Model"](*user["get_init_inputs"]())
    x = torch.randn(n, spec.CI, spec.H, spec.W)
    params = dict(model.named_parameters())
    bias = params["conv.bias"] if spec.HAS_BIAS else torch.empty(0)
    return model, x, [x, params["conv.weight"], bias, *[params[p["name"]] for p in d["conv_params"]]]


def _grad_x_reference(spec, n: int, w: torch.Tensor, gz: torch.Tensor) -> torch.Tensor:
    """dL/dx of the convolution for dL/dz = gz, in w's dtype: autograd through F.conv2d on the input padded by
    (PH, PH_END, PW, PW_END), so 'same' with an even kernel (one more row / column after) is covered."""
    x = torch.zeros(n, spec.CI, spec.H, spec.W, dtype=w.dtype, requires_grad=True)
    xp = torch.nn.functional.pad(x, (spec.PW, spec.PW_END, spec.PH, spec.PH_END))
    z = torch.nn.functional.conv2d(xp, w, stride=(spec.SH, spec.SW), dilation=(spec.DH, spec.DW), groups=spec.G)
    assert z.shape == gz.shape
    return torch.autograd.grad(z, x, gz)[0]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid,src", GRAD_X, ids=[c[0] for c in GRAD_X])
def test_grad_x_with_fmas_is_pytorchs_on_the_cpu(tmp_path, cid, src, tf32):
    spec, d, kernel = _taking(cid, src, "FMA_DX", "grad_x with FMAs")
    out, ref = _grad_x_run(kernel, "grad_x", spec, d, tf32, tmp_path)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)


def _grad_x_run(kernel: str, which: str, spec, d: dict, tf32: bool, work):
    """A host grad_x run (`which`) on a random gz and weight at batch 2, and its float64 reference on the operands the
    kernel multiplies (TF32-rounded where TF32 is on)."""
    n = 2
    torch.manual_seed(0)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    w = torch.randn(spec.CO, spec.CI // spec.G, spec.KH, spec.KW)
    out = run_host(kernel, which, d, [gz, w], n, tf32, work)
    rnd = tf32_round if tf32 else (lambda t: t)
    return out, _grad_x_reference(spec, n, rnd(w).double(), rnd(gz).double())


FORWARD = [
    ("c3_relu_bias_param", conv_epilogue_problem((2, 3, 13, 18), conv(3, 16, 3), CONV_IN + ["return torch.relu(x) + self.bias"],
                                                 ["self.bias = nn.Parameter(torch.randn(out_channels, 1, 1))"])),
    ("stem_k7s2p3_lone", conv_epilogue_problem((2, 3, 23, 30), conv(3, 10, 7, stride=2, padding=3), ["return self.conv(x)"])),
    ("g2_ci2_k3x2_s21_d12_p12_tanh", conv_epilogue_problem((2, 4, 15, 17), conv(4, 6, (3, 2), stride=(2, 1), dilation=(1, 2),
                                                                                padding=(1, 2), groups=2),
                                                           CONV_IN + ["return torch.tanh(x)"])),
    ("ci1_co3_nobias_scale", conv_epilogue_problem((2, 2, 9, 31), conv(2, 3, 5, padding=2, bias=False),
                                                   CONV_IN + ["return x * 0.5"])),
    # three 16-channel tiles, the last one partial; one image's 5 x 7 plane: a warp's slots span both images
    ("c3_co40_tiles_small_plane", conv_epilogue_problem((3, 3, 7, 9), conv(3, 40, 3), CONV_IN + ["return torch.relu(x)"])),
]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid,src", FORWARD, ids=[c[0] for c in FORWARD])
def test_forward_with_fmas_is_pytorchs_on_the_cpu(tmp_path, cid, src, tf32):
    spec, d, kernel = _taking(cid, src, "FMA_FWD", "the forward with FMAs")
    n = 2
    model, x, inputs = _forward_inputs(src, spec, d, n)
    out = run_host(kernel, "forward", d, inputs, n, tf32, tmp_path)
    ref_model, xr, ref = _rounded_reference(model, x, tf32)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)
    z = read_floats(tmp_path / "z.bin").reshape(n, spec.CO, spec.HO, spec.WO).double()  # what training saves
    with torch.no_grad():
        torch.testing.assert_close(z, ref_model.conv(xr), atol=1e-4, rtol=1e-4)


def _rounded_reference(model, x, tf32: bool):
    """The problem's Model in float64 on the operands the kernels multiply (x and the conv weight rounded to TF32
    where TF32 is on): (that model, its input, its output)."""
    rnd = tf32_round if tf32 else (lambda t: t)
    ref_model = copy.deepcopy(model).double()
    xr = rnd(x).double()
    with torch.no_grad():
        ref_model.conv.weight.copy_(rnd(model.conv.weight))
        return ref_model, xr, ref_model(xr)


FOLD = [
    # global average after tanh, then a view: one tile an image
    ("c3_tanh_global_avg", conv_epilogue_problem((2, 3, 13, 18), conv(3, 16, 3),
                                                 CONV_IN + ["return F.adaptive_avg_pool2d(torch.tanh(x), 1).flatten(1)"])),
    # sum with a program after it, 40 channels (three 16-channel tiles, the last partial), 2 tiles an image
    ("c3_co40_sum_sigmoid_2tiles", conv_epilogue_problem((2, 3, 40, 42), conv(3, 40, 3, padding=1),
                                                         CONV_IN + ["return torch.sigmoid(x.sum(dim=(2, 3)) * 0.01)"])),
    # amax over groups of 2 input channels with strides and dilation
    ("g2_amax_s2_d2", conv_epilogue_problem((2, 4, 19, 23), conv(4, 10, 3, stride=2, dilation=(1, 2), groups=2),
                                            CONV_IN + ["return torch.amax(torch.relu(x), dim=(2, 3))"])),
    # amin on a 5 x 7 plane (10 column groups: most of the block's threads past the image), keepdim
    ("c3_amin_small_plane_keepdim", conv_epilogue_problem((2, 3, 7, 9), conv(3, 6, 3, bias=False),
                                                          CONV_IN + ["return torch.amin(x * 2.0, dim=(2, 3), keepdim=True)"])),
]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid,src", FOLD, ids=[c[0] for c in FOLD])
def test_forward_with_fmas_and_a_folded_reduction_is_pytorchs_on_the_cpu(tmp_path, cid, src, tf32):
    """Inference with a first reduction over (H, W) folded into the forward on FMAs: per-(image, channel, tile)
    partials combined by fold_finish, which applies the stage's program; against the problem's Model in float64."""
    _check_fold(tmp_path, cid, src, tf32, halo=False)


def _check_fold(tmp_path, cid: str, src: str, tf32: bool, halo: bool) -> None:
    """Runs a problem's folded (H, W) reduction on the host (the halo forward's, or the one on FMAs) and compares its
    output, one value an (image, channel), with the problem's Model in float64."""
    spec, d, kernel = _problem(src)
    if d["HALO" if halo else "FMA_FWD"] is None or d["FUSED_REDUCE"] is None:
        pytest.fail(f"{cid} no longer folds its reduction into the {'halo forward' if halo else 'forward with FMAs'}: "
                    "pick a case that does")
    n = 2
    model, x, inputs = _forward_inputs(src, spec, d, n)
    out = run_host(kernel, "halo_fold" if halo else "forward_fold", d, inputs, n, tf32, tmp_path)
    ref = _rounded_reference(model, x, tf32)[2]
    assert ref.numel() == n * spec.CO
    torch.testing.assert_close(out.double(), ref.reshape(-1), atol=1e-4, rtol=1e-4)


# A first reduction over (H, W) folded into the forward from halo tiles (FUSED_REDUCE on HALO), then fold_finish
HALO_FOLD = [
    # issue 9's gelu -> global average, smaller: one 8-channel chunk, stride 2, several tiles an image
    ("ci8_co32_k5s2_gelu_global_avg", conv_epilogue_problem((2, 8, 40, 44), conv(8, 32, 5, stride=2),
                                                            CONV_IN + ["return F.adaptive_avg_pool2d(F.gelu(x), 1).squeeze()"])),
    # two chunks, 40 out channels, a program after the sum
    ("ci16_co40_sum_sigmoid", conv_epilogue_problem((2, 16, 21, 26), conv(16, 40, 3, padding=1),
                                                    CONV_IN + ["return torch.sigmoid(x.sum(dim=(2, 3)) * 0.01)"])),
    # amax over groups of 8 input channels, dilated, keepdim
    ("g2_ci16_amax_d2_keepdim", conv_epilogue_problem((2, 16, 19, 23), conv(16, 24, 3, dilation=(2, 1), groups=2),
                                                      CONV_IN + ["return torch.amax(torch.relu(x), dim=(2, 3), keepdim=True)"])),
]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid,src", HALO_FOLD, ids=[c[0] for c in HALO_FOLD])
def test_halo_forward_with_a_folded_reduction_is_pytorchs_on_the_cpu(tmp_path, cid, src, tf32):
    """Inference with a first reduction over (H, W) folded into the forward from halo tiles (on the shim's emulated
    mma.sync): per-(image, channel, tile) partials from the folded instance's staged tile, combined by fold_finish;
    against the problem's Model in float64."""
    _check_fold(tmp_path, cid, src, tf32, halo=True)


# A first reduction over channels folded into the forward on FMAs (FUSED_CREDUCE), then cfold_finish
FMA_CFOLD = ["fma_creduce_c3_min_c_keepdim_tanh", "fma_creduce_c3_co40_lse_c_half", "fma_creduce_g2_ci4_relu_mean_c",
             "fma_creduce_c3_co20_k5s2_amax_c"]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid", FMA_CFOLD)
def test_forward_with_fmas_and_a_folded_channel_reduction_is_pytorchs_on_the_cpu(tmp_path, cid, tf32):
    """Inference with a first reduction over channels folded into the forward on FMAs: per-(image, channel tile,
    position) partials (logsumexp: (maximum, sum) pairs) combined by cfold_finish, which applies the stage's program;
    against the problem's Model in float64."""
    _check_channel_fold(tmp_path, cid, tf32, halo=False)


def _check_channel_fold(tmp_path, cid: str, tf32: bool, halo: bool) -> None:
    """Runs CASE cid's channel fold on the host (the halo forward's, or the one on FMAs) and compares its output, one
    value an (image, position), with the problem's Model in float64."""
    spec, d, kernel = _taking(cid, CASE[cid], "FUSED_CREDUCE", "a channel fold")
    if (d["HALO"] is not None) is not halo or (d["FMA_FWD"] is not None) is halo:
        pytest.fail(f"{cid} no longer folds its channel reduction into the {'halo forward' if halo else 'forward on FMAs'}")
    n = 2
    model, x, inputs = _forward_inputs(CASE[cid], spec, d, n)
    out = run_host(kernel, "halo_cfold" if halo else "forward_cfold", d, inputs, n, tf32, tmp_path)
    ref = _rounded_reference(model, x, tf32)[2]
    assert ref.numel() == n * spec.HO * spec.WO
    torch.testing.assert_close(out.double(), ref.reshape(-1), atol=1e-4, rtol=1e-4)


DIRECT = [
    ("depthwise_hardswish", CASE["depthwise_hardswish"]),
    ("pointwise_1x1_ci1_co70_chain", CASE["pointwise_1x1_ci1_co70_chain"]),
    ("depthwise_x2_k5_s2_d2_p3_bias_param", conv_epilogue_problem(
        (2, 6, 23, 27), conv(6, 12, 5, stride=2, dilation=2, padding=3, groups=6), CONV_IN + ["return torch.tanh(x) * self.s"],
        ["self.s = nn.Parameter(torch.randn(out_channels, 1, 1))"])),
    ("ci1_co53_k5_s32_d2", conv_epilogue_problem((3, 1, 27, 40), conv(1, 53, 5, stride=(3, 2), dilation=2), ["return self.conv(x)"])),
]


@pytest.mark.parametrize("cid,src", DIRECT, ids=[c[0] for c in DIRECT])
def test_direct_kernels_are_pytorchs_on_the_cpu(tmp_path, cid, src):
    """One input channel a group: the direct forward (y and the z training saves) and grad_x, float32 in both TF32 modes
    (no rounding: the flag does not reach them)."""
    spec, d, kernel = _taking(cid, src, "DIRECT", "the direct kernels")
    n = 2
    model, x, inputs = _forward_inputs(src, spec, d, n)
    y = run_host(kernel, "direct_forward", d, inputs, n, False, tmp_path / "f")
    ref_model, xr, ref = _rounded_reference(model, x, False)
    with torch.no_grad():
        z_ref = ref_model.conv(xr)
    torch.testing.assert_close(y.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)
    z = read_floats(tmp_path / "f" / "z.bin").reshape(z_ref.shape).double()
    torch.testing.assert_close(z, z_ref, atol=1e-4, rtol=1e-4)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    gx = run_host(kernel, "direct_grad_x", d, [gz, model.conv.weight], n, False, tmp_path / "b")
    gx_ref = _grad_x_reference(spec, n, model.conv.weight.double(), gz.double())
    torch.testing.assert_close(gx.reshape(gx_ref.shape).double(), gx_ref, atol=1e-4, rtol=1e-4)


# The forward from halo tiles on the shim's emulated mma.sync (tests/host_fma.py): two chunks on 2 x 4 warps, groups
# at stride 2, three chunks on 4 x 1 warps with dilation and a per-channel parameter, one chunk, 32 chunks (TF32's
# flush), one staging buffer for 64 out channels, stride-2 rows staged through registers split by column phase from
# 8-byte copies at an odd left offset (TF32; 3xTF32 keeps cp.async), chunks wider than 8 channels for kernels of few
# taps (1x1: 64; (2, 1) and a padded (1, 3): 24). Inference's instance (no folded stage: those
# CASES fold a pool or a reduction into the kernel, a different signature).
HALO_FORWARD = ["halo_ci16_pad1_relu", "halo_groups2_k5_s2_p2_silu", "halo_ci24_k3x5_dil21_bias_c", "halo_lone_ci8_wo16",
                "halo_ci256_k3_noflush_tanh", "halo_ci16_k5_onestage_relu_bias_c", "halo_trim_groups2_co96_silu_bias_c",
                "halo_ci8_k3s2_p1_w38_relu_bias_c", "halo_wide_k1_ci128_co48_relu", "halo_wide_k21_ci48_co96_p1_dil31_softplus_sub",
                "halo_wide_pad_k13_ci44_co40_p01_silu"]


@pytest.mark.parametrize("tf32", [False, True], ids=["3xtf32", "tf32"])
@pytest.mark.parametrize("cid", HALO_FORWARD)
def test_halo_forward_on_an_emulated_mma_is_pytorchs_on_the_cpu(tmp_path, cid, tf32):
    """The halo forward's staging, fragment loads and epilogue against the problem's Model in float64 (TF32: on the
    rounded operands; 3xTF32: on the float32 ones), with arrange_weights' fragment-ordered weights."""
    spec, d, kernel = _taking(cid, CASE[cid], "HALO", "the forward from halo tiles")
    assert not d["FUSED_POOL"] and not d["FUSED_REDUCE"], f"{cid} folds a stage now: pick a CASE that does not"
    n = 2
    model, x, inputs = _forward_inputs(CASE[cid], spec, d, n)
    out = run_host(kernel, "halo_forward", d, inputs, n, tf32, tmp_path)
    ref_model, xr, ref = _rounded_reference(model, x, tf32)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)
    z = read_floats(tmp_path / "z.bin").reshape(n, spec.CO, spec.HO, spec.WO).double()
    with torch.no_grad():
        torch.testing.assert_close(z, ref_model.conv(xr), atol=1e-4, rtol=1e-4)


# The halo forward with a first reduction over channels folded in (FUSED_CREDUCE), on the emulated mma.sync: through
# shared memory on 2 x 4 warps (one CTA every channel: a mean; two channel tiles: amax; two groups: logsumexp pairs),
# in registers and shuffles on 4 x 1 warps (one tile: max values; two tiles: logsumexp pairs; two groups: a sum)
HALO_CFOLD = ["creduce_ci16_relu_mean_c_sigmoid", "creduce_ci8_co80_amax_c_tanh", "creduce_groups2_lse_c_half",
              "creduce_ci24_wide_max_c_values", "creduce_reg_ci24_co80_lse_c", "creduce_reg_groups2_ci48_sum_c_tanh"]


@pytest.mark.parametrize("tf32", [False, True], ids=["3xtf32", "tf32"])
@pytest.mark.parametrize("cid", HALO_CFOLD)
def test_halo_forward_with_a_folded_channel_reduction_is_pytorchs_on_the_cpu(tmp_path, cid, tf32):
    """The channel fold's staging or register combine and shuffles, its partials and cfold_finish, against the
    problem's Model in float64 (TF32: on the rounded operands)."""
    _check_channel_fold(tmp_path, cid, tf32, halo=True)


# grad_x from halo tiles (stride 1: a convolution of gz with the flipped weights) and grad_w from halo tiles on the
# emulated mma.sync: 'same' with an even kernel and dilation, 5 x 5 without bias, 3 chunks of gz channels, a 1x1 kernel
# on one 48-channel chunk, a (2, 1) kernel on 32-channel ones; for grad_w
# a lone conv, groups at stride 2, the column-stride-2 shape whose TF32 grad_w once spilled, 400 taps (several tap
# groups), 256 input channels (groups of more than 4 input channels: fewer take grad_w on FMAs once that lands).
HALO_GRAD_X = ["halo_ci16_pad1_relu", "dxhalo_same_k4_co8_dil23_gelu", "dxhalo_ci16_co24_k5_no_bias_maxpool_sum",
               "halo_ci24_k3x5_dil21_bias_c", "halo_wide_k1_ci128_co48_relu", "halo_wide_k21_ci48_co96_p1_dil31_softplus_sub"]
HALO_GRAD_W = ["halo_lone_ci8_wo16", "halo_groups2_k5_s2_p2_silu", "halo_w_ci14_co53_s12_clamp_add_avgpool",
               "halo_ci16_k5_onestage_relu_bias_c", "halo_ci256_k3_noflush_tanh",
               "halo_wide_k21_ci48_co96_p1_dil31_softplus_sub", "halo_wide_pad_k13_ci44_co40_p01_silu"]


@pytest.mark.parametrize("tf32", [False, True], ids=["3xtf32", "tf32"])
@pytest.mark.parametrize("cid", HALO_GRAD_X)
def test_halo_grad_x_on_an_emulated_mma_is_pytorchs_on_the_cpu(tmp_path, cid, tf32):
    spec, d, kernel = _taking(cid, CASE[cid], "HALO_DX", "grad_x from halo tiles")
    out, ref = _grad_x_run(kernel, "halo_grad_x", spec, d, tf32, tmp_path)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tf32", [False, True], ids=["3xtf32", "tf32"])
@pytest.mark.parametrize("cid", HALO_GRAD_W)
def test_halo_grad_w_on_an_emulated_mma_is_pytorchs_on_the_cpu(tmp_path, cid, tf32):
    """One position tile a split, the splits summed by finish_grad_w."""
    spec, d, kernel = _taking(cid, CASE[cid], "HALO_W", "grad_w from halo tiles")
    n = 2
    torch.manual_seed(0)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    x = torch.randn(n, spec.CI, spec.H, spec.W)
    out = run_host(kernel, "halo_grad_w", d, [gz, x], n, tf32, tmp_path)
    torch.testing.assert_close(out.reshape(spec.CO, spec.CI // spec.G, spec.KH, spec.KW).double(),
                               _grad_w_reference(spec, x, gz, tf32), atol=1e-4, rtol=1e-4)


# 3xTF32 is float32-class only while its mmas add to small sums: the tensor core truncates each mma's float32 result
# at the scale of the sum it adds to, so three mmas a k step onto a chunk's or a tile's running sum pile up errors
# toward zero. The halo forward and grad_x flush their `part` into acc after each tap, grad_w from halo tiles after each
# k step. On the shim's truncating mma the halo forward's conv output and grad_w from halo tiles (3xTF32) keep their
# mean error against float64 within a small factor of PyTorch's float32 CPU convolution's on long reductions (a 3x3
# kernel on 256 channels, a 5x5 on 16); flushed a chunk / a tile at a time they were 4.1x and 6.3x float32's (forward)
# and 1.8x (grad_w, the 5x5).
X3_DRIFT = ["halo_ci256_k3_noflush_tanh", "halo_ci16_k5_onestage_relu_bias_c"]


@pytest.mark.parametrize("cid", X3_DRIFT)
def test_3xtf32_on_a_truncating_mma_is_as_accurate_as_float32(tmp_path, cid):
    spec, d, kernel = _taking(cid, CASE[cid], "HALO", "the forward from halo tiles")
    _taking(cid, CASE[cid], "HALO_W", "grad_w from halo tiles")
    n = 2
    model, x, inputs = _forward_inputs(CASE[cid], spec, d, n)
    run_host(kernel, "halo_forward", d, inputs, n, False, tmp_path)
    z = read_floats(tmp_path / "z.bin").reshape(n, spec.CO, spec.HO, spec.WO).double()
    ref_model, xr, _ = _rounded_reference(model, x, False)
    with torch.no_grad():
        exact, float32 = ref_model.conv(xr), model.conv(x).double()
    mean_err = (z - exact).abs().mean().item()
    assert mean_err <= 3 * (float32 - exact).abs().mean().item(), (cid, mean_err)

    torch.manual_seed(1)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    gw = run_host(kernel, "halo_grad_w", d, [gz, x], n, False, tmp_path).reshape(spec.CO, spec.CI // spec.G, spec.KH, spec.KW)
    exact_w = _grad_w_reference(spec, x, gz, False)
    float32_w = _grad_w_reference(spec, x, gz, False, torch.float32).double()
    mean_err = (gw.double() - exact_w).abs().mean().item()
    assert mean_err <= 1.5 * (float32_w - exact_w).abs().mean().item(), (cid, mean_err)


PW_GRAD_W = [cid for cid, src in CASE.items() if _takes(src, "PW_W")]  # every CASE that takes it


def test_the_cases_reach_the_pointwise_grad_w():
    """The CASES keep reaching the pointwise grad_w, with one- two- and four-float copies."""
    vecs = {fam.derive(match(load_problem(write_problem(CASE[cid])))[1])["PW_W"]["V"] for cid in PW_GRAD_W}
    assert len(PW_GRAD_W) >= 4 and vecs == {1, 2, 4}, (PW_GRAD_W, vecs)


@pytest.mark.parametrize("chunk", [1, 5], ids=["slice_a_split", "5_slices_a_split"])
@pytest.mark.parametrize("tf32", [False, True, "pre_rounded"], ids=["3xtf32", "tf32", "tf32_gz_pre_rounded"])
@pytest.mark.parametrize("cid", PW_GRAD_W)
def test_pointwise_grad_w_on_an_emulated_mma_is_pytorchs_on_the_cpu(tmp_path, cid, tf32, chunk):
    """Splits of one slice and of 5 (crossing images where a plane has fewer), summed by finish_grad_w; with TF32 also
    the instance that takes gz rounded by the adjoint kernel (it rounds only x's block: given a rounded gz it must give
    the same result)."""
    spec, d, kernel = _taking(cid, CASE[cid], "PW_W", "the pointwise grad_w")
    n = 3
    torch.manual_seed(1)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    x = torch.randn(n, spec.CI, spec.H, spec.W)
    pre = tf32 == "pre_rounded"
    tf32 = bool(tf32)
    out = run_host(kernel, "pw_grad_w", {**d, "PW_CHUNK": chunk, "PW_PRE_ROUNDED": pre}, [tf32_round(gz) if pre else gz, x], n,
                   tf32, tmp_path)
    torch.testing.assert_close(out.reshape(spec.CO, spec.CI // spec.G, 1, 1).double(),
                               _grad_w_reference(spec, x, gz, tf32), atol=1e-4, rtol=1e-4)


def _grad_w_reference(spec, x: torch.Tensor, gz: torch.Tensor, tf32: bool, dtype=torch.float64) -> torch.Tensor:
    """dL/dw for dL/dz = gz in float64 (or dtype) on the operands the kernels multiply (TF32-rounded where TF32 is on):
    autograd through F.conv2d on x padded by (PH, PH_END, PW, PW_END)."""
    rnd = tf32_round if tf32 else (lambda t: t)
    w = torch.zeros(spec.CO, spec.CI // spec.G, spec.KH, spec.KW, dtype=dtype, requires_grad=True)
    xp = torch.nn.functional.pad(rnd(x).to(dtype), (spec.PW, spec.PW_END, spec.PH, spec.PH_END))
    z = torch.nn.functional.conv2d(xp, w, stride=(spec.SH, spec.SW), dilation=(spec.DH, spec.DW), groups=spec.G)
    return torch.autograd.grad(z, w, rnd(gz).to(dtype))[0]
