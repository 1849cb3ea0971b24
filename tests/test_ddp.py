"""DDP on 2 GPUs of one machine under torchrun: one training step's gradients equal a single process's on the
concatenated batch within 1e-4, and both ranks share one build from an empty cache (no deadlock). Runs on every
registered family whose HARDENING problem has parameters (DDP needs parameters to reduce).
Run alone: torchrun --nproc_per_node=2 tests/multigpu/ddp_step.py <problem file>"""

import os
import subprocess
import sys

import pytest
import torch

from tests.families import all_families
from tests.helpers import REPO


def with_parameters():
    out = []
    for fc in all_families():
        ns: dict = {}
        exec(compile(fc.hardening, "<problem>", "exec"), ns)
        with torch.device("meta"):
            if list(ns["Model"](*ns["get_init_inputs"]()).parameters()):
                out.append(fc)
    return out


FAMS = with_parameters()


@pytest.mark.gpu
@pytest.mark.multigpu
@pytest.mark.parametrize("fc", FAMS, ids=[fc.name for fc in FAMS])
def test_ddp_step_matches_single_process(tmp_path, fc):
    problem = tmp_path / "problem.py"
    problem.write_text(fc.hardening)
    env = dict(os.environ, KGEN_CACHE_DIR=str(tmp_path / "cache"), KGEN_TEST_GEN_DIR=str(tmp_path / "gen"),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(REPO / "tests" / "multigpu" / "ddp_step.py"), str(problem)],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    assert "ddp ok" in r.stdout and "1 build(s)" in r.stdout, r.stdout[-3000:]
