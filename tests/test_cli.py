"""The command line (--version, -h, cache clear's confirmation, one-line OSErrors), the cache root and the arch
part of the extension key, the static rules build.py's text must meet (it is inlined into every model_new.py), and the
options the benchmark scripts under tests/bench/ share."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kgen
from kgen import build, cli
from kgen.cli import app

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"kgen {kgen.__version__}\n"


@pytest.mark.parametrize("args", [[], ["generate"], ["bench"], ["cache"], ["cache", "list"], ["cache", "clear"]])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_on_every_command(args, flag):
    r = runner.invoke(app, args + [flag])
    assert r.exit_code == 0 and "Usage:" in r.output, r.output


def test_entry_point_prints_version():
    r = subprocess.run([sys.executable, "-m", "kgen", "--version"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout == f"kgen {kgen.__version__}\n", r.stderr


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    (root / "kgen_avg_pool2d_12345678").mkdir(parents=True)
    (root / "kgen_avg_pool2d_12345678" / "x.so").write_bytes(b"0" * 1000)
    (root / "kgen_avg_pool2d_12345678.lock").write_text("")
    monkeypatch.setenv("KGEN_CACHE_DIR", str(root))
    return root


def test_cache_clear_without_a_terminal_asks_for_yes(cache):
    r = runner.invoke(app, ["cache", "clear"])
    assert r.exit_code == 1 and "pass --yes" in r.output
    assert (cache / "kgen_avg_pool2d_12345678" / "x.so").exists()


def test_cache_clear_asks_on_a_terminal(cache, monkeypatch):
    monkeypatch.setattr(cli, "stdin_is_terminal", lambda: True)
    r = runner.invoke(app, ["cache", "clear"], input="n\n")
    assert r.exit_code == 1 and "Delete 1 cached extensions" in r.output and "nothing deleted" in r.output
    assert (cache / "kgen_avg_pool2d_12345678").exists()
    r = runner.invoke(app, ["cache", "clear"], input="y\n")
    assert r.exit_code == 0 and "removed 1" in r.output and not any(cache.iterdir())


@pytest.mark.parametrize("flag", ["--yes", "-y"])
def test_cache_clear_yes_deletes(cache, flag):
    assert "incomplete" in runner.invoke(app, ["cache", "list"]).output
    r = runner.invoke(app, ["cache", "clear", flag])
    assert r.exit_code == 0 and "removed 1 extensions" in r.output and not any(cache.iterdir())
    assert "is empty" in runner.invoke(app, ["cache", "clear"]).output


def test_cache_root_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("KGEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "te"))
    assert f"cache: {tmp_path / 'te' / 'kgen'} (0 extensions)" in runner.invoke(app, ["cache", "list"]).output
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "kc"))
    assert f"cache: {tmp_path / 'kc'} (0 extensions)" in runner.invoke(app, ["cache", "list"]).output
    monkeypatch.delenv("KGEN_CACHE_DIR")
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    assert build.kgen_cache_dir() == str(Path.home() / ".cache" / "kgen")


def test_bad_out_is_one_line(tmp_path):
    """--out under a file: one line naming the path and what to do, status 1, no traceback (a fresh process, so
    the real stderr is checked)."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"
    r = subprocess.run([sys.executable, "-m", "kgen", "generate", str(REPO / "kgen/problems/avg_pool2d.py"),
                        "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert r.stderr == f"kgen: error: {out / 'avg_pool2d'}: Not a directory; pass --out a folder you can create and write to\n"


def test_missing_problem_file_is_one_line(tmp_path):
    r = runner.invoke(app, ["generate", str(tmp_path / "nope.py"), "--out", str(tmp_path)])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "nope.py" in r.output


def test_os_error_line():
    exc = PermissionError(13, "Permission denied", "/x/y")
    assert cli.os_error_line(exc, "do this") == "/x/y: Permission denied; do this"


def test_arch_list_is_in_the_key(monkeypatch):
    """A set TORCH_CUDA_ARCH_LIST decides the targets (no GPU asked), hence the key; order and repeats do not."""
    monkeypatch.delenv("KGEN_FORCE_SM80", raising=False)
    keys = {}
    for value in ("9.0", "8.0", "8.0;9.0", "9.0 8.0", "9.0;8.0;9.0", "9.0+PTX"):
        monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)
        keys[value] = build.kgen_build_key("cu", "cpp", build.kgen_target_archs())
    assert keys["8.0;9.0"] == keys["9.0 8.0"] == keys["9.0;8.0;9.0"]
    assert len({keys["9.0"], keys["8.0"], keys["8.0;9.0"], keys["9.0+PTX"]}) == 4
    assert build.kgen_sm90_path() is True  # 9.0+PTX: every target is sm_90
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    assert build.kgen_sm90_path() is False  # one binary for both: the sm_80 path


def strict_rule_hits(text: str) -> list[str]:
    """KernelBench's strict bypass rules, stricter: each line cut at its first '#' and its first '//'."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].split("//", 1)[0]
        if re.search(r"\b(try|except|finally|pass)\b", line):
            hits.append(f"{n}: {line.strip()}")
    return hits


def test_build_runtime_meets_the_static_rules():
    text = (REPO / "kgen" / "build.py").read_text()
    assert strict_rule_hits(text) == []
    assert "pass" not in text.lower()  # not even inside a word: "bypass", "passes"
    for banned in (r"import\s+threading", r"multiprocessing", r"concurrent\.futures", r"Stream\s*\(",
                   r"\.wait_stream", r"\.record_stream", r"time\.\w+\s*=", r"torch\.cuda\.\w+\s*=", r"torch\.nn\.",
                   r"\bF\.", r"_make_subclass", r"\(torch\.Tensor\)"):
        assert not re.search(banned, text), banned


def test_strict_rule_check_catches_what_it_should():
    assert strict_rule_hits("x = 1  # try: pass\ny = '//' ; pass") == []
    assert len(strict_rule_hits("try:\n    f()\nfinally:\n    g()\ns = 'a pass b'\n")) == 3


@pytest.mark.parametrize("script", ["bench_conv2d_epilogue", "bench_pool"])
def test_bench_scripts_pass_their_options_to_every_run(script, monkeypatch, tmp_path):
    """CPU: each tests/bench script times every chosen problem with the shared options: --per-call (one synchronized
    call per sample, as harnesses time), --no-compile, --quick's sample counts and the CSV path."""
    import importlib

    from kgen import bench
    mod = importlib.import_module(f"tests.bench.{script}")
    calls = []
    monkeypatch.setattr(bench, "write_problems", lambda prefix, sources, jobs: [tmp_path / f"{n}.py" for n in sources])
    monkeypatch.setattr(bench, "run", lambda path, **kw: calls.append((path.stem, kw)))
    name = next(iter(mod.PROBLEMS))
    csv = tmp_path / "b.csv"
    argv = ["--quick", "--per-call", "--no-compile", "--only", name, "--csv", str(csv)]
    mod.main(argv + (["--mode", "tf32"] if script == "bench_conv2d_epilogue" else []))
    assert [c[0] for c in calls] == [name]
    kw = calls[0][1]
    assert kw["per_call"] is True and kw["with_compile"] is False and kw["csv"] == csv
    assert (kw["warmup"], kw["reps"]) == bench.samples(True)
    calls.clear()
    mod.main(["--only", name] + (["--mode", "off"] if script == "bench_conv2d_epilogue" else []))
    assert calls[0][1]["per_call"] is False and (calls[0][1]["warmup"], calls[0][1]["reps"]) == bench.samples(False)
    with pytest.raises(SystemExit, match=f"no problem named zz among .*{name}"):
        mod.main(["--only", "zz"])


@pytest.mark.parametrize("script", ["bench_conv2d_epilogue", "bench_pool"])
def test_bench_scripts_only_picks_random_draws_by_name(script, monkeypatch, tmp_path):
    """CPU: --random N --only NAME ... times just the named draws, the same problems as in the full run of N draws
    (a draw does not depend on which others run); an unknown name stops before anything runs, naming the draws."""
    import importlib

    from kgen import bench
    mod = importlib.import_module(f"tests.bench.{script}")
    written, calls = {}, []
    monkeypatch.setattr(bench, "write_problems",
                        lambda prefix, sources, jobs: written.update(sources) or [tmp_path / f"{n}.py" for n in sources])
    monkeypatch.setattr(bench, "run", lambda path, **kw: calls.append(path.stem) or "not timed here")  # a draw_line
    mode = ["--mode", "off"] if script == "bench_conv2d_epilogue" else []
    mod.main(["--random", "6", "--seed", "3", "--no-compile"] + mode)
    every = dict(written)
    assert len(every) == 6 and calls == list(every)
    pick = list(every)[4:1:-2]
    written.clear(), calls.clear()
    mod.main(["--random", "6", "--seed", "3", "--no-compile", "--only", *pick] + mode)
    assert sorted(calls) == sorted(pick) and written == {n: every[n] for n in pick}
    with pytest.raises(SystemExit, match="no draw named zz"):
        mod.main(["--random", "6", "--seed", "3", "--only", "zz"] + mode)


@pytest.mark.parametrize("args,want", [([], (5, 20)), (["--warmup", "3", "--reps", "7"], (3, 7)), (["--quick"], (2, 5))])
def test_bench_takes_the_scripts_quick_sampling(args, want, monkeypatch, tmp_path):
    """kgen bench: --warmup / --reps, or --quick for the benchmark scripts' short sampling (bench.samples(True))."""
    from kgen import bench

    calls = []
    monkeypatch.setattr(bench, "run", lambda problem, **kw: calls.append(kw))
    r = runner.invoke(app, ["bench", str(tmp_path / "p.py"), *args])
    assert r.exit_code == 0, r.output
    assert [(kw["warmup"], kw["reps"]) for kw in calls] == [want]
    assert bench.samples(True) == (2, 5)
