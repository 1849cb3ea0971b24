"""Which side of a float32 mismatch is off: kgen's output and every gradient, and eager PyTorch's (TF32 off), each
against the problem's Model run in float64 on the same inputs. Prints, per tensor, the largest |a - b| / (1 + |b|)
of kgen and of eager against float64, and how many elements of each miss allclose(atol=rtol=1e-4) there.
Usage (GPU): python tests/dev/f64_check.py PROBLEM.py [PROBLEM.py ...]   (a problem file, e.g. one a sweep printed)"""

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from tests.helpers import reference_and_new  # noqa: E402


def report(name: str, kgen: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor) -> None:
    row = [name]
    for label, t in (("kgen", kgen), ("eager", eager)):
        err = (t.double() - exact).abs() / (1 + exact.abs())
        miss = ~torch.isclose(t.double(), exact, atol=1e-4, rtol=1e-4)
        row.append(f"{label} {err.max().item():.2e} ({int(miss.sum())} miss)")
    print("  " + " | ".join(row))


def main() -> int:
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for path in sys.argv[1:]:
        source = Path(path).read_text()
        model, new, _, user = reference_and_new(source, seed=0)
        exact_model = copy.deepcopy(model).double()
        with torch.device("meta"):
            shape = user["get_inputs"]()[0].shape
        torch.manual_seed(1)
        x = torch.randn(shape, device="cuda", requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        xd = x.detach().double().requires_grad_(True)
        outs = [new(x), model(xr), exact_model(xd)]
        g = torch.randn_like(outs[1])
        for o in outs:
            o.backward(g.to(o.dtype))
        print(path)
        report("output", outs[0].detach(), outs[1].detach(), outs[2].detach())
        report("grad x", x.grad, xr.grad, xd.grad)
        for (name, p), (_, pr), (_, pd) in zip(new.named_parameters(), model.named_parameters(),
                                               exact_model.named_parameters()):
            report(f"grad {name}", p.grad, pr.grad, pd.grad)
    return 0


if __name__ == "__main__":
    sys.exit(main())
