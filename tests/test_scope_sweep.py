"""Random problems anywhere inside each registered family's scope render without error, match the family that
drew them, cross-check PyTorch's traced output shape (each family's match asserts it), pass KernelBench's static
checker, and their generated text alone runs and mirrors Model's parameters, names, shapes and values under a seed (CPU). The same generator drives the GPU
sweep: tests/dev/sweep.py --gpu."""

import pytest
import torch

from kgen import emit
from kgen.problem import load_problem
from kgen.spec import match
from tests.families import random_problems
from tests.helpers import write_problem
from tests.test_static_rules import computes_in_float32, violations

CASES = random_problems(16, seed=20261126)


@pytest.mark.parametrize("family,source", CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CASES)])
def test_in_scope_problem_renders_with_pytorch_shapes(family, source):
    path = write_problem(source)
    fam, spec = match(load_problem(path))
    assert fam.NAME == family
    gen = emit.generate(path)
    assert gen.name.startswith(f"kgen_{family}_") and set(gen.files) == {"model_new.py", "kernel.cu", "binding.cpp"}
    assert violations(gen.files["model_new.py"], computes_in_float32(path)) == []
    user: dict = {}
    exec(compile(source, "<problem>", "exec"), user)
    with torch.device("meta"):
        model = user["Model"](*user["get_init_inputs"]())
    ns: dict = {"__name__": "sweep"}
    exec(gen.files["model_new.py"], ns)  # the generated text alone runs (no GPU: no build)
    with torch.device("meta"):
        new = ns["ModelNew"](*user["get_init_inputs"]())
    assert {k: v.shape for k, v in new.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    if sum(t.numel() for t in model.state_dict().values()) <= 1 << 20:  # Model's values, under a seed kgen never saw
        torch.manual_seed(20261205)
        want = user["Model"](*user["get_init_inputs"]()).state_dict()
        torch.manual_seed(20261205)
        got = ns["ModelNew"](*user["get_init_inputs"]()).state_dict()
        assert all(torch.equal(got[k], want[k]) for k in want), [k for k in want if not torch.equal(got[k], want[k])]
