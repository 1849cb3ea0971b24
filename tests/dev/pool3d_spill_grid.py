"""Random 3-d max pools (kernel depth 2-4; float32, or --half: float16 / bfloat16) through the pool family, each
kernel put through the random sweep's compile check (tests/dev/sweep.py's compile_ok: tests/ptxas.py for sm_80 and
sm_90): prints the window forward's tiling (kernel, stride, VO, vector, rows, packed, window_words), the backward
design and ptxas's findings. Found in the forty-first session: 11 of 60 float32 draws (seed 2) spill 4-48 bytes
on sm_80 / sm_90, seven in the scatter backward (`bwd`), four in the forward at 116-136 words; 4 of 60 2-byte draws
(--half, seed 1) spill 20-44 bytes, in the packed forward at 76-80 words. docs/notes/pool_plan.md.
Usage: python tests/dev/pool3d_spill_grid.py SEED N [--half]"""

import random
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import emit  # noqa: E402
from kgen.errors import KgenError  # noqa: E402
from kgen.families import pool as fam  # noqa: E402
from kgen.problem import load_problem  # noqa: E402
from kgen.spec import match  # noqa: E402
from tests.dev.sweep import compile_ok  # noqa: E402

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.max_pool3d(x, kernel_size={k}, stride={s}, padding={p})


def get_inputs():
    return [torch.rand({shape}, dtype=torch.{dtype})]


def get_init_inputs():
    return []
'''


def draw(rng: random.Random, half: bool) -> str:
    """One problem: kernel depth 2-4, other sides 1-6, strides up to the kernel, padding up to half of it."""
    k = (rng.randint(2, 4), rng.randint(1, 6), rng.randint(1, 6))
    s = tuple(rng.randint(1, kk) for kk in k)
    p = tuple(rng.randint(0, kk // 2) for kk in k)
    shape = (2, 4, rng.randint(k[0] + 2, 20), rng.randint(k[1] + 2, 40), rng.choice([64, 128, 96, 130]))
    return PROBLEM.format(k=k, s=s, p=p, shape=shape, dtype=rng.choice(["bfloat16", "float16"]) if half else "float32")


def check(source: str) -> tuple | None:
    """(the tiling's numbers, the backward design, ptxas's findings) of a draw the window forward takes, else None."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "p.py")
        path.write_text(source)
        try:
            _, spec = match(load_problem(path))
        except KgenError:  # a window PyTorch (through problem.py) or kgen refuses
            return None
        plan = fam.plan(spec)
        if plan["forward"] != "window":
            return None
        g, t = plan["geometry"], plan["tiling"]
        words = fam.window_words(g, fam.DTYPES[spec.dtype].size, t["seg"], t["nj"], t["vo"], t["rh"])
        _, findings = compile_ok(emit.generate(path))
        return (g.kernel, g.stride, t["vo"], t["vec"], t["nj"], t["packed"], words), plan["backward"], findings


def main() -> int:
    rng = random.Random(int(sys.argv[1]))
    sources = [draw(rng, "--half" in sys.argv) for _ in range(int(sys.argv[2]))]
    with ThreadPoolExecutor(16) as ex:
        for r in ex.map(check, sources):
            if r:
                print("SPILL" if r[2] else "ok   ", *r[:2], r[2].replace("\n", " | "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
