"""A random problem (sweep.py --gpu --family conv2d_epilogue --n 40 --seed 5002 --path HALO.WGMMA_X3, H100,
forty-second session) whose conv.weight gradient (TF32 off) missed float64 by up to 1.7e-4 on three seeds of x, eager
3.0e-5 to 3.9e-5 from it: kaiming_normal_ (fan_out) weights, erf of h * mish(h), whose derivative amplifies the conv
output's error. The cause: 3xTF32's mmas on a chunk's running sum, each truncated by the tensor core at that sum's
scale (forty-third session: with each k step summed apart, 4.3e-5 to 5.1e-5 on an H100; the committed form flushes
after each tap). tests/dev/f64_check.py --seeds 3 compares."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding='valid', groups=2, bias=False)
        nn.init.kaiming_normal_(self.conv.weight, mode='fan_out', nonlinearity='relu')

    def forward(self, x):
        y = self.conv(x)
        h1 = torch.rsub(y, 0.3)
        h2 = F.mish(h1)
        h3 = torch.mul(h1, h2)
        return torch.erf(h3)


batch_size = 3
height, width = 32, 31
in_channels = 16
out_channels = 12
kernel_size = 5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
