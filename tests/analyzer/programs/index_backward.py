"""An embedding-bag-like model that gathers rows of a trained table with advanced indexing
(`table[idx]`), whose backward is an index_put_ with accumulate. Fixed (--fixed): index_select,
whose backward is an index_add_."""

import argparse
import time

import torch


class Lookup(torch.nn.Module):
    def __init__(self, rows, dim, fixed):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(rows, dim) * 0.01)
        self.fixed = fixed
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )

    def forward(self, idx):
        if self.fixed:
            rows = self.table.index_select(0, idx)
        else:
            rows = self.table[idx]
        return self.mlp(rows.view(-1, 100, rows.shape[-1]).sum(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Lookup(1000, 16, args.fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    idx = torch.randint(0, 1000, (2000 * 100,))
    y = torch.randn(2000, 1)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(idx), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f} in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
