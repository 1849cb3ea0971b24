"""Stage 5: write generated/<problem>/model_new.py and the rendered kernel sources beside it.

Everything is rendered in memory first; files are then written atomically (temp file + rename), so a failure leaves
nothing half-written. model_new.py records a checksum of all the files it was written with: regenerating over a
hand-edited output refuses unless ``force``.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kgen
from kgen import build
from kgen.errors import KgenError, Unsupported
from kgen.problem import AST_LOCK, Problem, load_problem
from kgen.render import render, render_named
from kgen.spec import match, spec_dict, spec_hash

MODEL_FILE = "model_new.py"
CHECKSUM_RE = re.compile(r"kgen-checksum: ([0-9a-f]{64})")
CHECKSUM_PLACEHOLDER = "0" * 64


@dataclass
class Generated:
    problem: str
    family: str
    name: str  # kgen_<family>_<sha8>: TORCH_LIBRARY namespace and kernel prefix
    files: dict[str, str]  # file name -> text


def _is_literal(v: Any) -> bool:
    try:
        with AST_LOCK:
            return ast.literal_eval(repr(v)) == v
    except (ValueError, SyntaxError, TypeError):
        return False


def signature_context(problem: Problem) -> dict[str, Any]:
    params = problem.init_signature
    if len(problem.init_args) > len(params):
        raise KgenError(f"{problem.path.name}: get_init_inputs() gives {len(problem.init_args)} arguments but Model.__init__ takes {len(params)}")
    parts, bound = [], {}
    for i, (pname, default) in enumerate(params):
        if default is inspect.Parameter.empty:
            parts.append(pname)
        else:
            if not _is_literal(default):
                raise Unsupported(f"Model.__init__'s default {pname}={default!r} is not a Python literal; kgen mirrors the constructor signature in ModelNew")
            parts.append(f"{pname}={default!r}")
        if i < len(problem.init_args):
            bound[pname] = problem.init_args[i]
        elif default is not inspect.Parameter.empty:
            bound[pname] = default
    expected = {k: v for k, v in bound.items() if _is_literal(v)}
    return {
        "signature": "".join(", " + p for p in parts),
        "init_expected": expected,
        "init_locals": "{" + ", ".join(f"{k!r}: {k}" for k in expected) + "}",
    }


def runtime_code() -> str:
    return Path(inspect.getsourcefile(build)).read_text().rstrip("\n")


def checksum(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for fname in sorted(files):
        text = files[fname]
        if fname == MODEL_FILE:
            text = CHECKSUM_RE.sub("kgen-checksum: " + CHECKSUM_PLACEHOLDER, text, count=1)
        h.update(fname.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def generate_problem(problem: Problem, problem_label: str) -> Generated:
    family, spec = match(problem)
    ctx = {**family.context(spec), "problem": problem.name}
    name, sources = render_named(family.NAME, family.TEMPLATES, ctx)
    model_ctx = {
        **ctx,
        **signature_context(problem),
        **family.module_context(spec, problem),
        "name": name,
        "version": kgen.__version__,
        "problem_file": problem_label,
        "family": family.NAME,
        "spec_hash": spec_hash(spec),
        "spec_lines": [f"{k} = {v!r}" for k, v in spec_dict(spec).items()],
        "description": family.describe(spec),
        "problem_code": problem.module_code_without_model().rstrip("\n"),
        "runtime_code": runtime_code(),
        "cuda_source": sources["kernel.cu"],
        "cpp_source": sources["binding.cpp"],
        "checksum": CHECKSUM_PLACEHOLDER,
    }
    files = {MODEL_FILE: render(family.MODEL_TEMPLATE, model_ctx), **sources}
    compile(files[MODEL_FILE], MODEL_FILE, "exec")  # a template bug must not reach disk
    files[MODEL_FILE] = files[MODEL_FILE].replace(CHECKSUM_PLACEHOLDER, checksum(files), 1)
    return Generated(problem.name, family.NAME, name, files)


def generate(problem_path: str | Path, problem_label: str | None = None) -> Generated:
    problem = load_problem(problem_path)
    return generate_problem(problem, problem_label or str(problem_path))


def hand_edited(out_dir: Path, names: list[str]) -> list[str]:
    """Files of a previous render in out_dir that no longer match the checksum it recorded."""
    model = out_dir / MODEL_FILE
    if not model.exists():
        return []
    text = model.read_text()
    m = CHECKSUM_RE.search(text)
    if m is None:
        return [MODEL_FILE]
    old = {MODEL_FILE: text}
    for n in names:
        if n != MODEL_FILE and (out_dir / n).exists():
            old[n] = (out_dir / n).read_text()
    if checksum(old) == m.group(1):
        return []
    return sorted(old)


def write(gen: Generated, out_dir: Path, force: bool = False) -> list[Path]:
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        edited = hand_edited(out_dir, list(gen.files))
        if edited:
            raise KgenError(f"{out_dir}: {', '.join(edited)} changed since kgen wrote them (checksum mismatch); "
                            "rerun with --force to overwrite, or move your edits elsewhere")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in gen.files.items():
        target = out_dir / fname
        fd, tmp = tempfile.mkstemp(prefix=f".{fname}.", dir=out_dir)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        written.append(target)
    return written
