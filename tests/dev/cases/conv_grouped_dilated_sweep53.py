import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=1, dilation=(2, 1), groups=2)

    def forward(self, x):
        y = self.conv(x)
        return y * torch.tensor(2.0)


batch_size = 3
height, width = 36, 32
in_channels = 48
out_channels = 32
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
