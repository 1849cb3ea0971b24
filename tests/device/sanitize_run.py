"""Forward and backward of every family's small hardening problem (and one odd avg_pool2d case), for running under
compute-sanitizer: bash tests/device/sanitize.sh"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.helpers import avg_pool_problem, reference_and_new  # noqa: E402
from tests.test_hardening import FAMILY_PROBLEMS  # noqa: E402

problems = dict(FAMILY_PROBLEMS)
problems["avg_pool2d_ceil"] = avg_pool_problem((2, 3, 15, 17), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                                     count_include_pad=False))
for label, src in problems.items():
    model, new, ns, user = reference_and_new(src)
    with torch.device("meta"):
        shape = user["get_inputs"]()[0].shape
    x = torch.rand(tuple(shape), device="cuda", requires_grad=True)
    out = new(x)
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    print(f"sanitize {label}: ok, out {tuple(out.shape)}")
