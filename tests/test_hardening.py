"""Hardening, one shared harness over every family: bad inputs, layouts, NaN/Inf, partial gradients, and the
build cache (killed builds, concurrent imports, corrupted entries, compiler errors)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.families import all_families, setup_problem
from tests.helpers import REPO

# One small float32 problem per registered family (each family's tests/test_<name>.py exports HARDENING).
FAMILY_PROBLEMS = {fc.name: fc.hardening for fc in all_families()}
FAMS = sorted(FAMILY_PROBLEMS)


def setup(family, seed=0):
    return setup_problem(FAMILY_PROBLEMS[family], seed=seed)


def run_both(model, new, x, grads=True):
    # The reference runs on a contiguous copy: PyTorch 2.11's own CUDA avg_pool2d backward is wrong for
    # channels_last input with padding (max error 0.8 against a float64 CPU reference; tests/dev/diag_channels_last.py).
    xr = x.detach().contiguous().requires_grad_(x.requires_grad)
    ref, out = model(xr), new(x)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4, equal_nan=True)
    if grads:
        g = torch.randn_like(ref)
        ref.backward(g)
        out.backward(g)
        if x.requires_grad:
            torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
        for (name, p), (_, pr) in zip(new.named_parameters(), model.named_parameters()):
            if pr.requires_grad:
                torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4)
            else:
                assert p.grad is None, name
    return out


# --------------------------------------------------------------------------------------------- bad inputs (GPU)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_cpu_input_names_the_device(family):
    model, new, shape = setup(family)
    with pytest.raises(RuntimeError, match=r"input x must be a CUDA tensor, got device cpu; move it with \.cuda\(\)"):
        new(torch.rand(shape))


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
@pytest.mark.parametrize("dtype,name", [(torch.float64, "float64"), (torch.float16, "float16"), (torch.int32, "int32")])
def test_wrong_dtype_names_expected_and_received(family, dtype, name):
    model, new, shape = setup(family)
    x = (torch.rand(shape, device="cuda") * 10).to(dtype)
    with pytest.raises(RuntimeError, match=f"input x must be float32, got {name}"):
        new(x)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
@pytest.mark.parametrize("change", ["rank", "channels", "height", "width"])
def test_wrong_shape_names_expected_and_received(family, change):
    model, new, shape = setup(family)
    n, c, h, w = shape
    bad = {"rank": (c, h, w), "channels": (n, c + 1, h, w), "height": (n, c, h + 3, w), "width": (n, c, h, w - 2)}[change]
    want = f"[N, {c}, {h}, {w}]"
    with pytest.raises(RuntimeError, match=r"has shape \[" + ", ".join(map(str, bad)) + r"\] but this module was generated for "
                       + want.replace("[", r"\[").replace("]", r"\]") + r".*regenerate with `kgen generate`"):
        new(torch.rand(bad, device="cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_non_contiguous_and_channels_last_inputs_are_correct(family):
    model, new, (n, c, h, w) = setup(family)
    transposed = torch.rand(n, c, w, h, device="cuda").transpose(2, 3).requires_grad_(True)
    assert not transposed.is_contiguous()
    run_both(model, new, transposed)
    model.zero_grad(), new.zero_grad()
    cl = torch.rand(n, c, h, w, device="cuda").to(memory_format=torch.channels_last).requires_grad_(True)
    run_both(model, new, cl)
    sliced = torch.rand(n, c + 2, h, w + 5, device="cuda")[:, 1:-1, :, 3:-2]
    run_both(model, new, sliced, grads=False)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_batch_sizes_including_zero(family):
    model, new, (n, c, h, w) = setup(family)
    run_both(model, new, torch.rand(n + 3, c, h, w, device="cuda", requires_grad=True))
    x0 = torch.rand(0, c, h, w, device="cuda", requires_grad=True)
    out = new(x0)
    assert out.shape == model(x0).shape
    out.sum().backward()
    assert x0.grad.shape == x0.shape


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_nan_and_inf_propagate_as_in_pytorch(family):
    model, new, (n, c, h, w) = setup(family)
    x = torch.rand(n, c, h, w, device="cuda")
    x[0, 0, 1, 1] = float("nan")
    x[-1, -1, h // 2, w // 2] = float("inf")
    x[-1, 0, h - 2, 3] = float("-inf")
    out = run_both(model, new, x, grads=False)
    assert torch.isnan(out).any() or torch.isinf(out).any()


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_gradients_for_only_some_inputs(family):
    model, new, (n, c, h, w) = setup(family)
    for p in list(model.parameters()) + list(new.parameters()):
        p.requires_grad_(False)
    run_both(model, new, torch.rand(n, c, h, w, device="cuda", requires_grad=True))  # x only
    if list(new.parameters()):
        for p in list(model.parameters()) + list(new.parameters()):
            p.requires_grad_(True)
        run_both(model, new, torch.rand(n, c, h, w, device="cuda"))  # parameters only; x.grad never made


# ------------------------------------------------------------------------------------------- build cache (GPU)


def fresh_module(tmp_path: Path, source_edit=None) -> Path:
    """A generated module file for a small problem, optionally with its CUDA source edited."""
    import hashlib

    from kgen import emit
    from tests.helpers import write_problem

    gen = emit.generate(write_problem(FAMILY_PROBLEMS[FAMS[0]]))
    text = gen.files["model_new.py"]
    if source_edit is not None:
        text = source_edit(text)
    path = tmp_path / f"m_{hashlib.sha256(text.encode()).hexdigest()[:8]}.py"
    path.write_text(text)
    return path


def spawn(path: Path, cache: Path) -> subprocess.Popen:
    code = f"import torch; exec(open({str(path)!r}).read(), {{'__name__': 'x'}}); print('loaded')"
    return subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, KGEN_CACHE_DIR=str(cache)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def assert_loads(p: subprocess.Popen) -> None:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "loaded" in out, err[-3000:]


def builds(cache: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in cache.glob("kgen_*/kgen_builds.log"))


@pytest.mark.gpu
def test_killed_build_then_fresh_import_rebuilds(tmp_path):
    path, cache = fresh_module(tmp_path), tmp_path / "cache"
    p = spawn(path, cache)
    deadline = time.time() + 60
    while not list(cache.glob("kgen_*/*.cu")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # inside the compiler now
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert_loads(spawn(path, cache))
    assert builds(cache) == 2


@pytest.mark.gpu
def test_concurrent_imports_compile_once(tmp_path):
    path, cache = fresh_module(tmp_path), tmp_path / "cache"
    procs = [spawn(path, cache) for _ in range(2)]
    for p in procs:
        assert_loads(p)
    assert builds(cache) == 1


@pytest.mark.gpu
def test_truncated_cache_entry_is_rebuilt_not_loaded(tmp_path):
    path, cache = fresh_module(tmp_path), tmp_path / "cache"
    assert_loads(spawn(path, cache))
    (so,) = cache.glob("kgen_*/kgen_*.so")
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    assert_loads(spawn(path, cache))
    assert builds(cache) == 2


@pytest.mark.gpu
def test_build_failure_shows_compiler_errors_and_source_path(tmp_path):
    path = fresh_module(tmp_path, lambda t: t.replace("namespace {\n", "namespace {\nthis is not C++;\n", 1))
    p = spawn(path, tmp_path / "cache")
    out, err = p.communicate(timeout=300)
    assert p.returncode != 0
    assert "Error building extension 'kgen_" in err and "cuda.cu" in err and "this is not C++" in err, err[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMS)
def test_unrequested_gradients_cost_no_extra_kernels(family):
    """Backward for x alone launches no more kgen kernels than backward for everything (a family with parameters
    skips its weight-gradient reduction)."""
    from torch.profiler import ProfilerActivity, profile

    model, new, (n, c, h, w) = setup(family)

    def kgen_kernels(x_grad: bool, param_grad: bool) -> int:
        for p in new.parameters():
            p.requires_grad_(param_grad)
        x = torch.rand(n, c, h, w, device="cuda", requires_grad=x_grad)
        out = new(x)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type.name == "CUDA" and "kgen" in e.name)

    everything = kgen_kernels(True, True)
    assert 1 <= kgen_kernels(True, False) <= everything
    if list(new.parameters()):
        assert kgen_kernels(True, False) < everything


# ------------------------------------------------------------------------------------ error messages (no GPU)

# What a TORCH_CHECK message argument may be: string literals, the problem's and the check's names, and calls that
# return strings. A number streamed into the message (c10::str's ostream path) crashed the process with a segfault on
# the device (H100, torch 2.11.0+cu130: the fixed-batch refusal `"got ", c.x.size(0)` segfaulted at every batch but the
# traced one, while the messages built by std::to_string printed), so numbers go through std::to_string.
MESSAGE_NAMES = {"kProblem", "problem", "what", "kernel"}
MESSAGE_CALLS = ("std::to_string(", "std::string(", "shape_str(", "want_str(", "dtype_name(", "kgen_glue::shape_str(",
                 "kgen_glue::want_str(", "kgen_glue::dtype_name(", "cudaGetErrorString(", "cudaGetErrorName(")


def _check_calls(text: str):
    """The argument lists of every TORCH_CHECK(...) in text, split at top-level commas."""
    for m in re.finditer(r"\bTORCH_CHECK\(", text):
        depth, i, args, start, quote = 1, m.end(), [], m.end(), False
        while depth:
            ch = text[i]
            if ch == '"' and text[i - 1] != "\\":
                quote = not quote
            elif not quote and ch in "([{":
                depth += 1
            elif not quote and ch in ")]}":
                depth -= 1
            elif not quote and ch == "," and depth == 1:
                args.append(text[start:i].strip())
                start = i + 1
            i += 1
        args.append(text[start:i - 1].strip())
        yield args


def _message_arg_ok(arg: str) -> bool:
    return (re.fullmatch(r'("([^"\\]|\\.)*"\s*)+', arg) is not None or arg in MESSAGE_NAMES
            or arg.startswith(MESSAGE_CALLS) or re.fullmatch(r"[\w.>()-]+\.str\(\)", arg) is not None)


def test_error_messages_format_numbers_as_strings():
    sources = [p for p in (REPO / "templates").rglob("*") if p.suffix in (".j2", ".h", ".cuh")]
    checks = [(p.name, args) for p in sources for args in _check_calls(p.read_text())]
    assert len(checks) >= 15  # every family's binding and the shared glue
    bad = [(name, arg) for name, args in checks for arg in args[1:] if not _message_arg_ok(arg)]
    assert bad == []
    assert not _message_arg_ok("c.x.size(0)") and not _message_arg_ok("saved.size()")  # what the rule is for
