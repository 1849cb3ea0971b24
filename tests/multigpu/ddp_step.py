"""One DDP training step of a generated module on every GPU of this machine (run under torchrun). Each rank builds
the module from an (initially empty) shared cache, so the ranks race for one build behind the cache lock; rank 0
then checks the all-reduced gradients against one process's step on the concatenated batch.

Usage: torchrun --nproc_per_node=2 tests/multigpu/ddp_step.py PROBLEM_SOURCE_FILE
Prints 'ddp ok: ...' on rank 0 and exits 0 when the gradients agree within 1e-4."""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kgen import emit  # noqa: E402
from tests.helpers import GEN_ROOT, write_generated, write_problem  # noqa: E402


def main() -> int:
    source = Path(sys.argv[1]).read_text()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    torch.backends.cudnn.allow_tf32 = False
    if rank == 0:
        write_generated(emit.generate(write_problem(source, name="ddp_problem")))
    dist.barrier()
    path = GEN_ROOT / "out" / "ddp_problem" / emit.MODEL_FILE
    t = time.time()
    ns: dict = {"__name__": f"ddp_rank{rank}"}
    exec(compile(path.read_text(), str(path), "exec"), ns)  # both ranks build/load: one build, behind the lock
    load_s = time.time() - t
    init = ns["get_init_inputs"]()
    with torch.device("meta"):
        shape = tuple(ns["get_inputs"]()[0].shape)
    torch.manual_seed(0)
    model = ns["ModelNew"](*init).cuda()
    single = ns["ModelNew"](*init).cuda()
    single.load_state_dict(model.state_dict())
    ddp = DDP(model, device_ids=[rank])
    per_rank = shape[0]
    torch.manual_seed(1)
    batch = torch.randn((per_rank * world,) + shape[1:], device="cuda")  # the same on every rank (same seed)
    mine = batch[rank * per_rank:(rank + 1) * per_rank].clone().requires_grad_(True)
    out = ddp(mine)
    out.float().mean().backward()  # DDP averages gradients over ranks = the mean over the whole batch
    whole = batch.clone().requires_grad_(True)
    single(whole).float().mean().backward()
    bad = []
    for (name, p), (_, q) in zip(model.named_parameters(), single.named_parameters()):
        if not torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-4):
            bad.append(f"{name}: max diff {(p.grad - q.grad).abs().max().item():.3e}")
    # x's gradient: this rank's slice of the single-process gradient, scaled by world (DDP's mean is per rank)
    gx = whole.grad[rank * per_rank:(rank + 1) * per_rank] * world
    if not torch.allclose(mine.grad, gx, atol=1e-4, rtol=1e-4):
        bad.append(f"x.grad: max diff {(mine.grad - gx).abs().max().item():.3e}")
    flags = torch.tensor([len(bad)], device="cuda")
    dist.all_reduce(flags)
    builds = sum(len(p.read_text().splitlines()) for p in Path(os.environ["KGEN_CACHE_DIR"]).glob("kgen_*/kgen_builds.log"))
    print(f"rank {rank}: load {load_s:.1f} s, {len(list(model.parameters()))} parameters, mismatches {bad}", flush=True)
    dist.barrier()
    if rank == 0 and flags.item() == 0:
        print(f"ddp ok: {world} ranks, batch {per_rank}x{world}, gradients equal the single-process step within 1e-4; "
              f"{builds} build(s) in the shared cache", flush=True)
    dist.destroy_process_group()
    return 0 if flags.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
