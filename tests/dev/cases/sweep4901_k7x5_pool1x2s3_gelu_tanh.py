import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(in_channels=33, out_channels=16, kernel_size=(7, 5), stride=1, padding=(4, 2), dilation=1, bias=True)
        self.pool = nn.AvgPool2d(kernel_size=(1, 2), stride=(1, 3))

    def forward(self, x):
        x = self.conv(x)
        x = self.pool(x)
        x = F.gelu(x, approximate='tanh')
        return torch.sum(x, dim=[1, 2, 3])


def get_inputs():
    return [torch.rand(3, 33, 30, 81)]


def get_init_inputs():
    return []

