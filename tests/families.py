"""The test tiers' view of the registry. Each family's test file, tests/test_<NAME>.py, exports its cases:

    CASES: list[tuple[str, str]]        (id, problem source): small problems covering the family's scope; the
                                        compile tier, the GPU numerics tier and the device prebuild use them
    HARDENING: str                      one small float32 problem for the hardening matrix (tests/test_hardening.py)
    random_problem(rng) -> str          a random problem anywhere inside the family's scope (sweep, CPU and GPU)

The tiers iterate over kgen.families.FAMILIES, so a new family is covered by registering it and writing that file.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass
from typing import Callable

import torch

from kgen import bench
from kgen.families import FAMILIES
from tests.helpers import reference_and_new

# (atol, rtol) by input dtype: KernelBench's tolerances, from the one table kgen bench uses.
TOLERANCE = {dtype: (tol, tol) for dtype, tol in bench.TOLERANCE.items()}


@dataclass(frozen=True)
class FamilyCases:
    name: str
    cases: list[tuple[str, str]]
    hardening: str
    random_problem: Callable[[random.Random], str]


def family_cases(name: str) -> FamilyCases:
    mod = importlib.import_module(f"tests.test_{name}")
    missing = [a for a in ("CASES", "HARDENING", "random_problem") if not hasattr(mod, a)]
    if missing:
        raise AttributeError(f"tests/test_{name}.py must export {', '.join(missing)} (tests/families.py)")
    return FamilyCases(name, list(mod.CASES), mod.HARDENING, mod.random_problem)


def all_families() -> list[FamilyCases]:
    return [family_cases(f.NAME) for f in FAMILIES]


def all_cases() -> list[tuple[str, str, str]]:
    """(family, case id, source) for every family's CASES."""
    return [(fc.name, cid, src) for fc in all_families() for cid, src in fc.cases]


def random_problems(n: int, seed: int) -> list[tuple[str, str]]:
    """(family, source): n random in-scope problems per family, reproducible from the seed."""
    out = []
    for fc in all_families():
        rng = random.Random(f"{seed}:{fc.name}")
        out += [(fc.name, fc.random_problem(rng)) for _ in range(n)]
    return out


def setup_problem(source: str, device: str = "cuda", seed: int = 0):
    """(Model, ModelNew, input shape) on `device` with equal parameters, TF32 off for the reference."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model, new, ns, user = reference_and_new(source, seed=seed)
    with torch.device("meta"):
        shape = tuple(user["get_inputs"]()[0].shape)
    return model.to(device), new.to(device), shape
