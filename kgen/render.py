"""Stage 3: render Jinja2 templates (files under templates/) with a spec's plain data baked in.

One Environment with StrictUndefined for the whole program: a missing variable is an error, never an empty string.
Template errors are re-raised naming the template file and line.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import jinja2

from kgen.errors import KgenError


def _template_dir() -> Path:
    """kgen/templates/ in an installed wheel (the repository's templates/ shipped as package data), else the
    checkout's top-level templates/ (a source tree or an editable install)."""
    packaged = Path(__file__).resolve().parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "templates"


TEMPLATE_DIR = _template_dir()


class TemplateError(KgenError):
    pass


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    if not TEMPLATE_DIR.is_dir():
        raise KgenError(f"kgen's templates are missing ({TEMPLATE_DIR}); reinstall kgen (`pip install .` or `pip install -e .` from its checkout)")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["cfloat"] = cfloat
    env.filters["cbool"] = lambda v: "true" if v else "false"
    env.filters["pyrepr"] = repr
    env.filters["pystr"] = pystr
    return env


def cfloat(v: float) -> str:
    """A float as an exact C float literal (hex-free, round-trips through repr)."""
    text = repr(float(v))
    if "e" not in text and "." not in text and "inf" not in text and "nan" not in text:
        text += ".0"
    return text + "f"


def pystr(text: str) -> str:
    """A Python literal for text: a raw triple-quoted string when that is exact, else repr()."""
    if "'''" in text or text.endswith("\\"):
        return repr(text)
    return "r'''" + text + "'''"


def render(template: str, context: dict[str, Any]) -> str:
    try:
        return environment().get_template(template).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{exc.filename or template}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template not found: {exc.name} (looked in {TEMPLATE_DIR})") from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{template}:{_template_line(exc)}: {exc.message}") from None


def _template_line(exc: BaseException) -> str:
    """The line of the innermost template frame in the traceback (Jinja maps compiled frames to template lines)."""
    tb, line = exc.__traceback__, "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith((".j2", ".cuh", ".h")):
            line = str(tb.tb_lineno)
        tb = tb.tb_next
    return line


def short_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:8]


def render_named(family: str, templates: dict[str, str], context: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Render a family's templates; name by content: kgen_<family>_<sha8 of the sources rendered unnamed>.

    Returns (name, {output file name: text}); every occurrence of the name in the sources comes from {{ name }}.
    """
    base = f"kgen_{family}"
    draft = {out: render(t, {**context, "name": base}) for out, t in templates.items()}
    name = f"{base}_{short_hash(*(draft[k] for k in sorted(draft)))}"
    return name, {out: render(t, {**context, "name": name}) for out, t in templates.items()}
