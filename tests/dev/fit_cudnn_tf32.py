"""Fit kgen's model of cuDNN's TF32 choice (kgen/cudnn_tf32.py's TREES) to the survey in docs/cudnn_tf32_survey.csv
(made on the device by tests/dev/cudnn_tf32_survey.py). One small decision tree per pass (forward, grad of the
input, grad of the weight): gini splits, depth DEPTH[pass], at least MIN_LEAF shapes a leaf, over the shape's static
features and the batch (n and the sizes that scale with it), which the generated module reads at each call. Depths
chosen by 5-fold cross-validation (sixteenth session: the forward at depth 6 agreed on 0.815 of all shapes and 0.860
of those over 1 GFLOP; without the batch features 0.810 and 0.829, and it missed the two benchmark problems whose
batch tips cuDNN to TF32). Prints each tree's cross-validated and training accuracy, and the TREES literal to paste
into kgen/cudnn_tf32.py.

Usage: python tests/dev/fit_cudnn_tf32.py [docs/cudnn_tf32_survey.csv]
       python tests/dev/fit_cudnn_tf32.py --check OTHER.csv   (the committed trees against another survey, e.g. one
       made on an H100 or an sm_80 GPU: how often they agree with that GPU's cuDNN, per pass)
"""

from __future__ import annotations

import csv
import pprint
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen.cudnn_tf32 import PASSES, TF32_REL, TREES, features, predict  # noqa: E402

DEPTH, MIN_LEAF = {"fwd": 6, "dgrad": 5, "wgrad": 5}, 8


def rows(path: Path) -> list[dict]:
    out = []
    for r in csv.DictReader(path.open()):
        c = {k: int(r[k]) for k in ("n", "ci", "co", "h", "w", "kh", "kw", "s", "p", "d", "g", "ho", "wo")}
        if c["g"] == c["ci"] > 1:
            continue  # depthwise: PyTorch's own float32 kernels, never cuDNN's
        c["labels"] = {p: float(r[p]) > TF32_REL for p in PASSES}
        out.append(c)
    return out


def conv_features(c: dict) -> dict:
    conv = dict(CI=c["ci"], CO=c["co"], G=c["g"], KH=c["kh"], KW=c["kw"], SH=c["s"], SW=c["s"], PH=c["p"], PW=c["p"],
                DH=c["d"], DW=c["d"], H=c["h"], W=c["w"], HO=c["ho"], WO=c["wo"])
    return features(conv, c["n"])


def gini_cost(ys: list[bool]) -> float:
    n = len(ys)
    return 0.0 if n == 0 else 2.0 * sum(ys) * (n - sum(ys)) / n


def build(xs: list[dict], ys: list[bool], depth: int):
    """A leaf is a bool (TF32 or not); a split is (feature, threshold, subtree if <= threshold, subtree if above)."""
    pos = sum(ys)
    leaf = 2 * pos >= len(ys)
    if depth == 0 or pos in (0, len(ys)):
        return leaf
    best = None
    for f in sorted(xs[0]):
        pairs = sorted((x[f], y) for x, y in zip(xs, ys))
        left_pos = 0
        for i in range(len(pairs) - 1):
            left_pos += pairs[i][1]
            if pairs[i][0] == pairs[i + 1][0] or i + 1 < MIN_LEAF or len(pairs) - i - 1 < MIN_LEAF:
                continue
            nl, nr = i + 1, len(pairs) - i - 1
            rp = pos - left_pos
            cost = 2.0 * left_pos * (nl - left_pos) / nl + 2.0 * rp * (nr - rp) / nr
            if best is None or cost < best[0]:
                best = (cost, f, (pairs[i][0] + pairs[i + 1][0]) / 2)
    if best is None or best[0] >= gini_cost(ys) - 1e-9:
        return leaf
    _, f, t = best
    li = [i for i, x in enumerate(xs) if x[f] <= t]
    ri = [i for i, x in enumerate(xs) if x[f] > t]
    lo = build([xs[i] for i in li], [ys[i] for i in li], depth - 1)
    hi = build([xs[i] for i in ri], [ys[i] for i in ri], depth - 1)
    return lo if lo == hi and isinstance(lo, bool) else (f, round(t, 3), lo, hi)


def check(path: Path) -> None:
    data = rows(path)
    for p in PASSES:
        hits = sum(predict(TREES[p], conv_features(c)) == c["labels"][p] for c in data)
        print(f"{p}: the committed tree agrees with {path.name} on {hits} of {len(data)} shapes ({hits / len(data):.3f})")


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        return check(Path(sys.argv[2]))
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/cudnn_tf32_survey.csv")
    data = rows(path)
    random.Random(0).shuffle(data)
    trees = {}
    for p in PASSES:
        xs = [conv_features(c) for c in data]
        ys = [c["labels"][p] for c in data]
        hits = 0
        for fold in range(5):
            tr = [i for i in range(len(data)) if i % 5 != fold]
            tree = build([xs[i] for i in tr], [ys[i] for i in tr], DEPTH[p])
            hits += sum(predict(tree, xs[i]) == ys[i] for i in range(len(data)) if i % 5 == fold)
        trees[p] = build(xs, ys, DEPTH[p])
        train = sum(predict(trees[p], x) == y for x, y in zip(xs, ys)) / len(ys)
        print(f"{p}: {len(ys)} shapes, {sum(ys)} TF32; cross-validated accuracy {hits / len(ys):.3f}, training {train:.3f}")
    print("TREES = " + pprint.pformat(trees, width=116, sort_dicts=False))


if __name__ == "__main__":
    main()
