"""kgen's command line (typer): generate, bench, cache.

Every command takes -h/--help. A problem the user can fix (a KgenError, an OSError such as an unwritable --out) is
printed as one line, ``kgen: error: ...``, with exit status 1 and no traceback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator, List, Optional

import typer

import kgen
from kgen.errors import KgenError

CONTEXT = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, no_args_is_help=True, context_settings=CONTEXT,
                  help="Turn PyTorch problem files into specialized CUDA kernels.")
cache_app = typer.Typer(no_args_is_help=True, context_settings=CONTEXT,
                        help="Inspect or clear the compiled-extension cache ($KGEN_CACHE_DIR, else "
                             "$TORCH_EXTENSIONS_DIR/kgen, else ~/.cache/kgen).")
app.add_typer(cache_app, name="cache")

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "problems"
CACHE_HINT = "set KGEN_CACHE_DIR to a folder you can write to"


def bundled_problems() -> list[Path]:
    return sorted(p for p in BUNDLED_DIR.glob("*.py") if p.name != "__init__.py")


def _fail(message: str) -> None:
    typer.echo(f"kgen: error: {message}", err=True)
    raise typer.Exit(code=1)


def os_error_line(exc: OSError, hint: str) -> str:
    """'<path>: <reason>; <hint>' for an OSError (the path is the one the OS named, if any)."""
    path = exc.filename if exc.filename is not None else exc.filename2
    reason = exc.strerror or str(exc)
    return f"{path}: {reason}; {hint}" if path is not None else f"{reason}; {hint}"


@contextlib.contextmanager
def user_errors(hint: str) -> Iterator[None]:
    """Turn the errors a user can act on into one line and exit status 1; ``hint`` says what to do on an OSError."""
    try:
        yield
    except (typer.Exit, typer.Abort):  # click's own exits subclass RuntimeError: let them through untouched
        raise
    except KgenError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(os_error_line(exc, hint))
    except RuntimeError as exc:  # the build runtime's own one-line errors (GPU too old, unusable cache folder)
        if not str(exc).startswith("kgen: "):
            raise
        _fail(str(exc)[len("kgen: "):])


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kgen {kgen.__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print kgen's version and exit."),
) -> None:
    """Turn PyTorch problem files into specialized CUDA kernels."""


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
    with user_errors("check that the problem file exists and is readable"):
        gens = [emit.generate(path, label) for path, label in items]  # all rendered before anything is written
    with user_errors("pass --out a folder you can create and write to"):
        for gen in gens:
            emit.write(gen, out / gen.problem, force=force)
            typer.echo(f"{out / gen.problem / emit.MODEL_FILE}  [{gen.family}: {gen.name}]")


@app.command()
def bench(
    problem: Path = typer.Argument(..., help="Problem file to build, check once, and time."),
    warmup: int = typer.Option(5, help="Warm-up runs per measurement."),
    reps: int = typer.Option(20, help="Timed runs per measurement (median reported)."),
    quick: bool = typer.Option(False, "--quick", help="2 warm-up runs and 5 timed runs per measurement (in place of "
                               "--warmup and --reps), as the benchmark scripts' --quick."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Skip the torch.compile baseline."),
    csv: Optional[Path] = typer.Option(None, help="Append the results as rows to this CSV file."),
    per_call: bool = typer.Option(False, "--per-call", help="Also time one call per sample (as KernelBench times), "
                                  "beside the back-to-back timing."),
    tf32: bool = typer.Option(False, "--tf32", help="Time every provider with TF32 allowed (cudnn/matmul allow_tf32: "
                              "PyTorch's default for convolutions); default: TF32 off."),
) -> None:
    """Build, check correctness once, and time eager, torch.compile and kgen (forward, forward+backward)."""
    from kgen import bench as bench_mod

    if quick:
        warmup, reps = bench_mod.samples(True)
    with user_errors(f"check the path (--csv must be a writable file; for the build cache, {CACHE_HINT})"):
        bench_mod.run(problem, warmup=warmup, reps=reps, with_compile=not no_compile, csv=csv, per_call=per_call,
                      tf32=tf32)


def _cache_entries(root: Path) -> list[Path]:
    return sorted(root.glob("kgen_*")) if root.is_dir() else []


@cache_app.command("list")
def cache_list() -> None:
    """List cached extensions with their size."""
    from kgen.build import kgen_cache_dir

    root = Path(kgen_cache_dir())
    with user_errors(CACHE_HINT):
        entries = [p for p in _cache_entries(root) if p.is_dir()]
        typer.echo(f"cache: {root} ({len(entries)} extensions)")
        for p in entries:
            size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            built = "built" if (p / "kgen_manifest.txt").exists() else "incomplete"
            typer.echo(f"{p.name}  {size / 1e6:.1f} MB  {built}")


def stdin_is_terminal() -> bool:
    """Whether a confirmation question can be asked (tests replace this)."""
    return sys.stdin is not None and sys.stdin.isatty()


@cache_app.command("clear")
def cache_clear(
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete without asking."),
) -> None:
    """Delete every cached extension (they are rebuilt on next import); asks first unless --yes."""
    from kgen.build import kgen_cache_dir

    root = Path(kgen_cache_dir())
    with user_errors(CACHE_HINT):
        entries = _cache_entries(root)
        n = sum(p.is_dir() for p in entries)
        if not entries:
            typer.echo(f"cache: {root} is empty")
            return
        if not yes:
            if not stdin_is_terminal():
                _fail(f"cache clear: no terminal to confirm deleting {n} extensions under {root}; "
                      "pass --yes to delete them")
            if not typer.confirm(f"Delete {n} cached extensions under {root}?", default=False):
                typer.echo("cache: nothing deleted")
                raise typer.Exit(code=1)
        for p in entries:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        typer.echo(f"cache: removed {n} extensions from {root}")


def main() -> None:  # pragma: no cover - console entry
    app(prog_name=os.path.basename(sys.argv[0]) or "kgen")
