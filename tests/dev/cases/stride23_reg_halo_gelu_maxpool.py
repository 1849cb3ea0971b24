"""A register-staged halo forward (HALO.REG, one-float groups) at stride (2, 3): the case of REG_WIDE_STRIDE_EXTRA
(a CPU compile sweep found such forwards spilling in their sm_90a wgmma instance). Run with sweep.py --gpu --files."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 48, 5, stride=((2, 3)), padding=1)

    def forward(self, x):
        return F.max_pool2d(F.gelu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn(6, 8, 101, 189)]


def get_init_inputs():
    return []
