"""Small models for the PyTorch example and tests: an MLP, a CNN, and a model that gathers rows
with advanced indexing (`table[idx]`, whose backward is IndexBackward0 / index_put_)."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int = 256, hidden: int = 512, d_out: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return self.head(x)


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x)))


class CNN(nn.Module):
    def __init__(self, d_out: int = 10):
        super().__init__()
        self.features = nn.Sequential(ConvBlock(3, 16), nn.MaxPool2d(2), ConvBlock(16, 32))
        self.head = nn.Linear(32, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = x.mean(dim=(2, 3))
        return self.head(x)


class Gather(nn.Module):
    """Looks rows up in a parameter table with advanced indexing, then a linear head."""

    def __init__(self, rows: int = 4096, dim: int = 64, d_out: int = 10):
        super().__init__()
        self.table = nn.Parameter(torch.randn(rows, dim) * 0.01)
        self.head = nn.Linear(dim, d_out)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        rows = self.table[idx]
        return self.head(rows.sum(dim=1))
