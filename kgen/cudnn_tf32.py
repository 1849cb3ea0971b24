"""Which float32 convolutions cuDNN runs in TF32 when PyTorch allows it, as kgen's conv families mirror it.

`torch.backends.cudnn.allow_tf32` (True by default) lets cuDNN pick a TF32 kernel; it is a permission, and cuDNN's
heuristics still pick exact float32 kernels for many shapes (small reductions, small problems). A benchmark harness
compares against eager PyTorch run with the default flags at atol = rtol = 1e-4, and a TF32 result misses an exact
float32 one by more than that, and the other way round: on an H200 (sixteenth session,
tests/dev/default_mode_check.py), kgen's TF32 kernels passed 44 of 86 outputs of the conv CASES and benchmark
problems against default eager, its exact (3xTF32) kernels 77, and the kernel cuDNN itself chose 85 (this model: 79).
So the generated module follows cuDNN's choice per pass: TF32 only where cuDNN would use TF32 too, and exact float32
(3xTF32) elsewhere.

cuDNN's choice is a heuristic over the whole shape; kgen models it with one small decision tree per pass (forward,
grad of the input, grad of the weight), fitted to the shapes in docs/cudnn_tf32_survey.csv (measured with
tests/dev/cudnn_tf32_survey.py on an H200, torch 2.11, cuDNN 9; refit with tests/dev/fit_cudnn_tf32.py). The trees
read the batch too, which the generated module knows only at call time, so each is rendered as a rule on n
(`cpp_rule`). Measured on sm_90; other GPUs' heuristics may differ, and there the model is an approximation.
`KGEN_TF32=all` in the environment makes every pass use TF32 whenever PyTorch allows it (the fastest, not cuDNN's
numerics).
"""

from __future__ import annotations

PASSES = ("fwd", "dgrad", "wgrad")
TF32_REL = 1e-5  # a pass ran in TF32 when the flag moved its result by more than this, relative to its largest value


def _static(c: dict) -> dict:
    cig, cog = c["CI"] // c["G"], c["CO"] // c["G"]
    return {"cig": cig, "cog": cog, "K": cig * c["KH"] * c["KW"], "khw": c["KH"] * c["KW"], "s": max(c["SH"], c["SW"]),
            "d": max(c["DH"], c["DW"]), "g": c["G"], "hw_out": c["HO"] * c["WO"], "hw_in": c["H"] * c["W"],
            "ci": c["CI"], "co": c["CO"], "kh": c["KH"], "kw": c["KW"], "p": max(c["PH"], c["PW"])}


def _per_image(c: dict) -> dict:
    """The features that scale with the batch n, per image."""
    cig = c["CI"] // c["G"]
    return {"n": 1, "M": c["HO"] * c["WO"], "flops": 2 * c["HO"] * c["WO"] * c["CO"] * cig * c["KH"] * c["KW"],
            "in_elems": c["CI"] * c["H"] * c["W"]}


def features(conv: dict, n: int) -> dict:
    """conv: CI CO G KH KW SH SW PH PW DH DW H W HO WO; n: the batch."""
    return {**_static(conv), **{k: v * n for k, v in _per_image(conv).items()}}


def predict(tree, f: dict) -> bool:
    while not isinstance(tree, bool):
        name, t, lo, hi = tree
        tree = lo if f[name] <= t else hi
    return tree


def n_pieces(tree, conv: dict) -> list[tuple[int | None, bool]]:
    """The tree as a function of the batch: [(n_max, TF32), ..., (None, TF32)], n_max inclusive and increasing."""
    per = _per_image(conv)
    cuts = set()

    def walk(node):
        if isinstance(node, bool):
            return
        name, t, lo, hi = node
        if name in per:  # feature = per[name] * n (per[name] >= 1): at most t while n <= t // per[name]
            cuts.add(int(t // per[name]))
        walk(lo)
        walk(hi)

    walk(tree)
    pieces: list[tuple[int | None, bool]] = []
    bounds = sorted(cuts)
    lows = [1] + [b + 1 for b in bounds if b >= 1]
    for i, lo in enumerate(lows):
        val = predict(tree, features(conv, lo))
        hi = lows[i + 1] - 1 if i + 1 < len(lows) else None
        if pieces and pieces[-1][1] == val:
            pieces[-1] = (hi, val)
        else:
            pieces.append((hi, val))
    return pieces


def cpp_rule(tree, conv: dict) -> str:
    """A C++ expression in `n` (int64_t), true where cuDNN is modelled to pick TF32."""
    pieces = n_pieces(tree, conv)
    expr = "true" if pieces[-1][1] else "false"
    for n_max, val in reversed(pieces[:-1]):
        expr = f"(n <= {n_max}LL ? {'true' if val else 'false'} : {expr})"
    return expr


def rules(conv: dict) -> dict[str, str]:
    """pass -> C++ expression in n."""
    return {p: cpp_rule(TREES[p], conv) for p in PASSES}


# Fitted by tests/dev/fit_cudnn_tf32.py to docs/cudnn_tf32_survey.csv; (feature, threshold, if <=, if >) or a leaf.
TREES: dict = {'fwd': ('K',
         114.0,
         ('K',
          93.0,
          ('in_elems',
           577472.0,
           ('ci', 3.5, False, ('hw_in', 28427.5, False, True)),
           ('s',
            1.5,
            ('M', 169544.0, ('kw', 1.5, False, True), ('co', 80.0, False, True)),
            ('cog', 7.0, ('flops', 22440960.0, False, True), False))),
          ('flops', 260112384.0, ('ci', 5.0, True, False), ('ci', 7.0, True, ('M', 71908.5, False, True)))),
         ('K',
          396.0,
          ('flops',
           186646528.0,
           ('cog', 56.0, ('kw', 1.5, True, False), ('flops', 81312768.0, ('co', 224.0, True, False), False)),
           ('cog', 112.0, ('flops', 10877573376.0, ('hw_in', 2382.5, True, False), True), True)),
          ('cog',
           14.0,
           ('K', 1488.0, ('hw_in', 3392.0, ('cog', 6.0, True, False), ('khw', 9.5, False, True)), True),
           True))),
 'dgrad': ('flops',
           207642624.0,
           ('flops', 24781568.0, ('cig', 28.0, False, ('M', 730.0, False, ('K', 112.0, False, True))), False),
           ('K',
            208.0,
            ('ci', 5.0, False, ('K', 194.0, ('d', 1.5, True, False), False)),
            ('M', 662.0, ('cog', 160.0, False, True), True))),
 'wgrad': ('M',
           728.5,
           ('flops',
            113000448.0,
            ('cig', 40.0, False, ('ci', 80.0, ('flops', 6379776.0, False, True), False)),
            ('co', 160.0, False, True)),
           ('K',
            124.0,
            ('n',
             24.0,
             ('khw', 3.5, True, ('M', 3944.5, False, True)),
             ('khw', 3.5, ('hw_out', 72.5, True, False), ('flops', 7755202560.0, False, True))),
            ('flops',
             277118976.0,
             ('in_elems', 118720.0, ('p', 1.5, False, True), ('hw_out', 62.0, False, True)),
             True)))}
