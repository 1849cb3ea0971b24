"""The family interface: what every template family provides. The registry (``kgen.families.FAMILIES``) holds one
object per family that satisfies it; the pipeline and every test tier iterate over the registry, so a new family
costs its module, its templates and one test file of cases (docs/ADDING_A_FAMILY.md).

A family is a Python module under ``kgen/families/`` (modules satisfy a Protocol structurally). Its name is the same
everywhere: ``kgen/families/<NAME>.py``, ``templates/<NAME>/``, ``tests/test_<NAME>.py``.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping, Protocol, runtime_checkable

import torch

from kgen.ops import Op
from kgen.problem import Problem


@runtime_checkable
class Family(Protocol):
    NAME: str
    TEMPLATES: Mapping[str, str]  # output file name -> template path ("kernel.cu", "binding.cpp")
    MODEL_TEMPLATE: str  # template of model_new.py (extends common/model_new.py.j2)

    def match(self, ops: list[Op] | None, problem: Problem) -> Any | None:
        """The family's frozen spec, None when the problem is not this family's kind at all, or Unsupported naming
        the first op or argument that breaks its pattern. ops is the graph as a straight chain, or None when it is
        not one (a family that takes DAGs reads problem.gm)."""

    def context(self, spec: Any) -> dict[str, Any]:
        """Plain data for the kernel templates: the spec's values and every derived number (tiling included)."""

    def module_context(self, spec: Any, problem: Problem) -> dict[str, Any]:
        """Extra plain data for MODEL_TEMPLATE (parameters, initialization)."""

    def describe(self, spec: Any) -> list[str]:
        """How the kernels work, for the generated file's header."""

    def traffic(self, spec: Any, n: int) -> tuple[int, int]:
        """Fewest bytes moved at batch n: (forward, forward+backward), for the benchmark's memory floor."""


def check_family(module: Any) -> Any:
    """The module if it satisfies Family, else TypeError naming what is missing."""
    missing = [a for a in ("NAME", "TEMPLATES", "MODEL_TEMPLATE", "match", "context", "module_context", "describe",
                           "traffic") if not hasattr(module, a)]
    if missing or not isinstance(module, Family):
        raise TypeError(f"family module {getattr(module, '__name__', module)!r} lacks {', '.join(missing)} (kgen/family.py)")
    return module


def template_context(fields: Mapping[str, Any], derived: Mapping[str, Any]) -> dict[str, Any]:
    """A family's template context: the spec's fields and the numbers derive() computed from them. A derived key that
    shadowed a field of the same name would silently change the template (a tile named H once replaced the input
    height), so a clash is a bug in the family."""
    clash = sorted(fields.keys() & derived.keys())
    assert not clash, f"derive() keys {clash} would shadow the spec's fields of the same names in the template context"
    return {**fields, **derived}


def attr_expr(path: str) -> str:
    """Python that reads the attribute at a qualified path from self (getattr for parts that are not identifiers)."""
    expr = "self"
    for part in path.split("."):
        expr = f"{expr}.{part}" if part.isidentifier() else f"getattr({expr}, {part!r})"
    return expr


def holder_modules(paths: list[str]) -> list[tuple[str, str]]:
    """The (parent, name) of every module that holds one of the attributes at paths, parents first ("a.b.w":
    ("", "a"), ("a", "b")), in the order the paths first name them: ModelNew creates them as empty nn.Modules so its
    parameters keep Model's names (and, given in Model's order, its state_dict's order)."""
    held = dict.fromkeys(".".join(p.split(".")[: i + 1]) for p in paths for i in range(p.count(".")))
    return [(h.rpartition(".")[0], h.rpartition(".")[2]) for h in held]


def registered_tensors(model: torch.nn.Module) -> list[str]:
    """Every parameter and buffer (persistent or not) the model holds, by name, module by module as named_modules
    lists them (each module's parameters, then its buffers)."""
    return [f"{path}.{leaf}" if path else leaf for path, mod in model.named_modules()
            for table in (mod._parameters, mod._buffers) for leaf, t in table.items() if t is not None]


# Replaying Model's initialization seeds and reads the process's global generator: one replay at a time, since
# problems may be generated from several threads (each family's init replay holds this lock throughout).
REPLAY_LOCK = threading.RLock()


def conv2d_default_init(out_channels: int, in_per_group: int, kh: int, kw: int, bias: bool
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """nn.Conv2d's default parameters, drawn from the global generator as nn.Conv2d draws them: the weight
    (kaiming_uniform_, a=sqrt(5)), then the bias (uniform within 1/sqrt(fan_in))."""
    w = torch.empty(out_channels, in_per_group, kh, kw)
    torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    if not bias:
        return w, None
    bound = 1 / math.sqrt(in_per_group * kh * kw)
    return w, torch.empty(out_channels).uniform_(-bound, bound)
