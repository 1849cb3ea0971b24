"""The registry of template families, in matching order (each satisfies kgen.family.Family)."""

from __future__ import annotations

from kgen.families import conv2d_avgpool_act_reduce, conv2d_epilogue, pool
from kgen.family import Family, check_family

FAMILIES: tuple[Family, ...] = tuple(check_family(m) for m in (pool, conv2d_avgpool_act_reduce, conv2d_epilogue))


def by_name(name: str) -> Family:
    for f in FAMILIES:
        if f.NAME == name:
            return f
    raise KeyError(f"no kgen family named {name!r} (families: {', '.join(f.NAME for f in FAMILIES)})")
