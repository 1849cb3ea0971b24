"""Which side of a float32 mismatch is off: kgen's output and every gradient, and eager PyTorch's (TF32 off), each
against the problem's Model run in float64 on the same inputs. Prints, per tensor, the largest |a - b| / (1 + |b|)
of kgen and of eager against float64, and how many elements of each miss allclose(atol=rtol=1e-4) there.
Usage (GPU): python tests/dev/f64_check.py PROBLEM.py [PROBLEM.py ...]   (a problem file, e.g. one a sweep printed)
             [--seeds N]: N input seeds each (default 1)
             [--modules LABEL=model_new.py ...]: with one problem, also these modules of it, rendered elsewhere (a
             template variant: tests/dev/time_generated.py's docstring), each against float64 on the same inputs"""

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.helpers import reference_and_new  # noqa: E402


def report(name: str, rows: list[tuple[str, torch.Tensor]], exact: torch.Tensor) -> None:
    out = [name]
    for label, t in rows:
        err = (t.double() - exact).abs() / (1 + exact.abs())
        miss = ~torch.isclose(t.double(), exact, atol=1e-4, rtol=1e-4)
        out.append(f"{label} {err.max().item():.2e} ({int(miss.sum())} miss)")
    print("  " + " | ".join(out))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--modules", nargs="*", default=[], help="LABEL=path/to/model_new.py (one problem only)")
    a = ap.parse_args()
    if a.modules and len(a.problems) != 1:
        ap.error("--modules takes one problem")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for path in a.problems:
        source = Path(path).read_text()
        model, new, _, user = reference_and_new(source, seed=0)
        news = [("kgen", new)]
        for label, mpath in (m.split("=", 1) for m in a.modules):
            ns: dict = {"__name__": f"f64_{label}"}
            exec(compile(Path(mpath).read_text(), mpath, "exec"), ns)
            other = ns["ModelNew"](*user["get_init_inputs"]()).cuda()
            other.load_state_dict(model.state_dict())
            news.append((label, other))
        exact_model = copy.deepcopy(model).double()
        with torch.device("meta"):
            shape = user["get_inputs"]()[0].shape
        print(path)
        for seed in range(1, 1 + a.seeds):
            torch.manual_seed(seed)
            x = torch.randn(shape, device="cuda")
            xs = [x.clone().requires_grad_(True) for _ in range(len(news) + 1)]
            xd = x.double().requires_grad_(True)
            mods = [m for _, m in news] + [model]
            for m in mods + [exact_model]:
                m.zero_grad(set_to_none=True)
            outs = [m(xi) for m, xi in zip(mods, xs)] + [exact_model(xd)]
            g = torch.randn_like(outs[-2])
            for o in outs:
                o.backward(g.to(o.dtype))
            labels = [lb for lb, _ in news] + ["eager"]
            print(f" input seed {seed}")
            report("output", [(lb, o.detach()) for lb, o in zip(labels, outs)], outs[-1].detach())
            report("grad x", [(lb, xi.grad) for lb, xi in zip(labels, xs)], xd.grad)
            params = [dict(m.named_parameters()) for m in mods]
            for name, pd in exact_model.named_parameters():
                report(f"grad {name}", [(lb, ps[name].grad) for lb, ps in zip(labels, params)], pd.grad)
    return 0


if __name__ == "__main__":
    sys.exit(main())
