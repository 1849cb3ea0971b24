"""Benchmark the conv2d_epilogue family at issue 9's sizes: each problem file is written into a temporary folder and
timed by `kgen.bench` (eager, torch.compile and kgen; forward and forward+backward), with TF32 off and with TF32
allowed (PyTorch's default for convolutions), appending rows to a CSV.

Usage (GPU): python tests/bench/bench_conv2d_epilogue.py [--quick] [--no-compile] [--per-call] [--mode off|tf32|both] [--blocks | --few]
             [--only NAME ...] [--csv docs/bench.csv]
             [--random N [--seed S]]: N random in-scope problems (the family's test generator) at benchmark sizes
             (random_benchmark_sources), then one summary line each: where kgen loses to eager on problems nobody
             hand-picked.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import math  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402

from kgen import bench  # noqa: E402

# name -> (Conv2d arguments, forward body after `y = self.conv(x)`, extra __init__ lines, input shape)
PROBLEMS = {
    "conv3x3_relu_bias": ("32, 64, 3, padding=1", "return torch.relu(y) + self.bias",
                          ["self.bias = nn.Parameter(torch.randn(64, 1, 1))"], (64, 32, 192, 192)),
    "conv3x3_sub_hardswish": ("16, 64, 3", "return F.hardswish(y - 0.5)", [], (64, 16, 256, 256)),
    "conv3x3_hardswish_maxpool_mish": ("16, 64, 3", "return F.mish(F.max_pool2d(F.hardswish(y - 0.5), 2))", [],
                                       (64, 16, 256, 256)),
    "conv5x5s2_gelu_global_avg": ("8, 32, 5, stride=2", "return F.adaptive_avg_pool2d(F.gelu(y), 1).squeeze()", [],
                                  (128, 8, 320, 320)),
    "conv3x3_min_channels_tanh": ("24, 48, 3", "return torch.tanh(torch.min(y, dim=1, keepdim=True)[0])", [],
                                  (64, 24, 160, 160)),
    "depthwise3x3": ("96, 96, 3, padding=1, groups=96", "return y", [], (32, 96, 160, 160)),
    "conv3x5_dilated": ("64, 128, (3, 5), dilation=(2, 1)", "return y", [], (16, 64, 200, 160)),
}

# Few input channels (an image's 3, or 12): the groups the halo forward does not take (channels not a multiple of 8);
# the forward and grad_x run on float32 FMAs where a group has at most 4 (docs/PERFORMANCE.md, twenty-fourth and
# twenty-fifth sessions). `--few` times these.
FEW_CHANNELS = {
    "c3_relu_bias": ("3, 16, 3", "return torch.relu(y) + self.bias", ["self.bias = nn.Parameter(torch.randn(16, 1, 1))"],
                     (128, 3, 256, 256)),
    "c3_stem_relu_maxpool": ("3, 64, 7, stride=2, padding=3", "return F.max_pool2d(torch.relu(y), 3, 2, 1)", [],
                             (32, 3, 224, 224)),
    "c3_tanh_global_avg": ("3, 16, 3", "return F.adaptive_avg_pool2d(torch.tanh(y), 1).flatten(1)", [], (128, 3, 256, 256)),
    "c12_gelu": ("12, 32, 3", "return F.gelu(y)", [], (64, 12, 192, 192)),
    "c3_mul_leaky_gelu_small": ("3, 16, 3", "return F.gelu(F.leaky_relu(y * 2.0))", [], (128, 3, 32, 32)),
}


def problem_source(conv: str, body: str, init: list[str], shape: tuple) -> str:
    extra = "".join(f"        {line}\n" for line in init)
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d({conv})
{extra}
    def forward(self, x):
        y = self.conv(x)
        {body}


def get_inputs():
    return [torch.rand({", ".join(map(str, shape))})]


def get_init_inputs():
    return []
'''


def problem_sources(blocks: bool = False, few: bool = False) -> dict[str, str]:
    """name -> problem file text: issue 9's examples (PROBLEMS), (blocks) the KernelBench-style level-2 blocks of
    tests/test_conv2d_epilogue.py (BENCH_STYLE_BLOCKS), or (few) the few-input-channel problems (FEW_CHANNELS)."""
    if blocks:
        from tests.test_conv2d_epilogue import BENCH_STYLE_BLOCKS, conv_epilogue_problem
        return {b[0]: conv_epilogue_problem(*b[1:]) for b in BENCH_STYLE_BLOCKS}
    table = FEW_CHANNELS if few else PROBLEMS
    return {n: problem_source(*table[n]) for n in table}


IMAGE_SIDES = (32, 64, 96, 128, 160, 192, 256)


def benchmark_sized(source: str, rng: random.Random) -> str:
    """A generated problem (tests/test_conv2d_epilogue.py's conv_epilogue_problem text) resized to a benchmark's size:
    image sides from IMAGE_SIDES (never below the drawn ones, so every window still fits), channels of an ungrouped
    conv scaled 1-4x half the time, and a batch that makes the input 8-400 MB (log-uniform)."""
    def const(name: str) -> int:
        return int(re.search(rf"^{name} = (\d+)$", source, re.M).group(1))

    h, w = map(int, re.search(r"^height, width = (\d+), (\d+)$", source, re.M).groups())
    h, w = max(h, rng.choice(IMAGE_SIDES)), max(w, rng.choice(IMAGE_SIDES))
    ci, co = const("in_channels"), const("out_channels")
    if not re.search(r"groups=(?!1\b)", source) and rng.random() < 0.5:  # nn.Conv2d or F.conv2d: ungrouped
        f = rng.choice((2, 4))
        ci, co = ci * f, co * f
    n = max(1, min(512, round(math.exp(rng.uniform(math.log(8e6), math.log(4e8))) / (4 * ci * h * w))))
    for pattern, value in ((r"^batch_size = \d+$", f"batch_size = {n}"),
                           (r"^height, width = \d+, \d+$", f"height, width = {h}, {w}"),
                           (r"^in_channels = \d+$", f"in_channels = {ci}"), (r"^out_channels = \d+$", f"out_channels = {co}")):
        source = re.sub(pattern, value, source, count=1, flags=re.M)
    return source


def random_benchmark_sources(n: int, seed: int) -> dict[str, str]:
    """name -> problem text: n draws of the family's random in-scope generator at benchmark sizes (benchmark_sized),
    each redrawn until PyTorch takes it (a drawn pooling window on a grown image may stop dividing evenly: fine; a
    ceil_mode window may still not fit)."""
    from tests.test_conv2d_epilogue import _random_case, _valid
    rng = random.Random(f"bench:{seed}")
    out = {}
    while len(out) < n:
        source = benchmark_sized(_random_case(rng)[0], rng)
        if _valid(source):
            out[f"r{seed}_{len(out)}"] = source
    return out


def describe(source: str) -> str:
    """One line of a problem: its input shape, Conv2d and forward body."""
    consts = dict(re.findall(r"^([\w, ]+) = (.+)$", source, re.M))
    m = re.search(r"self\.conv = nn\.Conv2d\(in_channels, out_channels, kernel_size(.*)\)$", source, re.M)
    # the generator's functional form: F.conv2d(x, weight, bias, arguments...)
    conv = m.group(1) if m else re.search(r"F\.conv2d\(x, [^,]+, [^,]+(.*)\)$", source, re.M).group(1)
    body = source.split("def forward(self, x):\n", 1)[1].split("\n\n", 1)[0]
    lines = [ln.strip() for ln in body.splitlines()[1:]]
    return (f"{consts['batch_size']}x{consts['in_channels']}x{consts['height, width'].replace(', ', 'x')} "
            f"{'Conv2d' if m else 'F.conv2d'}({consts['in_channels']}->{consts['out_channels']}, {consts['kernel_size']}{conv}); " + "; ".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = bench.script_parser(__doc__)
    ap.add_argument("--mode", choices=("off", "tf32", "both"), default="both", help="TF32 off, allowed, or both")
    ap.add_argument("--blocks", action="store_true",
                    help="time the KernelBench-style level-2 blocks (tests/test_conv2d_epilogue.py's BENCH_STYLE_BLOCKS) "
                         "instead of the issue's examples")
    ap.add_argument("--few", action="store_true", help="time the few-input-channel problems (FEW_CHANNELS) instead")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="time N random in-scope problems at benchmark sizes instead (random_benchmark_sources)")
    ap.add_argument("--seed", type=int, default=1, help="the --random draws' seed")
    a = ap.parse_args(argv)
    warmup, reps = bench.samples(a.quick)
    modes = {"off": [False], "tf32": [True], "both": [False, True]}[a.mode]
    if a.random:
        return bench.run_draws(random_benchmark_sources(a.random, a.seed), a, modes, describe, "kgen_bench_rand_")
    paths = bench.write_problems("kgen_bench_conv_", bench.pick(problem_sources(a.blocks, a.few), a.only), a.prebuild)
    for path in paths:
        for tf32 in modes:
            bench.run(path, warmup=warmup, reps=reps, with_compile=not a.no_compile, per_call=a.per_call, csv=a.csv, tf32=tf32)
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
