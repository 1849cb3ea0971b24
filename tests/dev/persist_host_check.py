"""CPU check of tests/dev/edits/conv_x3wg_persistent.diff (prepared, not shipped): the folded 3xTF32 forward's
persistent CTAs (PERSIST_X3) on the host shim (tests/host_fma.py), where X3WG (wgmma) is off, so PERSIST_X3 is
forced on for the shim's mma.sync instance: the tile loop, B staged by a CTA's first tile only, the folded stage's
scratch kept off B. Each problem runs on the full grid and on a few persistent CTAs; the two outputs must be the same
bits and within 1e-4 of the problem's Model in float64.
Usage: python tests/dev/persist_host_check.py   (needs g++; about 25 s)"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import tests.host_fma as host  # noqa: E402
from tests.dev.variants import EDITS, template_edits  # noqa: E402
from tests.test_host_fma import HALO_FOLD, _forward_inputs, _problem, _rounded_reference  # noqa: E402

FORCE = ("constexpr bool PERSIST_X3 = HaloF::X3WG && ", "constexpr bool PERSIST_X3 = ")


def prepare(src: str):
    """The problem rendered with the edit (PERSIST_X3 forced on), its derive(), the kernels' inputs at batch 2 and the
    float64 reference output."""
    with template_edits(EDITS["conv_x3wg_persistent"]):
        spec, d, kernel = _problem(src)
    assert kernel.count(FORCE[0]) == 1, "the edit's PERSIST_X3 line moved"
    model, x, inputs = _forward_inputs(src, spec, d, 2)
    return kernel.replace(*FORCE), d, inputs, _rounded_reference(model, x, False)[2].reshape(-1)


def run(kernel: str, d: dict, inputs: list, ctas: int | None, work: Path) -> tuple[torch.Tensor, bool]:
    """(kgen's output, whether PERSIST_X3 held) on `ctas` persistent CTAs a group (None: the full grid)."""
    orig = host.host_source

    def source(kernel_cu, which, d_, n, tf32):
        s = orig(kernel_cu, which, d_, n, tf32)
        grid = f"{ctas}" if ctas else f"{n} * HaloF::GRID_X_PER_IMAGE"
        old = f"launch({n} * HaloF::GRID_X_PER_IMAGE, G, 1, TileH::THREADS"
        assert s.count(old) == 1 and s.count("wt.data(), nullptr, nullptr); });") == 1
        s = s.replace(old, f"launch({grid}, G, 1, TileH::THREADS")
        s = s.replace("wt.data(), nullptr, nullptr); });", f"wt.data(), nullptr, nullptr, {n}LL * HaloF::GRID_X_PER_IMAGE); }});")
        # whether the forced PERSIST_X3 held for this problem (the rest of its condition)
        return s.replace("  return 0;\n}", '  std::FILE* f = std::fopen("persist.txt", "w");\n'
                         '  std::fprintf(f, "%d", (int)PERSIST_X3);\n  std::fclose(f);\n  return 0;\n}')

    host.host_source = source
    try:
        out = host.run_host(kernel, "halo_fold", d, inputs, 2, False, work)
    finally:
        host.host_source = orig
    return out, (work / "persist.txt").read_text() == "1"


def main() -> int:
    bad = 0
    for cid, src in HALO_FOLD:
        kernel, d, inputs, ref = prepare(src)
        with tempfile.TemporaryDirectory() as t:
            full, held = run(kernel, d, inputs, None, Path(t) / "full")
            err = float((full.double() - ref).abs().max())
            ok = torch.allclose(full.double(), ref, atol=1e-4, rtol=1e-4)
            line = f"the full grid: largest |kgen - float64| {err:.2e}"
            if held:  # a few CTAs walk every tile: the same bits
                few = run(kernel, d, inputs, 3, Path(t) / "few")[0]
                ok = ok and torch.equal(full, few)
                line += f"; 3 persistent CTAs a group {'give the same bits' if torch.equal(full, few) else 'DIFFER'}"
            else:
                line += " (PERSIST_X3 does not hold here: one grid as before)"
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {cid}: {line}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
