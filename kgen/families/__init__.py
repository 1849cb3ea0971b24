"""The template families, in matching order. Each family module exposes the same small interface:

    NAME: str                                  family name (same in templates/, tests/, benchmarks)
    TEMPLATES: dict[str, str]                  output file name -> template, rendered with context(spec)
    MODEL_TEMPLATE: str                        template of model_new.py (extends common/model_new.py.j2)
    Spec                                       frozen dataclass of concrete shapes and parameters
    match(ops, problem) -> Spec | None         None: not this family; raises Unsupported on a partial match
    context(spec) -> dict                      plain data for the kernel templates (derived tiling included)
    module_context(spec, problem) -> dict      extra plain data for MODEL_TEMPLATE (parameters, init)
    describe(spec) -> list[str]                how the kernels work, for the generated file's header
"""

from types import ModuleType

from kgen.families import avg_pool2d, conv2d_avgpool_act_reduce

FAMILIES: tuple[ModuleType, ...] = (avg_pool2d, conv2d_avgpool_act_reduce)
