"""Forward and backward of every registered family's hardening problem and one case of each of its kernel forms, for
running under compute-sanitizer: bash tests/device/sanitize.sh. A form is what decides which kernels run: for the pool
family its (forward, backward) designs, walk and packing (kgen.families.pool.plan); for conv2d_epilogue which of its
halo / folded / direct paths a case takes (derive); other families' first three cases. `--list` prints the
selection without a GPU. KGEN_SANITIZE_MATCH="WORD ..." keeps only the problems whose label contains one of the WORDs;
KGEN_SANITIZE_TF32=on|off|both (default both) sets torch.backends.cudnn.allow_tf32 for each run, so the conv family's
TF32 and 3xTF32 kernels are both checked."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen.problem import load_problem  # noqa: E402
from kgen.spec import match  # noqa: E402
from tests.families import all_families  # noqa: E402
from tests.helpers import reference_and_new, write_problem  # noqa: E402


def pool_form(fam, spec) -> tuple:
    pl = fam.plan(spec)
    t = {**pl["tiling"], **pl["bwd_tiling"]}
    return pl["forward"], pl["backward"], bool(t.get("walk")), bool(t.get("packed")), spec.dtype == "float32"


def conv_form(fam, spec) -> tuple:
    d = fam.derive(spec)
    keys = ("HALO", "HALO_DX", "HALO_W", "FMA_DX", "FMA_FWD", "FUSED_POOL", "FUSED_REDUCE", "FUSED_CREDUCE", "DIRECT", "write_gz",
            "EPI_STAGED")
    return tuple(bool(d[k]) for k in keys) + (bool(d["FUSED_CREDUCE"] and d["HF"]["WARPS_N"] > 1),
                                               bool(d["HALO"] and d["HALO"]["WGMMA"]))


FORMS = {"pool": pool_form, "conv2d_epilogue": conv_form}


def selection() -> dict[str, str]:
    problems = {}
    for fc in all_families():
        problems[f"{fc.name}-hardening"] = fc.hardening
        if fc.name not in FORMS:
            problems.update({f"{fc.name}-{cid}": src for cid, src in fc.cases[:3]})
            continue
        seen = set()
        for cid, src in fc.cases:
            fam, spec = match(load_problem(write_problem(src)))
            form = FORMS[fc.name](fam, spec)
            if form not in seen:
                seen.add(form)
                problems[f"{fc.name}-{cid}"] = src
    words = os.environ.get("KGEN_SANITIZE_MATCH", "").split()
    return {label: src for label, src in problems.items() if not words or any(w in label for w in words)}


def main() -> None:
    problems = selection()
    if "--list" in sys.argv:
        print("\n".join(problems))
        return
    modes = {"on": [True], "off": [False], "both": [True, False]}[os.environ.get("KGEN_SANITIZE_TF32", "both")]
    for label, src in problems.items():
        model, new, ns, user = reference_and_new(src)
        with torch.device("meta"):
            meta = user["get_inputs"]()[0]
        for tf32 in modes:
            torch.backends.cudnn.allow_tf32 = tf32
            x = torch.rand(tuple(meta.shape), device="cuda").to(meta.dtype).requires_grad_(True)
            out = new(x)
            out = out[0] if isinstance(out, (tuple, list)) else out
            if out.requires_grad:  # an index-only output has no backward
                out.backward(torch.randn_like(out))
            torch.cuda.synchronize()
            print(f"sanitize {label} (tf32 {'on' if tf32 else 'off'}): ok, out {tuple(out.shape)}")


if __name__ == "__main__":
    main()
