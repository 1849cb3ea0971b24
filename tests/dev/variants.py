"""Template edits for A/B timing (a development harness, not shipped code): a variant is a set of exact (old, new)
replacements in template sources, applied while a problem is rendered, so a template-level change is timed against
the shipped templates in one run without copies of them. Each `old` must occur exactly once in its template
(tests/test_pool.py and tests/test_conv2d_epilogue.py render every edit, so one that stops matching fails the CPU tier).

Use: tests/dev/pool_variants.py (pool planning variants and these edits, timed at issue 8's sizes), or render one
problem with an edit for tests/dev/time_generated.py:
  python tests/dev/variants.py PROBLEM.py EDIT OUT_DIR     (EDIT: a name in EDITS, or "default")
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jinja2  # noqa: E402

from kgen import emit, render  # noqa: E402
from kgen.problem import load_problem  # noqa: E402

# ------------------------------------------------------------------------------------------------ pool family
# 64-bit item -> (plane, rest) division only where the item count needs it (a warp-uniform branch per item)
_PLANE64 = "const int64_t plane = item / {per};"
_PLANE32 = ("const int64_t plane = items < (1LL << 31) ? static_cast<int64_t>(static_cast<int>(item) / "
            "static_cast<int>({per})) : item / {per};")
POOL_INDEX32 = {
    "pool/backward_gather.cu.j2": [(_PLANE64.format(per="B_PER_PLANE"), _PLANE32.format(per="B_PER_PLANE"))],
    "pool/forward_window.cu.j2": [(_PLANE64.format(per="F_PER_PLANE"), _PLANE32.format(per="F_PER_PLANE"))],
    "pool/forward_lanes.cu.j2": [(_PLANE64.format(per="F_PER_PLANE"), _PLANE32.format(per="F_PER_PLANE"))],
}

# Max pooling's aligned gather: the first B_VEC / SW candidate windows of a row as one aligned vector load of grad_y
# and one of offsets where ow_first is a multiple of that count and WO too (float16 MaxPool2d(3, 2, 1): 2 loads
# instead of 16 per candidate row); the binding then aligns grad_y to 16 bytes as it does x.
POOL_GATHER_VEC = {
    "pool/backward_gather.cu.j2": [(
        """        const int ow_first = (iw0 + B_R0 + PW) / SW;  // exact: SW divides iw0 and B_R0 + PW
#pragma unroll
        for (int q = 0; q < B_NQ; ++q) {
          const int ow = ow_first + q;
          const bool valid = static_cast<unsigned>(ow) < static_cast<unsigned>(WO);
          const int owc = valid ? ow : 0;
          const float gv = BCAST ? g0 : pool::to_float(gyp[orow + owc]);
{% if reduce == "max" %}
          // The argmax's tap along W if it lies in this row of the window, else out of [0, KW).
          const int kw = valid ? static_cast<int>(offp[orow + owc]) - krow * KW : -1;
""",
        """        const int ow_first = (iw0 + B_R0 + PW) / SW;  // exact: SW divides iw0 and B_R0 + PW
{% if reduce == "max" %}
        constexpr int GQ = B_VEC / SW, SO = static_cast<int>(sizeof(OffT));
        constexpr bool VQ = !BCAST && ((B_R0 + PW) / SW) % GQ == 0 && WO % GQ == 0 && GQ >= 2 && GQ <= B_NQ &&
                            (GQ & (GQ - 1)) == 0 && GQ * static_cast<int>(sizeof(T)) <= 16 && GQ * SO <= 16;
        float gvec[VQ ? GQ : 1] = {};
        int ovec[VQ ? GQ : 1] = {};
        if constexpr (VQ) {
          if (static_cast<unsigned>(ow_first) < static_cast<unsigned>(WO)) {  // the group lies wholly in the row
            pool::load<T, GQ>(gyp + orow + ow_first, gvec);
            const pool::Words<GQ * SO> w = pool::load_words<GQ * SO>(offp + orow + ow_first);
#pragma unroll
            for (int q = 0; q < GQ; ++q) ovec[q] = static_cast<int>(pool::extract<SO>(w, q));
          }
        }
{% endif %}
#pragma unroll
        for (int q = 0; q < B_NQ; ++q) {
          const int ow = ow_first + q;
          const bool valid = static_cast<unsigned>(ow) < static_cast<unsigned>(WO);
          const int owc = valid ? ow : 0;
{% if reduce == "max" %}
          const bool fromvec = VQ && q < GQ;
          const float gv = BCAST ? g0 : fromvec ? gvec[fromvec ? q : 0] : pool::to_float(gyp[orow + owc]);
          // The argmax's tap along W if it lies in this row of the window, else out of [0, KW).
          const int kw = valid ? (fromvec ? ovec[fromvec ? q : 0] : static_cast<int>(offp[orow + owc])) - krow * KW : -1;
{% else %}
          const float gv = BCAST ? g0 : pool::to_float(gyp[orow + owc]);
{% endif %}
{% if reduce == "max" %}
""")],
    "pool/binding.cpp.j2": [(
        """  const at::Tensor grad_y = bcast ? grad_y_in : kgen_glue::check_input(grad_y_in, "grad_y", {{ y_want_cpp }}, kDtype, kProblem);""",
        """  at::Tensor grad_y = bcast ? grad_y_in : kgen_glue::check_input(grad_y_in, "grad_y", {{ y_want_cpp }}, kDtype, kProblem);
  if (!bcast && reinterpret_cast<uintptr_t>(grad_y.const_data_ptr()) % 16 != 0) grad_y = grad_y.clone();""")],
}

# ------------------------------------------------------------------------------------------ conv2d_epilogue family
# With TF32 allowed (single-pass mma), the forward and grad_x main loops accumulate on acc directly (no `part` and no
# flush every few k steps); grad_w (LONG_K: a reduction over every position) and the 3xTF32 path keep the flush. The
# flush cost the TF32-allowed step 5-7% (H200, eighth session); its error there is bounded by the TF32 rounding.
CONV_NOFLUSH_TF32 = {
    "conv2d_epilogue/gemm.cu.j2": [
        ("smem + STAGES * T::A_STAGE + slot * T::B_STAGE, part, warp_m, warp_n, lane);\n    flush_acc(acc, part);",
         "smem + STAGES * T::A_STAGE + slot * T::B_STAGE, X3 || T::LONG_K ? part : acc, warp_m, warp_n, lane);\n"
         "    if (X3 || T::LONG_K) flush_acc(acc, part);")],
    "conv2d_epilogue/halo.cu.j2": [
        ("else kg_mma(part[mi][ni], a[mi].h[0]", "else kg_mma(acc[mi][ni], a[mi].h[0]"),
        ("    flush_acc(acc, part);\n    __syncthreads();", "    if (X3) flush_acc(acc, part);\n    __syncthreads();")],
}

EDITS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "pool_index32": POOL_INDEX32,
    "pool_gather_vec": POOL_GATHER_VEC,
    "pool_gather_vec_index32": {**POOL_INDEX32, "pool/backward_gather.cu.j2":
                                POOL_GATHER_VEC["pool/backward_gather.cu.j2"] + POOL_INDEX32["pool/backward_gather.cu.j2"],
                                "pool/binding.cpp.j2": POOL_GATHER_VEC["pool/binding.cpp.j2"]},
    "conv_noflush_tf32": CONV_NOFLUSH_TF32,
}


def patched_templates(edits: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """Template sources with each (old, new) edit applied; every `old` must occur exactly once."""
    out = {}
    for name, pairs in edits.items():
        text = (render.TEMPLATE_DIR / name).read_text()
        for old, new in pairs:
            if text.count(old) != 1:
                raise ValueError(f"template edit of {name} matches {text.count(old)} times (must be 1): {old[:80]!r}")
            text = text.replace(old, new)
        out[name] = text
    return out


@contextlib.contextmanager
def template_edits(edits: dict[str, list[tuple[str, str]]]):
    """Renders with the edited sources in place of the shipped ones while the block runs."""
    env = render.environment()
    loader = env.loader
    env.loader = jinja2.ChoiceLoader([jinja2.DictLoader(patched_templates(edits)), loader])
    env.cache.clear()
    try:
        yield
    finally:
        env.loader = loader
        env.cache.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem", type=Path)
    ap.add_argument("edit", choices=["default", *EDITS])
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    with template_edits(EDITS.get(a.edit, {})):
        gen = emit.generate_problem(load_problem(a.problem), str(a.problem))
    emit.write(gen, a.out, force=True)
    print(a.out / emit.MODEL_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
