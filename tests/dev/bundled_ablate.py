"""Where the bundled problem's backward spends its time: phases of the backward kernels switched off one at a time
(a development harness, not shipped code). Each variant is the generated model_new.py with a phase's call guarded by
a condition false at run time (`total_tiles < 0`: the code stays, the work goes) and its own namespace, built in
parallel, then timed by kgen.bench.cuda_time_ms (median, back to back) next to a write and a copy of x's size.

Usage (GPU): python tests/dev/bundled_ablate.py [--stored MODEL_NEW.py] [--recompute MODEL_NEW.py] [--reps 15]
[--tiles THxTW ...] [--no-phases]
--stored: a stored-design build (branch bundled-stored); --recompute: main's design (default: generated/'s bundled one).
--tiles: the recompute design again with each of these sm_90 backward core tiles (pooled rows x cols) instead of
derive()'s, whole (every phase on); --no-phases: only the tiles, no phase ablation.
Variants whose edit does not match the text are reported and skipped.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen.bench import cuda_time_ms  # noqa: E402
from tests.device.prebuild import build  # noqa: E402

OFF = "if (total_tiles < 0) "
STAGE = "for (int i0 = 0; i0 < ST_ITER; i0 += ST_BATCH) {"
STAGE_OFF = "for (int i0 = 0; i0 < (total_tiles < 0 ? ST_ITER : 0); i0 += ST_BATCH) {"
DBS = "bwd_dbs<X3>(s, warp, g, t);          // phase 5"
DBS_MAIN = "bwd_dbs<X3>(s, warp, L);               // phase 5"
GX_STORED = "bwd_grad_x(grad_x, s.As, tile, 0);   // phase 6"
GX_MAIN = "bwd_grad_x(grad_x, s.As, tile, ch);    // phase 6"
DPRE = "bwd_dpre<X3>(x, w, s, tile, gval, warp, L);   // phase 2"

STORED = {
    "full": [],
    "no gather": [(GX_STORED, OFF + GX_STORED)],
    "no GEMM3": [(DBS, OFF + DBS)],
    "no staging": [(STAGE, STAGE_OFF)],
    "staging only": [(DBS, OFF + DBS), (GX_STORED, OFF + GX_STORED)],
    "gather only": [(STAGE, STAGE_OFF), (DBS, OFF + DBS)],
    "nothing (tile loop)": [(STAGE, STAGE_OFF), (DBS, OFF + DBS), (GX_STORED, OFF + GX_STORED)],
}
RECOMPUTE = {
    "full": [],
    "no gather": [(GX_MAIN, OFF + GX_MAIN)],
    "no GEMM3, no gather": [(DBS_MAIN, OFF + DBS_MAIN), (GX_MAIN, OFF + GX_MAIN)],
    "no recompute (dpre)": [(DPRE, OFF + DPRE)],
}


def variant(text: str, edits: list, tag: str) -> str | None:
    ns = re.search(r'KGEN_NAMESPACE = "(kgen_\w+_)([0-9a-f]{8})"', text)
    for old, new in edits:
        if text.count(old) != 1:
            return None
        text = text.replace(old, new)
    return text.replace(ns.group(1) + ns.group(2), ns.group(1) + ns.group(2)[:-len(tag)] + tag)


def tile_edits(text: str, tile: str) -> list:
    """The edits that give the sm_90 path's backward the core tile TPHxTPW (its B_SMEM_PY follows; the bundled shape's
    halo of 1 pooled row and column)."""
    from kgen.families.conv2d_avgpool_act_reduce import smem_bytes
    tph, tpw = (int(v) for v in tile.split("x"))
    start = text.index("#if KGEN_SM90\nconstexpr int TPH")
    sm90 = text[start:text.index("#else", start)]
    old_t = re.search(r"constexpr int TPH_B = \d+, TPW_B = \d+;", sm90).group(0)
    old_s = re.search(r"B_SMEM_PY = \d+;", sm90).group(0)
    b_mpad = ((tph + 1) * (tpw + 1) + 15) // 16 * 16
    return [(sm90, sm90.replace(old_t, f"constexpr int TPH_B = {tph}, TPW_B = {tpw};")
             .replace(old_s, f"B_SMEM_PY = {smem_bytes(9, 64, 1, 8, 0, b_mpad)[1]};"))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stored", default=None)
    ap.add_argument("--recompute", default=str(Path(__file__).resolve().parents[2] / "generated" /
                                               "conv2d_avgpool_sigmoid_sum" / "model_new.py"))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tiles", nargs="*", default=[])
    ap.add_argument("--no-phases", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kgen_ablate_"))
    jobs = []   # (kind, label, path)
    for kind, src, table in (("stored", a.stored, STORED), ("recompute", a.recompute, RECOMPUTE)):
        if src is None:
            continue
        text = Path(src).read_text()
        if kind == "recompute":
            table = {} if a.no_phases else dict(table)
            table.update({f"tile {tile}": tile_edits(text, tile) for tile in a.tiles})
        for i, (label, edits) in enumerate(table.items()):
            v = variant(text, edits, f"{'s' if kind == 'stored' else 'r'}{i:x}")
            if v is None:
                print(f"{kind} / {label}: edit does not match, skipped", flush=True)
                continue
            d = tmp / f"{kind}_{i}"
            d.mkdir()
            (d / "model_new.py").write_text(v)
            jobs.append((kind, label, d / "model_new.py"))
    with ThreadPoolExecutor(8) as ex:
        for (kind, label, _), (_, secs, rc, err) in zip(jobs, ex.map(build, [p for _, _, p in jobs])):
            print(f"built {kind} / {label} in {secs:.0f} s" if rc == 0 else f"BUILD FAIL {kind} / {label}: {err}",
                  flush=True)
    n = a.batch
    torch.manual_seed(0)
    x = torch.rand(n, 8, 384, 384, device="cuda")
    g = torch.rand(n, device="cuda")
    gx = torch.empty_like(x)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {n}", flush=True)
    write, copy = cuda_time_ms(lambda: gx.fill_(1.0), 2, a.reps), cuda_time_ms(lambda: gx.copy_(x), 2, a.reps)
    print(f"reference: write x-sized {write:.3f} ms, copy x {copy:.3f} ms", flush=True)
    for tf32 in (False, True):
        torch.backends.cudnn.allow_tf32 = tf32
        for kind, label, path in jobs:
            ns: dict = {"__name__": "ablate"}
            exec(compile(path.read_text(), str(path), "exec"), ns)
            ops = getattr(torch.ops, ns["KGEN_NAMESPACE"])
            m = ns["ModelNew"](8, 64, 3, 4).cuda()
            w, b = m.conv.weight.detach(), m.conv.bias.detach()
            if kind == "stored":
                _, s, u = ops.forward_train(x, w, b, True, True)
                row = {"x": lambda: ops.backward_stored(g, x, s, u, w, b, [True, False, False])}
            else:
                row = {"x": lambda: ops.backward(g, x, w, b, [True, False, False]),
                       "w,b": lambda: ops.backward(g, x, w, b, [False, True, True]),
                       "all": lambda: ops.backward(g, x, w, b, [True, True, True])}
            print(f"TF32 {'allowed' if tf32 else 'off'} {kind:9s} {label:22s} " +
                  ", ".join(f"{k} {cuda_time_ms(f, 2, a.reps):.3f}" for k, f in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
