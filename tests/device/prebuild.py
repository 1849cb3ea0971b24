"""Generate every GPU-test problem and build their extensions in parallel (one process each), so the GPU tests
then load from the cache. Also exercises concurrent builds.
Usage: python tests/device/prebuild.py [JOBS] [FAMILY] [MATCH ...]   (MATCH: only the cases whose id contains one)"""

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import emit  # noqa: E402
from tests import helpers  # noqa: E402


def sources(family: str | None = None, match: list[str] | None = None):
    """Every registered family's CASES and HARDENING problem, and the bundled problems (or one family's; or, with
    match, only the CASES whose id contains one of its strings)."""
    from tests.families import all_families

    out = []
    for fc in all_families():
        if family in (None, fc.name):
            out += [(src, None) for cid, src in fc.cases if not match or any(m in cid for m in match)]
            out += [] if match else [(fc.hardening, None)]
    if family is None and not match:
        out += [(p.read_text(), p.stem) for p in sorted(Path("kgen/problems").glob("[!_]*.py"))]
    return out


def build(path: Path) -> tuple[str, float, int, str]:
    t = time.time()
    r = subprocess.run([sys.executable, "-c", f"exec(open({str(path)!r}).read(), {{'__name__': 'prebuild'}})"],
                       capture_output=True, text=True)
    return path.parent.name, time.time() - t, r.returncode, (r.stderr or "")[-3000:]


def build_labelled(modules: list[str]) -> list[tuple[str, str]]:
    """Build "LABEL=path/to/model_new.py" modules at once (one process each), printing a line each; (label, path)."""
    mods = [tuple(m.split("=", 1)) for m in modules]
    with ThreadPoolExecutor(len(mods)) as ex:
        for name, secs, rc, err in ex.map(build, [Path(p) for _, p in mods]):
            print(f"built {name} in {secs:.0f} s" if rc == 0 else f"BUILD FAIL {name}: {err[-1500:]}", flush=True)
    return mods


def main() -> int:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    family = sys.argv[2] if len(sys.argv) > 2 else None
    paths = []
    for src, name in sources(family, sys.argv[3:]):
        paths.append(helpers.write_generated(emit.generate(helpers.write_problem(src, name))))
    t0 = time.time()
    with ThreadPoolExecutor(jobs) as ex:
        results = list(ex.map(build, paths))
    bad = 0
    for name, secs, rc, err in results:
        print(f"prebuild {name}: {secs:.1f} s rc={rc}")
        if rc:
            bad += 1
            print(err)
    print(f"prebuild: {len(results)} extensions in {time.time() - t0:.1f} s, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
