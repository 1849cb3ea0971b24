"""kgen: turn a PyTorch problem file into specialized CUDA kernels.

Pipeline, one module per stage:
    problem.py  load the problem file, trace Model with torch.fx, propagate shapes on the meta device
    spec.py     match the traced graph against the template families -> a frozen spec
    render.py   render the family's Jinja2 templates with the spec baked in
    build.py    compile rendered sources with load_inline into a content-named, cached extension
                (this module's text is inlined into every generated model_new.py)
    emit.py     write generated/<problem>/model_new.py and the rendered sources beside it
"""

__version__ = "0.1.0"
