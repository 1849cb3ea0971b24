"""Template edits for A/B timing (a development harness, not shipped code): a variant is a set of exact (old, new)
replacements in template sources, applied while a problem is rendered, so a template-level change is timed against
the shipped templates in one run without copies of them. Each `old` must occur exactly once in its template
(tests/test_pool.py and tests/test_conv2d_epilogue.py render every edit, so one that stops matching fails the CPU tier).

Use: tests/dev/pool_variants.py (pool planning variants and these edits, timed at issue 8's sizes), or render one
problem with an edit for tests/dev/time_generated.py:
  python tests/dev/variants.py PROBLEM EDIT OUT_DIR   (PROBLEM: a file or a benchmark name; EDIT: a name in EDITS, names
                                                       joined by "+", or "default")
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
# None now. Timed and settled (docs/PERFORMANCE.md, tenth session): grouped vector loads in max pooling's aligned
# gather (shipped: gather_tiling's b_gq) and 32-bit plane division (pool_index32: no gain, 1.071 vs 1.064 ms).

# ------------------------------------------------------------------------------------------ conv2d_epilogue family
# With TF32 allowed (single-pass mma), the im2col GEMM main loops (gemm.cu.j2) accumulate on acc directly (no `part`
# and no flush every few k steps) except in grad_w (LONG_K: a reduction over every position); the 3xTF32 path keeps
# the flush. The halo kernels' half of this edit shipped in the thirteenth session as the plan field FLUSH_TF32 (a
# flush only where the reduction is longer than NOFLUSH_K_MAX): H200, TF32 allowed, relu + bias forward 0.901 ->
# 0.883 ms, step 4.765 -> 4.719; hardswish forward 1.156 -> 1.127. This half is not timed.
CONV_NOFLUSH_TF32 = {
    "conv2d_epilogue/gemm.cu.j2": [
        ("smem + STAGES * T::A_STAGE + slot * T::B_STAGE, part, warp_m, warp_n, lane);\n    flush_acc(acc, part);",
         "smem + STAGES * T::A_STAGE + slot * T::B_STAGE, X3 || T::LONG_K ? part : acc, warp_m, warp_n, lane);\n"
         "    if (X3 || T::LONG_K) flush_acc(acc, part);")],
}

# Shipped in the twelfth session after an A/B on an H200 (docs/PERFORMANCE.md): conv_halo_unroll_tf32 (the forward /
# grad_x tap loop unrolled with TF32 allowed), conv_wgrad_unroll_tf32 (grad_w's k steps unrolled with one tap group;
# by 2 shipped, by 4 spilled) and conv_wgrad_vec_gz (grad_w copies gz 2 or 4 positions a cp.async); in the
# thirteenth, conv_round_vec4 (the TF32 rounding pass over a staged chunk in float4s) and the patch conv_halo_vec16
# (16-byte halo copies).

# With TF32 allowed, the halo forward asks for 3 CTAs an SM (80 registers a thread instead of up to 128: 24 warps an
# SM instead of 16); Nsight (H200, twelfth session) found it issuing every other cycle with no dominant stall, so more
# warps to pick from may raise its issue rate. Timed on an H200 (thirteenth session, TF32 allowed): relu + bias forward
# 0.883 (no flush, 2 CTAs) -> 0.825 ms (torch.compile 0.834), but 4 bytes of spills on sm_90, and with the flush's
# `part` still there 0.962 (96 bytes); the hardswish forward 1.127 -> 1.286 (its 2 chunks a CTA: the epilogue weighs
# more). Not shipped: the spills, and a loss where chunks are few. Timed before the halo forward got its own tile
# (fourteenth session); with 3+ chunks that tile has 128 threads, and 3 CTAs then cap registers at 170, about what
# those kernels use (148-174), so the edit matters where chunks are fewer (256 threads, 80 registers) as timed.
# Twenty-seventh session: what shipped instead is halo_tf32_ctas (4 CTAs an SM on 128-thread tiles over 8+ chunks, on
# sm_90; one chunk on 256 threads at 4 CTAs lost 1.4%); this edit now gives every TF32 instance 3.
CONV_FWD_HALO_3CTAS = {
    "conv2d_epilogue/halo.cu.j2": [
        ("__launch_bounds__(TileH::THREADS, X3 ? (SAVE ? 2 : HaloF::X3_CTAS) : POOL && SAVE ? HALO_TF32_CTAS_POOL_SAVE : HALO_TF32_CTAS) conv_forward_halo(",
         "__launch_bounds__(TileH::THREADS, X3 ? (SAVE ? 2 : HaloF::X3_CTAS) : 3) conv_forward_halo(")],
}

# grad_x from halo tiles asks for 4 CTAs an SM in its TF32 instance too, as the forward's halo_tf32_ctas does on sm_90
# (twenty-seventh session, not timed): on scaling_min_c's grad_x (128 gz channels, 16 chunks) ptxas then gives 124
# registers instead of 140 (3 CTAs an SM), no spills; padded_relu_bias's (8 chunks) already uses 116.
CONV_DX_HALO_4CTAS = {
    "conv2d_epilogue/halo.cu.j2": [
        ("template <class Gm, bool X3, bool PRE = false>\n__global__ void __launch_bounds__(TileD::THREADS, 2) conv_grad_x_halo(",
         "template <class Gm, bool X3, bool PRE = false>\n__global__ void __launch_bounds__(TileD::THREADS, X3 ? 2 : 4) conv_grad_x_halo(")],
}

EDITS_DIR = Path(__file__).resolve().parent / "edits"


def diff_edits(text: str) -> dict[str, list[tuple[str, str]]]:
    """A `git diff` of files under templates/ as (old, new) replacements per template: each hunk's context and
    removed lines are `old`, its context and added lines `new` (so a hunk must still match its template exactly)."""
    edits: dict[str, list[tuple[str, str]]] = {}
    name, old, new = None, [], []

    def flush():
        if name is not None and (old or new):
            edits.setdefault(name, []).append(("".join(old), "".join(new)))
    for line in text.splitlines(keepends=True):
        if line.startswith("+++ "):  # a file's header: its hunks are edits only under templates/
            flush()
            path = line[len("+++ b/"):].rstrip("\n")
            if not path.startswith("templates/"):
                raise ValueError(f"template edits patch templates/ only, not {path}")
            name, old, new = path[len("templates/"):], [], []
        elif line.startswith(("diff ", "index ", "--- ")):
            continue
        elif line.startswith("@@"):
            flush()
            old, new = [], []
        elif line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        elif line.startswith(" "):
            old.append(line[1:])
            new.append(line[1:])
        elif line.startswith("\\"):  # "\ No newline at end of file"
            continue
    flush()
    return edits


# Larger prepared changes are kept as diffs (tests/dev/edits/NAME.diff, made with `git diff -- templates/...`); none
# now. Dropped in the fifty-second session: conv_x3wg_persistent (the folded 3xTF32 inference forward on wgmma as
# persistent CTAs that stage B once; H100, TF32 off, issue 9's gelu -> global average 0.722 -> 0.700 ms, bit-identical,
# with conv_probe_x3_no_b, CTAs past the first wave skipping B altogether, at 0.683: B's copies are not what holds that
# forward at 3.2x eager). conv_train_fold_pool shipped in the eleventh session, conv_wgrad_vec_gz in the twelfth.
# Changes that add plan fields are kept as `git apply` patches (tests/dev/edits/NAME.patch): conv_halo_vec16 shipped in
# the thirteenth session, conv_fwd_warp64 in the fourteenth as the halo forward's own tile (halo_tile: 4 x 1 warps from
# HALO_WIDE_MIN_CHUNKS input-channel chunks on), conv_staged_epilogue in the twenty-first (EPI_STAGED), conv_halo_vec8
# in the twenty-second (HV = 2), conv_grad_x_wide in the twenty-third (halo_dx_tile: grad_x on 4 x 1 warps from 3 gz
# chunks). Dropped in the twenty-third: conv_bfrag_ni8 (fragment-ordered weights only where NI = 8; H200, TF32: the
# 16->64 hardswish forward 1.158 -> 1.111 ms, but the steps of the 64->128 blocks 1-2% slower). Shipped in the
# twenty-fourth: conv_wgrad_mi2_tf32 (TF32 grad_w from halo tiles: two m16 tiles a warp, no flush, splits bounded by
# CHAIN_TILES; the TF32 steps of the 64->128 blocks 5-6% faster). Shipped in the twenty-fifth: conv_fma_dx_rows (grad_x
# on FMAs with PXW = 4 consecutive pixels of a phase row a thread, each gz row's columns loaded once for every column
# tap; the ResNet stem's step 2.318 -> 1.711 ms, TF32 off) and conv_fma_forward (the forward with float32 FMAs for
# groups of at most 4 input channels, reworked on the device: stores through a per-warp transpose, 16 out channels a
# thread; docs/notes/conv2d_epilogue_plan.md). Shipped in the twenty-sixth: conv_fma_fold_reduce (inference folds a
# first reduction over (H, W) into the forward on FMAs) and conv_fma_dx_over_halo (grad_x on FMAs for few input channels
# also where grad_x is a halo convolution). Prepared, not landed: conv_fma_wgrad (grad_w on FMAs for few input channels;
# v1, v2 and v3 timed slower on the stem, v3 60 us faster a step on 3x3 kernels).
EDITS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "conv_noflush_tf32": CONV_NOFLUSH_TF32,
    "conv_fwd_halo_3ctas": CONV_FWD_HALO_3CTAS,
    "conv_dx_halo_4ctas": CONV_DX_HALO_4CTAS,
    **{f.stem: diff_edits(f.read_text()) for f in sorted(EDITS_DIR.glob("*.diff"))},
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
    ap.add_argument("problem", type=Path, help="a problem file, or a name in tests/bench's PROBLEMS (its source is "
                                                "written to OUT_DIR/problem.py for time_generated.py)")
    ap.add_argument("edit", help=f"default, an edit, or edits joined by '+' (applied in that order): {', '.join(EDITS)}")
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    if not a.problem.exists():
        from tests.bench import bench_conv2d_epilogue, bench_pool

        name = str(a.problem)
        benches = {n: (m, row) for m in (bench_conv2d_epilogue, bench_pool) for n, row in m.PROBLEMS.items()}
        if name not in benches:
            ap.error(f"{name}: no such file, and not a benchmark problem ({', '.join(benches)})")
        module, row = benches[name]
        a.out.mkdir(parents=True, exist_ok=True)
        a.problem = a.out / "problem.py"
        a.problem.write_text(module.problem_source(*row))
    names = [] if a.edit == "default" else a.edit.split("+")
    unknown = [e for e in names if e not in EDITS]
    if unknown:
        ap.error(f"unknown edit {', '.join(unknown)}: pick from {', '.join(EDITS)}")
    combined: dict[str, list[tuple[str, str]]] = {}
    for e in names:
        for template, pairs in EDITS[e].items():
            combined.setdefault(template, []).extend(pairs)
    with template_edits(combined):
        gen = emit.generate_problem(load_problem(a.problem), str(a.problem))
    emit.write(gen, a.out, force=True)
    print(a.out / emit.MODEL_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
