"""kgen's command line (typer): generate, bench, cache."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import typer

from kgen.errors import KgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Turn PyTorch problem files into specialized CUDA kernels.")
cache_app = typer.Typer(no_args_is_help=True, help="Inspect or clear the compiled-extension cache ($KGEN_CACHE_DIR).")
app.add_typer(cache_app, name="cache")

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "problems"


def bundled_problems() -> list[Path]:
    return sorted(p for p in BUNDLED_DIR.glob("*.py") if p.name != "__init__.py")


def _fail(exc: KgenError) -> None:
    typer.echo(f"kgen: error: {exc}", err=True)
    raise typer.Exit(code=1)


@app.command()
def generate(
    problems: Optional[List[Path]] = typer.Argument(None, help="Problem files; default: every bundled problem."),
    out: Path = typer.Option(Path("generated"), "--out", "-o", help="Output folder; each problem goes to OUT/<file stem>/."),
    force: bool = typer.Option(False, "--force", help="Overwrite generated files even if they were edited by hand."),
) -> None:
    """Render problem files into OUT/<problem>/model_new.py plus the kernel sources beside it (no GPU needed)."""
    from kgen import emit

    if problems:
        items = [(p, str(p)) for p in problems]
    else:
        items = [(p, f"kgen/problems/{p.name}") for p in bundled_problems()]
    try:
        gens = [emit.generate(path, label) for path, label in items]  # all rendered before anything is written
        for gen in gens:
            emit.write(gen, out / gen.problem, force=force)
            typer.echo(f"{out / gen.problem / emit.MODEL_FILE}  [{gen.family}: {gen.name}]")
    except KgenError as exc:
        _fail(exc)


@app.command()
def bench(
    problem: Path = typer.Argument(..., help="Problem file to build, check once, and time."),
    warmup: int = typer.Option(5, help="Warm-up runs per measurement."),
    reps: int = typer.Option(20, help="Timed runs per measurement (median reported)."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip the torch.compile baseline."),
    csv: Optional[Path] = typer.Option(None, help="Append the results as rows to this CSV file."),
) -> None:
    """Build, check correctness once, and time eager, torch.compile and kgen (forward, forward+backward)."""
    from kgen import bench as bench_mod

    try:
        bench_mod.run(problem, warmup=warmup, reps=reps, with_compile=not no_compile, csv=csv)
    except KgenError as exc:
        _fail(exc)


@cache_app.command("list")
def cache_list() -> None:
    """List cached extensions with their size."""
    from kgen.build import kgen_cache_dir

    root = Path(kgen_cache_dir())
    entries = sorted(p for p in root.glob("kgen_*") if p.is_dir()) if root.is_dir() else []
    typer.echo(f"cache: {root} ({len(entries)} extensions)")
    for p in entries:
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        built = "built" if (p / "kgen_manifest.txt").exists() else "incomplete"
        typer.echo(f"{p.name}  {size / 1e6:.1f} MB  {built}")


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every cached extension (they are rebuilt on next import)."""
    from kgen.build import kgen_cache_dir

    root = Path(kgen_cache_dir())
    if not root.is_dir():
        typer.echo(f"cache: {root} is empty")
        return
    n = 0
    for p in root.glob("kgen_*"):
        if p.is_dir():
            shutil.rmtree(p)
            n += 1
        else:
            p.unlink()
    typer.echo(f"cache: removed {n} extensions from {root}")


def main() -> None:  # pragma: no cover - console entry
    app(prog_name=os.path.basename(sys.argv[0]) or "kgen")
