"""Pipeline, CLI and generated-module behaviour that needs no GPU."""

import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from kgen import emit
from kgen.cli import app, bundled_problems
from tests.helpers import REPO, avg_pool_problem, generate_module, write_problem

runner = CliRunner()


def test_generate_reproduces_committed_outputs_byte_for_byte(tmp_path):
    """Snapshot: `kgen generate` (no arguments) renders exactly the committed generated/ tree.
    After an intended change, update it with `kgen generate` from the repository root and commit."""
    result = runner.invoke(app, ["generate", "--out", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    committed = REPO / "generated"
    names = sorted(p.stem for p in bundled_problems())
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    for name in names:
        fresh = sorted(f.name for f in (tmp_path / name).iterdir())
        assert fresh == sorted(f.name for f in (committed / name).iterdir()), name
        for f in fresh:
            assert (tmp_path / name / f).read_bytes() == (committed / name / f).read_bytes(), f"{name}/{f} is stale: run `kgen generate`"


def test_generate_given_files_into_out_dir_and_python_dash_m(tmp_path):
    prob = write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2)), name="tiny_pool")
    r = subprocess.run([sys.executable, "-m", "kgen", "generate", str(prob), "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "tiny_pool").iterdir()) == ["binding.cpp", "kernel.cu", "model_new.py"]


def test_emitting_twice_is_identical_and_names_follow_content(tmp_path):
    a = emit.generate(write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2))))
    b = emit.generate(write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2))))
    c = emit.generate(write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=3))))
    assert a.files == b.files and a.name == b.name
    assert c.name != a.name and c.name.startswith("kgen_pool_") and len(c.name) == len("kgen_pool_") + 8
    assert f"{a.name}_fwd" in a.files["kernel.cu"] and f"TORCH_LIBRARY({a.name}" in a.files["binding.cpp"]


def test_generated_text_alone_execs_without_gpu_and_says_so_at_forward():
    ns = generate_module(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2)))
    assert ns["get_init_inputs"]() == [2] and ns["get_inputs"]()[0].shape == (2, 3, 16, 16)
    model = ns["ModelNew"](*ns["get_init_inputs"]())
    assert "__file__" not in ns
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA GPU"):
            model(torch.rand(2, 3, 16, 16))


def test_generated_module_imports_no_kgen_and_uses_no_torch_compute():
    text = emit.generate(write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2)))).files["model_new.py"]
    import re

    assert not re.search(r"^\s*(import kgen|from kgen)", text, re.M) and "__file__" not in text
    assert "\n    pass\n" not in text and "except" not in text.split("# ---- kgen runtime")[1]
    for banned in ("F.avg_pool2d(", "nn.AvgPool2d(", "torch.sigmoid(", "torch.sum("):
        assert banned not in text.split("# ---- kgen runtime")[1], banned


def test_constructor_signature_mirrors_model_and_checks_arguments():
    ns = generate_module(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2, stride=1, padding=1)))
    ns["ModelNew"](2, 1, 1)
    ns["ModelNew"](kernel_size=2, stride=1, padding=1)
    with pytest.raises(ValueError, match="stride=1, got 2"):
        ns["ModelNew"](2, 2, 1)


@pytest.mark.parametrize("body,message", [
    ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x)\n        return x\n", "syntax error"),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n", "get_init_inputs"),
    ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        raise ValueError('boom')\n"
     "def get_inputs():\n    return [torch.rand(1, 2, 8, 8)]\ndef get_init_inputs():\n    return []\n", "ValueError: boom"),
    ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.exp(x)\n"
     "def get_inputs():\n    return [torch.rand(1, 2, 8, 8)]\ndef get_init_inputs():\n    return []\n", r"unsupported op .*exp"),
    ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.p = nn.AvgPool2d(2)\n    def forward(self, x):\n        return torch.relu(self.p(x))\n"
     "def get_inputs():\n    return [torch.rand(1, 2, 8, 8)]\ndef get_init_inputs():\n    return []\n", r"bad.py:8: .*relu.*outside the pool family"),
    # a forward that branches on self.training: kgen traces eval mode, a harness runs the training mode it starts in
    ("import torch\nimport torch.nn.functional as F\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
     "        x = x * 0.5 if self.training else x\n        return F.max_pool2d(x, 2)\n"
     "def get_inputs():\n    return [torch.rand(1, 2, 8, 8)]\ndef get_init_inputs():\n    return []\n",
     r"another graph in training mode than in eval mode.*make forward independent of self.training"),
])
def test_bad_problem_files_give_one_clear_line_and_write_nothing(tmp_path, body, message):
    prob = tmp_path / "bad.py"
    prob.write_text(body)
    result = runner.invoke(app, ["generate", str(prob), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), result.output
    import re
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_problem_file():
    result = runner.invoke(app, ["generate", "no/such/problem.py"])
    assert result.exit_code == 1 and "not found" in result.output


def test_hand_edited_output_is_not_overwritten_without_force(tmp_path):
    prob = write_problem(avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2)), name="edit_me")
    assert runner.invoke(app, ["generate", str(prob), "--out", str(tmp_path)]).exit_code == 0
    kernel = tmp_path / "edit_me" / "kernel.cu"
    original = kernel.read_text()
    assert runner.invoke(app, ["generate", str(prob), "--out", str(tmp_path)]).exit_code == 0  # unchanged: fine
    kernel.write_text(original + "// my tweak\n")
    result = runner.invoke(app, ["generate", str(prob), "--out", str(tmp_path)])
    assert result.exit_code == 1 and "--force" in result.output and "kernel.cu" in result.output
    assert kernel.read_text().endswith("// my tweak\n")
    assert runner.invoke(app, ["generate", str(prob), "--out", str(tmp_path), "--force"]).exit_code == 0
    assert kernel.read_text() == original


def test_meta_inputs_are_never_materialized():
    """The bundled 17 GB input is traced on the meta device: loading the problem allocates nothing real."""
    from kgen.problem import load_problem

    problem = load_problem(REPO / "kgen" / "problems" / "avg_pool2d.py")
    assert problem.input_shapes == [(16, 64, 2048, 2048)]
    for node in problem.gm.graph.nodes:
        assert "tensor_meta" not in node.meta or node.meta["tensor_meta"] is not None


@pytest.mark.parametrize("make", ["torch.rand(2, 3, 16, 16).cuda()", "torch.rand(2, 3, 16, 16, device='cuda')",
                                  "torch.rand(2, 3, 16, 16).to('cuda')", "torch.rand(2, 3, 16, 16).to(torch.device('cuda:0'))",
                                  "torch.rand(2, 3, 16, 16).to('cuda', torch.float32)"])
def test_problem_files_written_for_a_gpu_load_without_one(make):
    """get_inputs() that puts its tensors on a GPU still loads on the meta device (this machine has no CUDA) and
    renders exactly what the same file without the device renders."""
    from kgen.problem import load_problem

    plain = avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2))
    assert "torch.rand(2, 3, 16, 16)" in plain
    problem = load_problem(write_problem(plain.replace("torch.rand(2, 3, 16, 16)", make)))
    assert problem.input_shapes == [(2, 3, 16, 16)] and problem.input_dtypes == [torch.float32]
    got = emit.generate(write_problem(plain.replace("torch.rand(2, 3, 16, 16)", make), name="gpu_file"))
    want = emit.generate(write_problem(plain, name="gpu_file"))
    assert got.files["kernel.cu"] == want.files["kernel.cu"]


def test_forward_inputs_that_get_inputs_does_not_give_are_named():
    from kgen.errors import KgenError
    from kgen.problem import load_problem

    src = avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2)).replace("def forward(self, x):", "def forward(self, x, mask):")
    assert "mask" in src
    with pytest.raises(KgenError, match=r"takes 2 inputs \(x, mask\) but get_inputs\(\) returns 1"):
        load_problem(write_problem(src))


def test_problems_load_and_generate_from_several_threads():
    """torch.fx patches nn.Module.__call__ process-wide while tracing: problems loaded from several threads at once
    (a caller's thread pool) each get their own trace (unserialized, 30 to 32 of these 32 loads failed) and the
    sources a single thread renders, also where rendering replays Model's draws from the global generator."""
    from concurrent.futures import ThreadPoolExecutor

    from kgen.problem import load_problem

    conv = REPO / "kgen" / "problems" / "conv2d_avgpool_sigmoid_sum.py"
    with ThreadPoolExecutor(8) as ex:
        shapes = list(ex.map(lambda p: load_problem(p).input_shapes, [conv] * 32))
    assert shapes == [[(128, 8, 384, 384)]] * 32
    from tests.test_conv2d_epilogue import conv as conv_kw, conv_epilogue_problem
    custom = write_problem(conv_epilogue_problem(  # its init replays Model's draws under seeds
        (2, 8, 12, 13), conv_kw(8, 8, 3), ["x = self.conv(x)", "return torch.relu(x) * self.scale"],
        ["nn.init.xavier_uniform_(self.conv.weight)", "self.fc = nn.Linear(4, 3)",
         "self.scale = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)"]))
    paths = [conv, REPO / "kgen" / "problems" / "avg_pool2d.py", custom] * 4
    alone = {p: emit.generate(p).files for p in paths[:3]}
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(lambda p: (p, emit.generate(p).files), paths))
    for p, files in together:
        assert files == alone[p], p.name


def test_cache_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    (tmp_path / "kgen_avg_pool2d_12345678").mkdir()
    (tmp_path / "kgen_avg_pool2d_12345678" / "x.so").write_bytes(b"0" * 1000)
    out = runner.invoke(app, ["cache", "list"]).output
    assert "kgen_avg_pool2d_12345678" in out and "incomplete" in out
    assert "removed 1" in runner.invoke(app, ["cache", "clear", "--yes"]).output
    assert not any(tmp_path.iterdir())


@pytest.mark.gpu
def test_text_exec_twice_in_one_process_and_cached_import_is_fast(tmp_path):
    """model_new.py's text exec'd twice in one process works both times; a new process loads the built extension
    from the cache in well under 0.5 s."""
    src = avg_pool_problem((2, 3, 16, 16), dict(kernel_size=2))
    gen = emit.generate(write_problem(src))
    outs = []
    for _ in range(2):
        ns: dict = {"__name__": "twice"}
        exec(gen.files["model_new.py"], ns)
        outs.append(ns["ModelNew"](2).cuda()(torch.ones(1, 3, 16, 16, device="cuda")))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], torch.ones(1, 3, 8, 8, device="cuda"))
    path = tmp_path / "m.py"
    path.write_text(gen.files["model_new.py"])
    code = ("import time, torch; torch.cuda.init(); t = time.time(); "
            f"exec(open({str(path)!r}).read(), {{'__name__': 'x'}}); print(time.time() - t)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.strip()) < 0.5
