"""GPU-free checks of conv2d_epilogue's float32-FMA kernels: each runs on the CPU from its rendered text
(tests/host_fma.py: g++, one std::thread a CUDA thread) and must give PyTorch's result, in both TF32 modes, with
poisoned outputs (NaN) so an element no thread writes fails."""

import pytest
import torch

from kgen.families import conv2d_epilogue as fam
from kgen.problem import load_problem
from kgen.spec import match
from tests.helpers import tf32_round, write_problem
from tests.host_fma import GXX, run_host
from tests.test_conv2d_epilogue import CASE, CONV_IN, conv, conv_epilogue_problem

pytestmark = pytest.mark.skipif(GXX is None, reason="g++ not on PATH")

GRAD_X = [
    ("stem_k7s2p3_relu_maxpool3s2p1", CASE["stem_k7s2p3_relu_maxpool3s2p1"]),
    ("groups2_gelu_tanh_div_param", CASE["groups2_gelu_tanh_div_param"]),
    ("kernel3x5_pad1x2_mish", CASE["kernel3x5_pad1x2_mish"]),
    ("abs_softsign_hardtanh_relu6", CASE["abs_softsign_hardtanh_relu6"]),
    ("s23_d21_g4_p12", conv_epilogue_problem((2, 8, 21, 22), conv(8, 12, 5, stride=(2, 3), padding=(1, 2), dilation=(2, 1),
                                                                   groups=4), CONV_IN + ["return torch.relu(x)"])),
    ("s12_k2x3_g2_co3", conv_epilogue_problem((3, 4, 17, 19), conv(4, 6, (2, 3), stride=(1, 2), groups=2), CONV_IN + ["return x"])),
    ("s3_k1_phases_without_taps", conv_epilogue_problem((2, 3, 10, 11), conv(3, 5, 1, stride=3), CONV_IN + ["return x"])),
]


def _problem(src: str):
    path = write_problem(src)
    family, spec = match(load_problem(path))
    from kgen import emit
    return spec, family.derive(spec), emit.generate(path).files["kernel.cu"]


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("cid,src", GRAD_X, ids=[c[0] for c in GRAD_X])
def test_grad_x_with_fmas_is_pytorchs_on_the_cpu(tmp_path, cid, src, tf32):
    spec, d, kernel = _problem(src)
    if d["FMA_DX"] is None:
        pytest.fail(f"{cid} no longer takes grad_x with FMAs: pick a case that does")
    n = 2
    torch.manual_seed(0)
    gz = torch.randn(n, spec.CO, spec.HO, spec.WO)
    w = torch.randn(spec.CO, spec.CI // spec.G, spec.KH, spec.KW)
    out = run_host(kernel, "grad_x", d, [gz, w], n, tf32, tmp_path)
    rnd = tf32_round if tf32 else (lambda t: t)
    ref = torch.nn.grad.conv2d_input((n, spec.CI, spec.H, spec.W), rnd(w).double(), rnd(gz).double(),
                                     stride=(spec.SH, spec.SW), padding=(spec.PH, spec.PW), dilation=(spec.DH, spec.DW),
                                     groups=spec.G)
    torch.testing.assert_close(out.reshape(ref.shape).double(), ref, atol=1e-4, rtol=1e-4)
