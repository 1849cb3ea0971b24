"""A random problem (sweep.py --gpu --family conv2d_epilogue --n 60 --seed 5104, H100, forty-fourth session) whose TF32
weight gradient (wgmma, every pass TF32: tf32_grad_w_check) missed the check's old bound on input seed 0: 1 of 79872
elements 4.45e-3 from float64 of TF32-rounded operands, 3.84e-3 allowed (1e-3 of the gradient's mean magnitude and 1e-3
relative); seeds 1 and 2 passed. Batch 1 with 42 output positions: each element sums few terms, some large (dL/dz =
-2y g where |y| > 0.67), and one TF32 ulp of one rounded dL/dz (kernel from float32, reference from float64) moves it by
2^-10 of that term. The check now allows 1e-3 of each element's sum of |terms| where that is more (_rounding_bound).
Run: python -c "from tests.test_conv2d_epilogue import tf32_grad_w_check as c; c(open(PATH).read(), seed=0)" (GPU)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=2, padding=1, groups=2)

    def forward(self, x):
        y = self.conv(x)
        h1 = y ** 2
        h2 = h1.add(0.3)
        h3 = -h2
        h4 = torch.minimum(h3, torch.tensor(1.5))
        t0 = torch.minimum(h4, torch.tensor(-0.75))
        s1 = torch.sum(t0, dim=(-1, -2), keepdim=True)
        return s1


batch_size = 1
height, width = 29, 6
in_channels = 64
out_channels = 208
kernel_size = (4, 3)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
