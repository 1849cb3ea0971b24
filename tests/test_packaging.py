"""A non-editable install works: build a wheel from a copy of the source tree, install it into a temporary folder and
run `kgen generate` there, away from the checkout (so the repository's templates/ cannot be found); the files equal
an in-repo render."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kgen import emit
from kgen.cli import bundled_problems

REPO = Path(__file__).resolve().parents[1]


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{args}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder holding the installed wheel, the wheel's file names)."""
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"  # a copy: the build writes build/ and *.egg-info, which must not land in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("kgen", "templates"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "wheel")])
    (wheel,) = (tmp / "wheel").glob("kgen-*.whl")
    run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp / "site"), str(wheel)])
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    return tmp / "site", names


def kgen_in(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site))
    return run([sys.executable, "-m", "kgen", *args], cwd=cwd, env=env)


def test_wheel_ships_every_template_and_problem(installed):
    _, names = installed
    for path in (REPO / "templates").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert f"kgen/templates/{path.relative_to(REPO / 'templates').as_posix()}" in names
    for path in bundled_problems():
        assert f"kgen/problems/{path.name}" in names


def test_installed_kgen_uses_its_own_templates(installed, tmp_path):
    site, _ = installed
    r = run([sys.executable, "-c", "import kgen.render as r; print(r.TEMPLATE_DIR)"], cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(site)))
    assert Path(r.stdout.strip()) == site / "kgen" / "templates"
    assert kgen_in(site, tmp_path, "--version").stdout == "kgen " + __import__("kgen").__version__ + "\n"


def test_installed_generate_equals_in_repo_render(installed, tmp_path):
    """`kgen generate` (the bundled problems) and `kgen generate FILE --out DIR` from the installed wheel."""
    site, _ = installed
    kgen_in(site, tmp_path, "generate", "--out", "bundled")
    for path in bundled_problems():
        gen = emit.generate(path, f"kgen/problems/{path.name}")
        for fname, text in gen.files.items():
            assert (tmp_path / "bundled" / gen.problem / fname).read_text() == text, fname
    problem = tmp_path / "my_pool.py"
    shutil.copy(REPO / "kgen" / "problems" / "avg_pool2d.py", problem)
    kgen_in(site, tmp_path, "generate", "my_pool.py", "--out", "given")
    gen = emit.generate(problem, "my_pool.py")
    for fname, text in gen.files.items():
        assert (tmp_path / "given" / "my_pool" / fname).read_text() == text, fname
