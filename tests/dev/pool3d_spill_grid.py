"""Random 3-d max pools (kernel depth 2-4; float32, or --half: float16 / bfloat16) through the pool family, each
rendered kernel compiled for sm_80 and sm_90 with ptxas -v: prints the window forward's tiling (kernel, stride, VO,
vector, rows, packed, window_words), the backward design and any kernel that spills. Found in the forty-first session: 11 of 60 float32
draws (seed 2) spill 4-36 bytes, mostly in the scatter backward (`bwd`), and the forward at
130-136 words; 4 of 60 2-byte draws (seed 1) spill 4-8 bytes (packed forward and backward). docs/notes/pool_plan.md.
Usage: python tests/dev/pool3d_spill_grid.py SEED N [--half]"""
import sys, subprocess, re, tempfile, random
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kgen.families.pool as fam  # noqa: E402
from kgen import emit  # noqa: E402
from kgen.problem import load_problem  # noqa: E402
from kgen.spec import match  # noqa: E402
T = '''import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.max_pool3d(x, kernel_size={k}, stride={s}, padding={p})
def get_inputs():
    return [torch.rand({shape}, dtype=torch.{dt})]
def get_init_inputs():
    return []
'''
def check(p):
    with tempfile.TemporaryDirectory() as dd:
        Path(dd, "p.py").write_text(p)
        try:
            f, spec = match(load_problem(Path(dd, "p.py")))
        except Exception:  # a draw PyTorch or kgen refuses (a window that does not fit)
            return None
        pl = fam.plan(spec)
        if pl["forward"] != "window": return None
        t = pl["tiling"]; g = pl["geometry"]
        words = fam.window_words(g, 2 if "--half" in sys.argv else 4, t["seg"], t["nj"], t["vo"], t["rh"])
        src = emit.generate(Path(dd, "p.py")).files["kernel.cu"]
        Path(dd, "k.cu").write_text(src)
        out = []
        for arch in ("80", "90"):
            r = subprocess.run(["nvcc", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-DKGEN_SM90=0", "-O3", "-std=c++17", "-c", "-Xptxas", "-v", "k.cu", "-o", "k.o"], cwd=dd, capture_output=True, text=True)
            ent = None
            for ln in r.stderr.splitlines():
                m = re.search(r"Function properties for (\w+)", ln)
                if m: ent = m.group(1)
                m = re.search(r"(\d+) bytes spill stores", ln)
                if m and m.group(1) != "0": out.append((arch, m.group(1), re.sub(r"^.*kgen_pool_\w{8}_", "", ent)[:30]))
        return (g.kernel, g.stride, t["vo"], t["vec"], t["nj"], t["packed"], words, pl["backward"], out)
rng = random.Random(int(sys.argv[1]))
cases = []
for _ in range(int(sys.argv[2])):
    k = tuple(rng.randint(1, 6) for _ in range(3)); k = (rng.randint(2, 4),) + k[1:]
    s = tuple(rng.randint(1, kk) for kk in k)
    p = tuple(rng.randint(0, kk // 2) for kk in k)
    shape = (2, 4, rng.randint(k[0] + 2, 20), rng.randint(k[1] + 2, 40), rng.choice([64, 128, 96, 130]))
    cases.append(T.format(k=k, s=s, p=p, shape=shape, dt=(rng.choice(["bfloat16", "float16"]) if "--half" in sys.argv else "float32")))
with ThreadPoolExecutor(16) as ex:
    res = list(ex.map(check, cases))
for r in res:
    if r: print("SPILL" if r[-1] else "ok   ", r)
