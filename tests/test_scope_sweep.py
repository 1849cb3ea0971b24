"""Random problems anywhere inside each family's scope render without error, with PyTorch's output shapes (CPU).
The same generator drives the GPU sweep: `python tests/dev/sweep.py --gpu` (40 cases passed on an H200)."""

import random

import pytest
import torch

from kgen import emit
from kgen.problem import load_problem
from kgen.spec import match
from tests.dev.sweep import avg_cases, conv_cases
from tests.helpers import write_problem

RNG = random.Random(20261126)
CASES = [("avg_pool2d", s) for s in avg_cases(RNG, 12)] + [("conv2d_avgpool_act_reduce", s) for s in conv_cases(RNG, 12)]


@pytest.mark.parametrize("family,source", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_in_scope_problem_renders_with_pytorch_shapes(family, source):
    path = write_problem(source)
    fam, spec = match(load_problem(path))
    assert fam.NAME == family
    gen = emit.generate(path)
    assert gen.name.startswith(f"kgen_{family}_") and set(gen.files) == {"model_new.py", "kernel.cu", "binding.cpp"}
    user: dict = {}
    exec(compile(source, "<problem>", "exec"), user)
    model = user["Model"](*user["get_init_inputs"]())
    x = user["get_inputs"]()[0]
    with torch.no_grad():
        if family == "avg_pool2d":
            assert (spec.C, spec.HO, spec.WO) == tuple(model(x).shape[1:])
        else:
            d = fam.derive(spec)
            assert (spec.CO, d["PHO"], d["PWO"]) == tuple(model.pool(model.conv(x)).shape[1:])
    ns: dict = {"__name__": "sweep"}
    exec(gen.files["model_new.py"], ns)  # the generated text alone runs (no GPU: no build)
    assert ns["ModelNew"](*user["get_init_inputs"]()).state_dict().keys() == model.state_dict().keys()
