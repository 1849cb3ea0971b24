"""A random problem (sweep.py --gpu --family conv2d_epilogue --n 60 --seed 5102, H100, forty-third session) whose
conv weight gradient (TF32 off) missed eager and float64 on input seed 0 (2 of 14850 elements, 1.6e-4; kgen 5.0e-4 from
float64 at most, eager 6.8e-5); seeds 1 and 2 passed. pow(y, 3) amplifies the conv output's error into gz, and grad_w
elements that cancel (large terms, small sum) carry it. With 3xTF32's k steps summed apart (an H100 variant; the
committed form flushes after each tap and grad_w step) grad_w is 2.1e-5 to 3.2e-5 from float64 on three seeds, eager
2.5e-5 to 2.9e-5. tests/dev/f64_check.py --seeds 3 compares."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        k = kernel_size if isinstance(kernel_size, tuple) else (kernel_size, kernel_size)
        fan_in = in_channels // 2 * k[0] * k[1]
        self.w = nn.Parameter(torch.empty(out_channels, in_channels // 2, *k))
        nn.init.kaiming_uniform_(self.w, a=math.sqrt(5))
        self.bias = nn.Parameter(torch.rand(()))

    def conv(self, x):
        return F.conv2d(x, self.w, None, stride=(2, 3), padding='valid', groups=2)

    def forward(self, x):
        y = self.conv(x)
        h1 = torch.pow(y, 3)
        h2 = torch.add(h1, self.bias)
        t0 = torch.rsub(h2, 2.0)
        s1 = torch.sum(t0, 0, True)
        s1_0 = s1.abs()
        s1_1 = F.gelu(s1_0)
        return s1_1


batch_size = 1
height, width = 34, 12
in_channels = 22
out_channels = 54
kernel_size = 5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]

