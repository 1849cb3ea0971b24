"""kgen's model of cuDNN's TF32 choice (kgen/cudnn_tf32.py): the committed trees are what the fit script makes of the
committed survey, they agree with cuDNN's measured choices as often as the fit said, and the rule each conv binding
renders is the tree's own decision for every batch size (CPU). GPU: the generated module obeys the rule."""

import random
import re
import sys

import pytest
import torch

from kgen import cudnn_tf32
from kgen.cudnn_tf32 import PASSES, TREES, cpp_rule, features, n_pieces, predict
from tests.helpers import REPO, generate_module, tf32_mode

sys.path.insert(0, str(REPO / "tests" / "dev"))
import fit_cudnn_tf32 as fit  # noqa: E402

SURVEY = REPO / "docs" / "cudnn_tf32_survey.csv"
# The fit's training accuracy, rounded down (cross-validated: 0.815 / 0.776 / 0.789); a tree that drifted from the
# survey (an edit by hand, a changed feature) falls below.
MIN_AGREEMENT = {"fwd": 0.83, "dgrad": 0.80, "wgrad": 0.83}


def test_trees_are_the_fit_of_the_committed_survey():
    data = fit.rows(SURVEY)
    random.Random(0).shuffle(data)
    for p in PASSES:
        xs = [fit.conv_features(c) for c in data]
        assert fit.build(xs, [c["labels"][p] for c in data], fit.DEPTH[p]) == TREES[p], p


@pytest.mark.parametrize("p", PASSES)
def test_trees_agree_with_cudnns_measured_choices(p):
    data = fit.rows(SURVEY)
    assert len(data) > 1000
    hits = sum(predict(TREES[p], fit.conv_features(c)) == c["labels"][p] for c in data)
    assert hits / len(data) >= MIN_AGREEMENT[p], (p, hits, len(data))


def random_conv(rng: random.Random) -> dict:
    k, s, d = rng.choice([1, 3, 5, 7]), rng.choice([1, 2]), rng.choice([1, 2])
    ci, g = rng.choice([(3, 1), (8, 1), (16, 2), (64, 1), (256, 4)])
    h = rng.randint(8, 300)
    ho = (h - d * (k - 1) - 1) // s + 1
    return dict(CI=ci, CO=rng.choice([8, 32, 64, 256]), G=g, KH=k, KW=k, SH=s, SW=s, PH=0, PW=0, DH=d, DW=d,
                H=h, W=h, HO=max(ho, 1), WO=max(ho, 1))


def eval_cpp(expr: str, n: int) -> bool:
    """The rendered rule, evaluated: true / false, or (n <= K ? V : REST)."""
    m = re.fullmatch(r"\(n <= (\d+)LL \? (true|false) : (.*)\)", expr)
    if m is None:
        assert expr in ("true", "false"), expr
        return expr == "true"
    return m.group(2) == "true" if n <= int(m.group(1)) else eval_cpp(m.group(3), n)


def test_rendered_rule_is_the_trees_decision_at_every_batch():
    rng = random.Random(7)
    for _ in range(60):
        conv = random_conv(rng)
        for p in PASSES:
            pieces, expr = n_pieces(TREES[p], conv), cpp_rule(TREES[p], conv)
            assert pieces[-1][0] is None and all(a[0] < b[0] for a, b in zip(pieces, pieces[1:-1]))
            for n in list(range(1, 300)) + [rng.randint(300, 1 << 20) for _ in range(50)]:
                want = predict(TREES[p], features(conv, n))
                assert eval_cpp(expr, n) == want, (p, conv, n, expr)


def test_forward_decisions_at_the_benchmark_shapes():
    """The survey's fixed shapes (issue 9's benchmark convolutions at their batches, the bundled problem's, and
    KernelBench-sized ones): the forward's modelled choice is cuDNN's measured one at every one of them."""
    import cudnn_tf32_survey as survey

    fixed = [(c["n"], c["ci"], c["co"], c["h"], c["w"], c["kh"], c["s"], c["p"], c["d"], c["g"]) for c in survey.FIXED]
    seen = set()
    for c in fit.rows(SURVEY):  # each survey run measured them once
        key = (c["n"], c["ci"], c["co"], c["h"], c["w"], c["kh"], c["s"], c["p"], c["d"], c["g"])
        if key in fixed:
            seen.add(key)
            assert predict(TREES["fwd"], fit.conv_features(c)) == c["labels"]["fwd"], c
    assert len(seen) == len([f for f in survey.FIXED if f["g"] != f["ci"]])  # all but the depthwise one


@pytest.mark.gpu
def test_generated_module_follows_the_rule():
    """With TF32 allowed, each pass gives the bits of the TF32 kernels (KGEN_TF32=all) where the rule says TF32 and
    those of the exact kernels (flag off) where it does not. A gradient is compared where its pass decides as the
    forward does (else the reference run's forward, whose values the backward reads, differs)."""
    from tests.test_conv2d_epilogue import CASE, _spec, fam

    for cid in ("relu", "halo_ci256_k3_noflush_tanh", "halo_ci16_k5_onestage_relu_bias_c"):
        spec = _spec(CASE[cid])
        rules = fam.derive(spec)["TF32_RULES"]
        ns = generate_module(CASE[cid])
        user: dict = {}
        exec(compile(CASE[cid], "<problem>", "exec"), user)
        torch.manual_seed(0)
        new = ns["ModelNew"](*user["get_init_inputs"]()).cuda()
        x = user["get_inputs"]()[0].cuda().requires_grad_(True)
        g = None
        runs = {}
        for mode, (allow, every) in {"policy": (True, False), "tf32": (True, True), "exact": (False, False)}.items():
            with tf32_mode(allow, every):
                x.grad = None
                new.zero_grad(set_to_none=True)
                y = new(x)
                g = torch.randn_like(y) if g is None else g
                y.backward(g)
                runs[mode] = (y.detach(), x.grad.clone(), new.conv.weight.grad.clone())
        n = x.shape[0]
        for i, p in enumerate(PASSES):
            want = "tf32" if eval_cpp(rules[p], n) else "exact"
            if i == 0 or eval_cpp(rules[p], n) == eval_cpp(rules["fwd"], n):
                assert torch.equal(runs["policy"][i], runs[want][i]), (cid, p, want)
        assert not torch.equal(runs["tf32"][0], runs["exact"][0])  # the two kernels differ: the comparison can fail
