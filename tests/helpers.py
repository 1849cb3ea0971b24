"""Shared test helpers: problem files written from parameters, generated modules exec'd from their text alone."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import zlib
from pathlib import Path

import torch

from kgen import emit

REPO = Path(__file__).resolve().parents[1]
GEN_ROOT = Path(os.environ.get("KGEN_TEST_GEN_DIR") or Path(tempfile.gettempdir()) / "kgen_test_gen")


def avg_pool_problem(shape, init: dict, functional: bool = False) -> str:
    """A problem file applying AvgPool2d(**init) (module form) or F.avg_pool2d (functional form)."""
    args = ", ".join(f"{k}={v!r}" for k, v in init.items())
    if functional:
        model = f'''
class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.avg_pool2d(x, {args})


def get_init_inputs():
    return []
'''
    else:
        names = list(init)
        model = f'''
class Model(nn.Module):
    def __init__(self, {", ".join(names)}):
        super().__init__()
        self.pool = nn.AvgPool2d({", ".join(f"{n}={n}" for n in names)})

    def forward(self, x):
        return self.pool(x)


def get_init_inputs():
    return [{", ".join(repr(init[n]) for n in names)}]
'''
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F
{model}

def get_inputs():
    return [torch.rand{tuple(shape)!r}]
'''


def side_draw(text: str, one_in: int) -> bool:
    """A random generator's choice made from a hash of the text drawn so far, not from its rng: forms added to a
    generator later (a (values, indices) pair unpacked, or read with return_indices) leave every seed's other draws
    as they were."""
    return zlib.crc32(text.encode()) % one_in == 0


def write_problem(source: str, name: str | None = None) -> Path:
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    name = name or f"p_{digest}"
    d = GEN_ROOT / "problems"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    return path


def write_generated(gen: emit.Generated) -> Path:
    """Write a generated problem under GEN_ROOT/out/<problem>/; returns its model_new.py."""
    out = GEN_ROOT / "out" / gen.problem
    emit.write(gen, out, force=True)
    return out / emit.MODEL_FILE


def generate_module(source: str, name: str | None = None) -> dict:
    """Generate the problem, write it under GEN_ROOT, and exec model_new.py's text alone in a fresh namespace."""
    gen = emit.generate(write_problem(source, name))
    text = write_generated(gen).read_text()
    ns: dict = {"__name__": f"kgen_generated_{gen.problem}"}
    exec(compile(text, f"<{gen.problem}/model_new.py>", "exec"), ns)
    return ns


def poison_cuda_allocator(numel: int) -> None:
    """Fill freed caching-allocator blocks with NaN so an output allocated next shows any element left unwritten."""
    junk = torch.full((numel,), float("nan"), device="cuda")
    del junk


@contextlib.contextmanager
def tf32_mode(allow: bool, every_pass: bool = False):
    """cuDNN's TF32 flag as given; every_pass: kgen runs every pass in TF32 while allowed (KGEN_TF32=all), not only
    where cuDNN would (kgen/cudnn_tf32.py). Both restored after."""
    allow_was, env_was = torch.backends.cudnn.allow_tf32, os.environ.get("KGEN_TF32")
    torch.backends.cudnn.allow_tf32 = allow
    if every_pass:
        os.environ["KGEN_TF32"] = "all"
    else:
        os.environ.pop("KGEN_TF32", None)
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = allow_was
        if env_was is None:
            os.environ.pop("KGEN_TF32", None)
        else:
            os.environ["KGEN_TF32"] = env_was


def tf32_round(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32 (10 mantissa bits), to nearest with ties away from zero (cvt.rna.tf32.f32): add half
    a TF32 ulp to the magnitude bits, clear the 13 low bits. Finite values rounding past the largest float become
    inf, as in TF32; inf and NaN pass unchanged (the carry would corrupt a NaN)."""
    t = t.float().contiguous()
    rounded = ((t.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


ACT_CODE = {
    "sigmoid": "torch.sigmoid(x)", "tanh": "torch.tanh(x)", "relu": "torch.relu(x)", "gelu": "F.gelu(x)",
    "gelu_tanh": "F.gelu(x, approximate='tanh')", "none": "x",
}


def conv_problem(shape, conv: dict, pool: dict, act: str = "sigmoid", reduce: str = "sum", keepdim: bool = False,
                 functional_pool: bool = False, dims=(1, 2, 3)) -> str:
    """A Conv2d -> AvgPool2d -> activation -> sum/mean problem file (conv/pool kwargs as literals)."""
    conv_args = ", ".join(f"{k}={v!r}" for k, v in conv.items())
    pool_args = ", ".join(f"{k}={v!r}" for k, v in pool.items())
    pool_call = f"F.avg_pool2d(x, {pool_args})" if functional_pool else "self.pool(x)"
    keep = ", keepdim=True" if keepdim else ""
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d({conv_args})
        self.pool = nn.AvgPool2d({pool_args})

    def forward(self, x):
        x = self.conv(x)
        x = {pool_call}
        x = {ACT_CODE[act]}
        return torch.{reduce}(x, dim={list(dims)!r}{keep})


def get_inputs():
    return [torch.rand{tuple(shape)!r}]


def get_init_inputs():
    return []
'''


def reference_and_new(source: str, name: str | None = None, seed: int = 0):
    """(Model, ModelNew) on CUDA with equal parameters: the problem's own Model is the reference."""
    ns = generate_module(source, name)
    user: dict = {"__name__": "kgen_reference"}
    exec(compile(source, "<problem>", "exec"), user)
    init = user["get_init_inputs"]()
    torch.manual_seed(seed)
    model = user["Model"](*init)
    new = ns["ModelNew"](*init)
    new.load_state_dict(model.state_dict())
    return model.cuda(), new.cuda(), ns, user
