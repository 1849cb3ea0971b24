"""Forward and backward of every registered family's hardening problem and first cases, for running under
compute-sanitizer: bash tests/device/sanitize.sh"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.families import all_families  # noqa: E402
from tests.helpers import reference_and_new  # noqa: E402

problems = {}
for fc in all_families():
    problems[f"{fc.name}-hardening"] = fc.hardening
    problems.update({f"{fc.name}-{cid}": src for cid, src in fc.cases[:3]})
for label, src in problems.items():
    model, new, ns, user = reference_and_new(src)
    with torch.device("meta"):
        meta = user["get_inputs"]()[0]
    x = torch.rand(tuple(meta.shape), device="cuda").to(meta.dtype).requires_grad_(True)
    out = new(x)
    out = out[0] if isinstance(out, (tuple, list)) else out
    out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    print(f"sanitize {label}: ok, out {tuple(out.shape)}")
