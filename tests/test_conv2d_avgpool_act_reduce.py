"""conv2d_avgpool_act_reduce family: pattern matching and spec (CPU); fused kernels against PyTorch (GPU)."""

import copy
import re

import pytest
import torch

from kgen.errors import Unsupported
from kgen.families import conv2d_avgpool_act_reduce as fam
from kgen.ops import chain
from kgen.problem import load_problem
from kgen.spec import match
from tests.helpers import conv_problem, generate_module, poison_cuda_allocator, reference_and_new, tf32_mode, tf32_round, write_problem

# (input shape, Conv2d kwargs, AvgPool2d kwargs, activation, reduction, extra problem options)
CONFIGS = [
    ((2, 8, 32, 36), dict(in_channels=8, out_channels=16, kernel_size=3), dict(kernel_size=4), "sigmoid", "sum", {}),
    ((3, 3, 17, 19), dict(in_channels=3, out_channels=16, kernel_size=1), dict(kernel_size=2), "relu", "mean", {}),
    ((2, 4, 23, 29), dict(in_channels=4, out_channels=8, kernel_size=5, padding=2), dict(kernel_size=3, stride=2), "tanh", "sum", {}),
    ((2, 3, 41, 37), dict(in_channels=3, out_channels=16, kernel_size=3, stride=2), dict(kernel_size=2), "gelu", "mean", {}),
    ((1, 5, 30, 31), dict(in_channels=5, out_channels=12, kernel_size=3, dilation=2), dict(kernel_size=3, stride=3), "gelu_tanh", "sum", {}),
    ((2, 6, 24, 27), dict(in_channels=6, out_channels=20, kernel_size=(3, 5), padding=(1, 2), bias=False),
     dict(kernel_size=(2, 3), stride=(2, 1)), "none", "sum", {}),
    ((2, 3, 20, 20), dict(in_channels=3, out_channels=8, kernel_size=3), dict(kernel_size=2, divisor_override=3), "sigmoid", "mean",
     dict(keepdim=True, functional_pool=True)),
    ((2, 8, 64, 64), dict(in_channels=8, out_channels=64, kernel_size=3), dict(kernel_size=4), "tanh", "sum", {}),
    ((1, 2, 13, 11), dict(in_channels=2, out_channels=7, kernel_size=3), dict(kernel_size=3, stride=2), "sigmoid", "sum", {}),
    ((2, 16, 20, 20), dict(in_channels=16, out_channels=32, kernel_size=5), dict(kernel_size=2), "sigmoid", "sum", dict(dims=(3, 1, -2))),
    # 17 K chunks of 7x5 taps x 33 channels: grad_w once missed float64 by 3.7e-4 here (tests/dev/g1_chain_sim.py)
    ((3, 33, 30, 81), dict(in_channels=33, out_channels=16, kernel_size=(7, 5), padding=(4, 2)),
     dict(kernel_size=(1, 2), stride=(1, 3)), "gelu_tanh", "sum", {}),
    # a 15x9-input window (135 loads an item): compute_as sums it a row at a time (STREAM_ROWS; it spilled 1512 bytes)
    ((1, 3, 49, 121), dict(in_channels=3, out_channels=80, kernel_size=3, stride=3, padding=(1, 2)),
     dict(kernel_size=(5, 3), stride=(4, 3)), "sigmoid", "sum", {}),
]


def ids(cfg):
    shape, conv, pool, act, red, extra = cfg
    return f"{'x'.join(map(str, shape))}_k{conv['kernel_size']}_co{conv['out_channels']}_p{pool['kernel_size']}_{act}_{red}"


def source(cfg) -> str:
    shape, conv, pool, act, red, extra = cfg
    return conv_problem(shape, conv, pool, act, red, **extra)


def problem_sources():
    """Every problem the GPU tier generates (the device prebuild compiles them in parallel)."""
    return [source(c) for c in CONFIGS]


# ------------------------------------------------------------------------------------------------------- CPU tier


@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_spec_shapes_match_pytorch(cfg):
    shape, conv, pool, act, red, extra = cfg
    problem = load_problem(write_problem(source(cfg)))
    family, spec = match(problem)
    assert family is fam
    d = fam.derive(spec)
    ref = torch.nn.AvgPool2d(**pool)(torch.nn.Conv2d(**conv)(torch.rand(shape)))
    assert (spec.CO, d["PHO"], d["PWO"]) == tuple(ref.shape[1:])
    assert spec.ACT == act and spec.REDUCE == red and spec.HAS_BIAS == conv.get("bias", True)


def test_bundled_spec():
    spec = match(load_problem("kgen/problems/conv2d_avgpool_sigmoid_sum.py"))[1]
    assert (spec.CI, spec.CO, spec.H, spec.W, spec.KH, spec.PKH, spec.PSH, spec.DIV) == (8, 64, 384, 384, 3, 4, 4, 16)
    assert fam.derive(spec)["PHO"] == 95 and spec.weight_name == "conv.weight" and spec.bias_name == "conv.bias"


@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_each_kernel_path_has_a_tiling_that_fits_its_shared_memory(cfg):
    d = fam.derive(match(load_problem(write_problem(source(cfg))))[1])
    for path, per_block in (("TILE_SM90", 227 * 1024), ("TILE_SM80", 99 * 1024)):
        t = d[path]
        assert t["FITS"] and max(t["F_SMEM"], t["B_SMEM"]) <= per_block, (path, t)
    assert d["TILE_SM80"]["FWD_WFRAG"] == 0 and d["TILE_SM80"]["F_SMEM"] <= 81 * 1024  # two forward blocks per sm_80 SM


def test_kernel_source_has_both_paths_and_no_dev_knobs():
    from kgen import emit

    src = emit.generate(write_problem(source(CONFIGS[0]))).files["kernel.cu"]
    assert "#ifndef KGEN_SM90\n#define KGEN_SM90 0\n#endif" in src
    assert "#if KGEN_SM90" in src and "cluster_group" in src and "fwd_finish_kernel" in src
    for knob in ("DEV_MMA1", "KG_PT", "PROF", "GRID_BWD", "DWP"):
        assert knob not in src, knob


def test_both_tf32_modes_are_built_and_the_binding_reads_the_flag():
    """Each kernel is instantiated for 3xTF32 (X3) and for one TF32 pass, every launcher picks one from its tf32
    argument, and the binding passes cuDNN's flag as read at that call (GPU tier: the modes' numerics)."""
    from kgen import emit

    files = emit.generate(write_problem(source(CONFIGS[0]))).files
    src, binding = files["kernel.cu"], files["binding.cpp"]
    assert "kernel_facts<true>" in src and "kernel_facts<false>" in src
    for k in ("fwd_kernel", "bwd_kernel"):
        assert f"tf32 ? {k}<false> : {k}<true>" in src, k
    for entry in ("workspace_bytes", "forward", "backward"):
        assert re.search(r'extern "C" cudaError_t \w+_' + entry + r"\([^)]*\bint tf32\b", src), entry
    assert "at::globalContext().allowTF32CuDNN()" in binding and 'std::getenv("KGEN_TF32")' in binding
    assert "const int tf32 = kgen_tf32::forward(n) ? 1 : 0;" in binding  # the forward follows cuDNN's modelled choice
    assert "kgen_tf32::grad_x(n)" in binding and "kgen_tf32::grad_w(n)" in binding  # the backward, both gradients'


@pytest.mark.parametrize("act", sorted(fam.ACT_TYPES))
def test_each_activation_is_a_struct_of_the_activation_header(act):
    """ACT_TYPES names, for each activation, a struct of templates/common/activation.cuh with fwd and grad; the kernel
    takes that struct (the compile tier builds every activation through CASES)."""
    import re

    from kgen import render

    header = (render.TEMPLATE_DIR / "common" / "activation.cuh").read_text()
    body = re.search(r"^struct %s \{\n(.*?)^\};" % fam.ACT_TYPES[act], header, re.M | re.S)
    assert body, fam.ACT_TYPES[act]
    assert "float fwd(float" in body.group(1) and "float grad(float" in body.group(1)
    assert set(re.findall(r"^struct (\w+) \{", header, re.M)) == set(fam.ACT_TYPES.values())
    assert set(fam.ACT_TYPES) == set(ACTIVATIONS)
    cfg = next(c for c in CONFIGS if c[3] == act)
    d = fam.derive(match(load_problem(write_problem(source(cfg))))[1])
    assert d["ACT_TYPE"] == fam.ACT_TYPES[act] and d["MEAN"] == (cfg[4] == "mean")


CONV = dict(in_channels=3, out_channels=8, kernel_size=3)


@pytest.mark.parametrize("forward", [
    "x = self.conv(x)\n        x = self.pool(x)\n        return torch.sum(torch.sigmoid(x), dim=[2, 3])",
    "x = self.conv(x)\n        x = torch.relu(x)\n        return torch.sum(self.pool(x), dim=[1, 2, 3])",
    "x = self.conv(x)\n        x = self.pool(x)\n        return torch.sum(torch.exp(x), dim=[1, 2, 3])",
    "x = self.conv(x)\n        x = self.pool(x)\n        return torch.sum(torch.sigmoid(x), dim=[1, 2, 3]) * 2",
    "x = self.conv(x)\n        return self.pool(x)",
    "return torch.sum(self.conv(x), dim=[1, 2, 3])",
    "x = self.conv(x)\n        x = F.avg_pool2d(x, 2, padding=1)\n        return torch.sum(x, dim=[1, 2, 3])",
], ids=["dims23", "relu_before_pool", "exp", "scaled_after_sum", "no_reduction", "no_pool", "pool_padding"])
def test_blocks_outside_the_fused_form_go_to_conv2d_epilogue(forward):
    src = conv_problem((2, 3, 16, 16), CONV, dict(kernel_size=2)).replace(
        "x = self.conv(x)\n        x = self.pool(x)\n        x = torch.sigmoid(x)\n        return torch.sum(x, dim=[1, 2, 3])", forward)
    assert forward in src
    family, _ = match(load_problem(write_problem(src)))
    assert family.NAME == "conv2d_epilogue"


@pytest.mark.parametrize("conv", [dict(in_channels=4, out_channels=8, kernel_size=3, groups=2),
                                  dict(in_channels=4, out_channels=8, kernel_size=4, padding="same")],
                         ids=["groups2", "asymmetric_same"])
def test_convolutions_this_family_cannot_fuse_go_to_conv2d_epilogue(conv):
    """groups > 1 and padding='same' with an even kernel (one more pad after) are outside this family's kernels."""
    src = conv_problem((2, 4, 16, 16), conv, dict(kernel_size=2))
    family, _ = match(load_problem(write_problem(src)))
    assert family.NAME == "conv2d_epilogue"


def test_a_block_whose_sm80_tiling_does_not_fit_goes_to_conv2d_epilogue():
    """A module must run on every GPU from sm_80: where the sm_80/86/89 path's backward tiling needs more than the 99 KB
    of shared memory a block of sm_86/89 may have (130 out channels, a dilated 5x5 kernel, a 3x4 pool window; a random
    draw, seed 4401), this family declines with the reason and conv2d_epilogue, whose kernels fit everywhere, takes
    it; the same block with 64 out channels stays here."""
    conv = dict(in_channels=1, out_channels=130, kernel_size=(5, 5), stride=1, padding=(3, 3), dilation=2)
    pool = dict(kernel_size=(3, 4), stride=(1, 2))
    src = conv_problem((2, 1, 40, 44), conv, pool, "sigmoid", "mean")
    problem = load_problem(write_problem(src))
    family, _ = match(problem)
    assert family.NAME == "conv2d_epilogue"
    with pytest.raises(Unsupported, match=r"the sm_80/86/89 path's shared-memory tiling does not fit"):
        fam.derive(fam._match(chain(problem), problem))
    small = conv_problem((2, 1, 40, 44), {**conv, "out_channels": 64}, pool, "sigmoid", "mean")
    family, spec = match(load_problem(write_problem(small)))
    assert family.NAME == fam.NAME
    assert all(fam.derive(spec)[t]["FITS"] for t in ("TILE_SM90", "TILE_SM80"))


@pytest.mark.parametrize("change", ["nn.init.xavier_uniform_(self.conv.weight)",
                                    "self.conv.bias = nn.Parameter(self.conv.bias + torch.ones_like(self.conv.bias) * 0.02)",
                                    "self.fc = nn.Linear(4, 2)"])
def test_changed_conv_initialization_goes_to_conv2d_epilogue(change):
    """This family's ModelNew draws the conv as nn.Conv2d does and holds only its tensors; where Model changes those
    draws or holds other tensors (an unused module), conv2d_epilogue (which replays the change and holds them too)
    takes the problem, so ModelNew's parameters stay Model's under the harness's seed."""
    src = conv_problem((2, 3, 16, 16), CONV, dict(kernel_size=2))
    line = "        self.conv = nn.Conv2d(" + src.split("self.conv = nn.Conv2d(")[1].split("\n")[0]
    src = src.replace(line, line + "\n        " + change)
    assert change in src
    family, _ = match(load_problem(write_problem(src)))
    assert family.NAME == "conv2d_epilogue"
    assert match(load_problem(write_problem(conv_problem((2, 3, 16, 16), CONV, dict(kernel_size=2)))))[0].NAME == fam.NAME


@pytest.mark.parametrize("seed", [0, 7])
def test_parameters_have_models_names_and_initialization(seed):
    import runpy

    ns = generate_module(open("kgen/problems/conv2d_avgpool_sigmoid_sum.py").read(), name="conv2d_avgpool_sigmoid_sum")
    user = runpy.run_path("kgen/problems/conv2d_avgpool_sigmoid_sum.py")
    init = user["get_init_inputs"]()
    torch.manual_seed(seed)
    a = user["Model"](*init).state_dict()
    torch.manual_seed(seed)
    new = ns["ModelNew"](*init)
    b = new.state_dict()
    assert list(a) == list(b) == ["conv.weight", "conv.bias"]
    for k in a:
        assert torch.equal(a[k], b[k]), k
    new.load_state_dict(a)
    user["Model"](*init).load_state_dict(b)


def test_no_bias_model_has_no_bias_parameter():
    ns = generate_module(source(CONFIGS[5]))
    assert list(ns["ModelNew"]().state_dict()) == ["conv.weight"]


# ------------------------------------------------------------------------------------------------------- GPU tier


def check(cfg_source, batch=None, seed=0):
    torch.backends.cudnn.allow_tf32 = False
    model, new, ns, user = reference_and_new(cfg_source, seed=seed)
    with torch.device("meta"):
        shape = user["get_inputs"]()[0].shape
    n = shape[0] if batch is None else batch
    x = torch.rand((n,) + tuple(shape[1:]), device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    ref = model(xr)
    poison_cuda_allocator(4 * x.numel() + 4096)
    out = new(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    model64 = copy.deepcopy(model).double()   # the float64 reference, forward and gradients
    x64 = x.detach().double().requires_grad_(True)
    out64 = model64(x64)
    rel = ((out.double() - out64.detach()).norm() / out64.detach().norm().clamp_min(1e-30)).item()
    g = torch.randn_like(ref)
    ref.backward(g)
    poison_cuda_allocator(4 * x.numel() + 4096)
    out.backward(g)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    for (name, p), (_, pr) in zip(new.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name}: {m}")
    out64.backward(g.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"grad_x vs float64: {m}")
    for (name, p), (_, p64) in zip(new.named_parameters(), model64.named_parameters()):
        torch.testing.assert_close(p.grad.double(), p64.grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"{name} vs float64: {m}")
    again = new(x)
    assert torch.equal(again, out), "forward is not bit-identical across runs"
    grads = [t.grad.clone() for t in [x, *new.parameters()]]
    for t in [x, *new.parameters()]:
        t.grad = None
    new(x).backward(g)
    for a, b in zip(grads, [t.grad for t in [x, *new.parameters()]]):
        assert torch.equal(a, b), "gradients are not bit-identical across runs"
    return rel


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_forward_and_gradients_match_pytorch(cfg):
    rel = check(source(cfg))
    print(f"{ids(cfg)}: relative error vs float64 {rel:.2e}")
    assert rel < 1e-5


class _TF32Gemm(torch.autograd.Function):
    """bs @ w.T in float64 on TF32-rounded operands, and its backward as the kernels run it: the incoming gradient
    (dpre) rounded to TF32 too, in both GEMMs (grad_w = dpre^T bs, dBs = dpre w)."""

    @staticmethod
    def forward(ctx, bs, w):
        bs_t, w_t = tf32_round(bs).double(), tf32_round(w).double()
        ctx.save_for_backward(bs_t, w_t)
        return bs_t @ w_t.T

    @staticmethod
    def backward(ctx, g):
        bs_t, w_t = ctx.saved_tensors
        g_t = tf32_round(g).double()
        return g_t @ w_t, g_t.T @ bs_t


_ACT64 = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
          "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "none": lambda v: v}


def tf32_pool_first_reference(spec, x, w, b):
    """The family's TF32-mode model in float64: pool first (the box sums Bs of x at each conv tap, exact), then the
    positions x CO x K GEMM of TF32-rounded Bs and W/DIV (_TF32Gemm), bias * PKH*PKW/DIV, activation, sum/mean."""
    F = torch.nn.functional
    n, k = x.shape[0], spec.CI * spec.KH * spec.KW
    cols = F.unfold(x, (spec.KH, spec.KW), dilation=(spec.DH, spec.DW), padding=(spec.PH, spec.PW), stride=(spec.SH, spec.SW))
    d = fam.derive(spec)
    bs = F.avg_pool2d(cols.view(n, k, d["HO"], d["WO"]), (spec.PKH, spec.PKW), (spec.PSH, spec.PSW), divisor_override=1)
    rows = bs.permute(0, 2, 3, 1).reshape(-1, k)
    pre = _TF32Gemm.apply(rows, w.reshape(spec.CO, k) / spec.DIV).view(n, d["PHO"], d["PWO"], spec.CO)
    if b is not None:
        pre = pre + b * (spec.PKH * spec.PKW / spec.DIV)
    y = _ACT64[spec.ACT](pre)
    return y.sum(dim=(1, 2, 3)) if spec.REDUCE == "sum" else y.mean(dim=(1, 2, 3))


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CONFIGS, ids=ids)
def test_tf32_mode_matches_float64_of_tf32_rounded_operands(cfg):
    """With cudnn.allow_tf32 the kernels run one TF32 pass: their GEMMs multiply TF32-rounded box sums and W/DIV (and,
    backward, the rounded dpre), accumulating in float32. Forward within 1e-4 of that model in float64; the gradients
    within 1e-3 (the kernel rounds dpre from its float32 value, the reference from float64: they may land one TF32 ulp,
    2^-10 relative, apart). Both modes are bit-identical from run to run, and the modes differ (the flag is read)."""
    model, new, ns, user = reference_and_new(source(cfg))
    spec = match(load_problem(write_problem(source(cfg))))[1]
    with torch.device("meta"):
        shape = user["get_inputs"]()[0].shape
    torch.manual_seed(3)
    x = torch.rand(shape, device="cuda", requires_grad=True)
    conv = model.conv
    x64 = x.detach().double().requires_grad_(True)
    w64 = conv.weight.detach().double().requires_grad_(True)
    b64 = conv.bias.detach().double().requires_grad_(True) if conv.bias is not None else None
    y64 = tf32_pool_first_reference(spec, x64, w64, b64)
    runs = {}
    for tf32 in (True, True, False):
        with tf32_mode(tf32, every_pass=True):  # TF32 kernels even where cuDNN would run these small shapes exactly
            for t in (x, *new.parameters()):
                t.grad = None
            poison_cuda_allocator(4 * x.numel() + 4096)
            y = new(x)
            g = torch.linspace(0.5, 1.5, y.numel(), device="cuda").view(y.shape)
            y.backward(g)
            runs.setdefault(tf32, []).append([y.detach()] + [t.grad.clone() for t in (x, *new.parameters())])
    y, gx, *gp = runs[True][0]
    torch.testing.assert_close(y.double().view(-1), y64, atol=1e-4, rtol=1e-4)
    y64.backward(g.double().view(-1))
    torch.testing.assert_close(gx.double(), x64.grad, atol=1e-3, rtol=1e-3)
    for got, want, name in zip(gp, [w64.grad, b64.grad if b64 is not None else None], ["weight", "bias"]):
        torch.testing.assert_close(got.double(), want, atol=1e-3, rtol=1e-3, msg=lambda m: f"grad {name}: {m}")
    assert all(torch.equal(a, b) for a, b in zip(runs[True][0], runs[True][1])), "TF32 mode is not bit-identical run to run"
    assert not torch.equal(runs[True][0][1], runs[False][0][1]), "grad x is the same in both modes: the TF32 flag was not read"


@pytest.mark.gpu
def test_other_batch_sizes():
    check(source(CONFIGS[0]), batch=5)
    model, new, ns, user = reference_and_new(source(CONFIGS[0]))
    out = new(torch.rand(0, 8, 32, 36, device="cuda", requires_grad=True))
    assert out.shape == (0,)


@pytest.mark.gpu
def test_opcheck_and_compile_fullgraph():
    model, new, ns, user = reference_and_new(source(CONFIGS[8]))
    x = torch.rand(2, 2, 13, 11, device="cuda", requires_grad=True)
    conv = new.conv
    torch.library.opcheck(getattr(torch.ops, ns["KGEN_NAMESPACE"]).forward, (x, conv.weight, conv.bias))
    compiled = torch.compile(new, fullgraph=True)
    torch.testing.assert_close(compiled(x), new(x), atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.slow
def test_bundled_problem_full_size():
    torch.backends.cudnn.allow_tf32 = False
    src = open("kgen/problems/conv2d_avgpool_sigmoid_sum.py").read()
    model, new, ns, user = reference_and_new(src, name="conv2d_avgpool_sigmoid_sum")
    x = torch.rand(128, 8, 384, 384, device="cuda", requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    ref = model(xr)
    out = new(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    g = torch.randn_like(ref)
    ref.backward(g)
    out.backward(g)
    torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new.conv.weight.grad, model.conv.weight.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new.conv.bias.grad, model.conv.bias.grad, atol=1e-4, rtol=1e-4)
    assert torch.equal(new(x), out)


# ----------------------------------------------------------------------------------------- contract (tests/families.py)

CASES = [(ids(c), source(c)) for c in CONFIGS]
HARDENING = conv_problem((2, 3, 18, 20), dict(in_channels=3, out_channels=8, kernel_size=3), dict(kernel_size=2))
ACTIVATIONS = ["sigmoid", "tanh", "relu", "gelu", "gelu_tanh", "none"]


def random_problem(rng):
    """A random problem of this family's scope: redrawn where a kernel path's tiling does not fit (the block then
    goes to conv2d_epilogue: test_a_block_whose_sm80_tiling_does_not_fit_goes_to_conv2d_epilogue)."""
    while True:
        src = _random_block(rng)
        if match(load_problem(write_problem(src)))[0].NAME == fam.NAME:
            return src


def _random_block(rng):
    while True:
        k = (rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 3, 4, 5]))
        s, d = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2])
        p = (rng.randint(0, k[0] // 2 + 1), rng.randint(0, k[1] // 2 + 1))
        pk = (rng.randint(1, 5), rng.randint(1, 5))
        ps = (rng.randint(1, pk[0] + 1), rng.randint(1, pk[1] + 1))
        ci, co = rng.choice([1, 3, 4, 8, 16, 33]), rng.choice([1, 5, 16, 64, 80, 130])
        h, w = rng.randint(12, 90), rng.randint(12, 130)
        ho = (h + 2 * p[0] - d * (k[0] - 1) - 1) // s + 1
        wo = (w + 2 * p[1] - d * (k[1] - 1) - 1) // s + 1
        if ho >= pk[0] and wo >= pk[1]:
            break
    conv = dict(in_channels=ci, out_channels=co, kernel_size=k, stride=s, padding=p, dilation=d, bias=rng.random() < 0.8)
    return conv_problem((rng.randint(1, 3), ci, h, w), conv, dict(kernel_size=pk, stride=ps), rng.choice(ACTIVATIONS),
                        rng.choice(["sum", "mean"]))
