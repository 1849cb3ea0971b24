"""A/B timing of avg_pool2d forward variants on the bundled shape (device only): the persistent register-prefetch
kernel against the one-block-per-tile kernel, with eager PyTorch in the same run."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen import emit  # noqa: E402
from kgen.bench import cuda_time_ms  # noqa: E402
from kgen.families import avg_pool2d  # noqa: E402
from kgen.problem import load_problem  # noqa: E402

problem = load_problem("kgen/problems/avg_pool2d.py")
orig = avg_pool2d.forward_tiling
mods = {}
for label, prefetch in (("persistent+prefetch", True), ("block-per-tile", False)):
    avg_pool2d.forward_tiling = lambda s, p=prefetch: {**orig(s), "f_prefetch": p}
    gen = emit.generate_problem(problem, "kgen/problems/avg_pool2d.py")
    ns = {"__name__": label}
    exec(gen.files["model_new.py"], ns)
    mods[label] = ns["ModelNew"](11).cuda()
avg_pool2d.forward_tiling = orig
x = torch.rand(16, 64, 2048, 2048, device="cuda")
ref = torch.nn.AvgPool2d(11)
want = ref(x)
for rep in range(2):
    for label, m in list(mods.items()) + [("eager", ref)]:
        with torch.no_grad():
            torch.testing.assert_close(m(x), want, atol=1e-4, rtol=1e-4)
            print(f"round {rep} {label:<22} {cuda_time_ms(lambda: m(x), 3, 20):.3f} ms")
