"""DRAM rates of plain torch copies by read / write mix (device only; a development probe): is a write-heavy kernel,
like the max-pool backward (reads grad_y and offsets, writes grad_x ~4x those bytes), bounded by the copy rate that
kgen's floors use, or lower? Prints each pattern's rate as bytes moved (read + written) over time.

Usage (GPU): python tests/dev/bandwidth_mix.py [--gb 1.8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from kgen.bench import cuda_time_ms  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.8, help="bytes written by each pattern, in GB")
    a = ap.parse_args()
    n = int(a.gb * 1e9) // 16 * 4  # float32 elements, a multiple of 4
    big = torch.empty(n, device="cuda")
    src = torch.rand(n, device="cuda")
    quarter = torch.rand(n // 4, device="cuda")
    patterns = {  # name: (call, bytes read, bytes written)
        "copy (read 1 : write 1)": (lambda: big.copy_(src), 4 * n, 4 * n),
        "write only (zero_)": (lambda: big.zero_(), 0, 4 * n),
        "write only (fill_ 1.5)": (lambda: big.fill_(1.5), 0, 4 * n),
        "read only (amax)": (lambda: src.amax(), 4 * n, 0),
        "read 1 : write 4 (broadcast copy)": (lambda: big.view(-1, 4).copy_(quarter.view(-1, 1).expand(-1, 4)), n, 4 * n),
        "read 1 : write 1 (quarter copy)": (lambda: big[: n // 4].copy_(quarter), n, n),
    }
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}, {4 * n / 1e9:.2f} GB written a pattern", flush=True)
    for name, (fn, rd, wr) in patterns.items():
        ms = cuda_time_ms(fn, 3, 20)
        print(f"  {name:36s} {ms:7.3f} ms  {(rd + wr) / ms / 1e6:7.0f} GB/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
