"""A small training loop on synthetic data (CPU, a few seconds):

deepcontext run examples/torch/train.py [--model mlp|cnn|gather] [--steps N] [--workers N]
"""

from __future__ import annotations

import argparse
import time

import torch
from model import CNN, MLP, Gather
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, kind: str, n: int):
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        if self.kind == "cnn":
            x = torch.randn(3, 16, 16, generator=g)
        elif self.kind == "gather":
            x = torch.randint(0, 4096, (8,), generator=g)
        else:
            x = torch.randn(256, generator=g)
        return x, i % 10


def make_model(kind: str) -> nn.Module:
    return {"mlp": MLP, "cnn": CNN, "gather": Gather}[kind]()


def train_step(model, opt, loss_fn, x, y):
    opt.zero_grad(set_to_none=True)
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    opt.step()
    return loss.detach()


def main(argv=None) -> float:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["mlp", "cnn", "gather"], default="mlp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = ap.parse_args(argv)

    torch.manual_seed(0)
    model = make_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = Synthetic(args.model, args.steps * args.batch)
    loader = DataLoader(data, batch_size=args.batch, num_workers=args.workers)

    t0 = time.perf_counter()
    loss = None
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = train_step(model, opt, loss_fn, x, y)
    elapsed = time.perf_counter() - t0
    print(f"{args.model}: {args.steps} steps in {elapsed:.2f} s, loss {float(loss):.4f}")
    return elapsed


if __name__ == "__main__":
    main()
