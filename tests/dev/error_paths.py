"""Which error path of a generated conv2d_epilogue module crashes? Each scenario runs in its own process (a segfault
ends only that one) and prints what the call raised. Usage (GPU): python tests/dev/error_paths.py [--gdb]

Fifty-fifth session (H100, torch 2.11.0+cu130): every squeeze scenario raised its RuntimeError; the fixed-batch
module (`x.view(2, -1)`) segfaulted at batch 3, fresh or after a step, on its refusal's message, the only one that
streamed a number (`"got ", c.x.size(0)`); the message now formats it with std::to_string. Fifty-sixth session: the
GPU test of that refusal passed; this script's 170 s box ran out before the fixed_* scenarios, now run first.
The fixed_* scenarios are that module."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SCENARIOS = {  # the fixed-batch module first: the one that crashed
    "fixed_fresh_grad_b3": ("", "grad", "b3"),
    "fixed_fresh_nograd_b3": ("", "no_grad", "b3"),
    "fixed_step_grad_b3": ("step", "grad", "b3"),
    "fresh_nograd_b1": ("", "no_grad", "b1"),
    "fresh_grad_b1": ("", "grad", "b1"),
    "step_grad_b1": ("step", "grad", "b1"),
    "step_nograd_b1": ("step", "no_grad", "b1"),
    "step_grad_badc": ("step", "grad", "badc"),
    "fresh_grad_badc": ("", "grad", "badc"),
    "step_grad_cpu": ("step", "grad", "cpu"),
}


def child(name: str) -> None:
    import torch
    from tests.test_conv2d_epilogue import conv_epilogue_problem, conv, GPOOL, check_training_step
    from tests.families import setup_problem
    before, mode, bad = SCENARIOS[name]
    fixed = name.startswith("fixed_")
    src = conv_epilogue_problem((2, 4, 9, 8), conv(4, 8, 3), GPOOL + ["return x.view(2, -1)" if fixed else "return x.squeeze()"])
    model, new, _ = setup_problem(src)
    if before == "step":
        check_training_step(model, new, new, (2 if fixed else 3, 4, 9, 8))
    x = {"b1": lambda: torch.randn(1, 4, 9, 8, device="cuda"), "badc": lambda: torch.randn(3, 5, 9, 8, device="cuda"),
         "cpu": lambda: torch.randn(3, 4, 9, 8), "b3": lambda: torch.randn(3, 4, 9, 8, device="cuda")}[bad]()
    print(name, "calling", flush=True)
    try:
        if mode == "no_grad":
            with torch.no_grad():
                new(x)
        else:
            new(x)
        print(name, "RETURNED (no error)", flush=True)
    except RuntimeError as exc:
        print(name, "raised RuntimeError:", str(exc).splitlines()[0][:160], flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        sys.exit(0)
    gdb = "--gdb" in sys.argv
    for name in SCENARIOS:
        cmd = [sys.executable, "-X", "faulthandler", __file__, "--child", name]
        if gdb:
            cmd = ["gdb", "-q", "-batch", "-ex", "run", "-ex", "bt 40", "--args"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        lines = [l for l in (r.stdout + r.stderr).splitlines() if name in l or "#" in l[:4] or "SIG" in l]
        print(f"== {name}: rc {r.returncode}")
        print("\n".join(lines[-45:]))
        sys.stdout.flush()
