"""Stage 2: match the traced graph against the registered template families and build a frozen spec.

``kgen.ops`` first normalizes the fx graph into a chain of ``Op``s (module, function and method forms of one op
become one kind with PyTorch's defaults applied). Each family in ``kgen.families.FAMILIES`` then looks at the chain:
``match`` returns its spec, None when the chain is not its kind at all, or raises ``Unsupported`` naming the first op
that breaks its pattern.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from kgen.errors import Unsupported
from kgen.families import FAMILIES
from kgen.family import Family
from kgen.ops import chain, describe_unsupported
from kgen.problem import Problem


def spec_dict(spec: Any) -> dict[str, Any]:
    return {k: (str(v) if k == "dtype" else v) for k, v in dataclasses.asdict(spec).items()}


def spec_hash(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec_dict(spec), sort_keys=True).encode()).hexdigest()


def match(problem: Problem) -> tuple[Family, Any]:
    """(family, spec) for the problem, or Unsupported with the first op no family takes."""
    ops = chain(problem)
    for family in FAMILIES:
        spec = family.match(ops, problem)
        if spec is not None:
            return family, spec
    known = ", ".join(f.NAME for f in FAMILIES)
    raise Unsupported(f"{describe_unsupported(ops[0])}: no kgen family starts with it (families: {known})")
