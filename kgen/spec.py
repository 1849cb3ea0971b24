"""Stage 2: match the traced graph against the registered template families and build a frozen spec.

``kgen.ops`` first normalizes the fx graph into a chain of ``Op``s (module, function and method forms of one op
become one kind with PyTorch's defaults applied); a graph that is not a straight chain (a value used twice, as in
``y * torch.sigmoid(y)``) gives None instead, and families that take DAGs read ``problem.gm`` themselves. Each family
in ``kgen.families.FAMILIES`` then looks at the problem: ``match`` returns its spec, None when the problem is not its
kind at all, or raises ``Unsupported`` naming the first op that breaks its pattern.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import torch

from kgen.errors import Unsupported
from kgen.families import FAMILIES
from kgen.family import Family
from kgen.ops import chain, describe_unsupported
from kgen.pointwise import Program
from kgen.problem import Problem


def _plain(v: Any) -> Any:
    """A spec field as plain JSON-able data: programs and dtypes by their text, nested dataclasses as dicts."""
    if isinstance(v, (Program, torch.dtype)):
        return str(v)
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    return v


def spec_dict(spec: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)}


def spec_hash(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec_dict(spec), sort_keys=True).encode()).hexdigest()


def match(problem: Problem) -> tuple[Family, Any]:
    """(family, spec) for the problem, or Unsupported with the first op no family takes."""
    try:
        ops, not_chain = chain(problem), None
    except Unsupported as exc:
        ops, not_chain = None, exc
    for family in FAMILIES:
        spec = family.match(ops, problem)
        if spec is not None:
            return family, spec
    if ops is None:
        raise not_chain
    known = ", ".join(f.NAME for f in FAMILIES)
    raise Unsupported(f"{describe_unsupported(ops[0])}: no kgen family starts with it (families: {known})")
