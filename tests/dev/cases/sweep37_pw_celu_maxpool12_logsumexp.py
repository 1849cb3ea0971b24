"""A random problem (sweep.py --gpu --n 400 --family conv2d_epilogue --seed 37 --path PW_W, H200, thirty-seventh
session) that failed the GPU check on seed 0 only (seeds 1 and 2 pass; the failing tensor's line was not kept). Its
grad_w takes the pointwise GEMM (PW_W: 2 groups of 24 -> 32 channels, one-float copies of a 1295-position plane),
which matches float64 on the emulated mma.sync (tests/host_fma.py) in both modes; the program has a (1, 2) max pool
and a clamp at +-1, whose near-ties flip a winner or a kink between float32 runs. On the CPU (12 seeds of x), the
smallest float64 gap between a pool window's two values is 3.3e-7 to 4.5e-6 while eager float32's forward misses
float64 by up to 4.0e-7 before the pool: a winner (and so where grad_x goes) can flip on rounding alone. Not shown on
the GPU: tests/dev/f64_check.py (or compare() on seeds 0-3, both modes) says which side is off."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, dilation=3, groups=2, bias=False)
        self.act = nn.CELU(1.5)
        self.post1 = nn.Parameter(torch.rand(()) + 0.5)
        self.post2 = nn.Parameter(torch.rand(()) + 0.5)
        self.post3 = nn.Parameter(torch.rand(()) + 0.5)

    def forward(self, x):
        y = self.conv(x)
        h1 = self.act(y)
        h2 = F.softsign(h1)
        t0 = -h2
        s1 = F.max_pool2d(t0, (1, 2))
        s1_0 = s1 * self.post1
        s1_1 = torch.clamp(s1_0, -1.0, 1.0)
        s2 = torch.logsumexp(s1_1, dim=[0], keepdim=False)
        s2_0 = s2 * self.post2
        s2_1 = s2_0 * self.post3
        return s2_1


batch_size = 3
height, width = 35, 37
in_channels = 48
out_channels = 64
kernel_size = 1


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
