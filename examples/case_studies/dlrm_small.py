"""DLRM-small: embedding tables gathered with advanced indexing (`table[idx]`, whose backward is
an index_put_ with accumulate: a sort of the indices, then one warp adding up all repeats of a row
one after the other) vs index_select (an atomic scatter-add backward): the prototype's
73.2 s -> 44.0 s case. Lookups follow a power-law popularity (--skew, as in click logs; the
default makes the hottest row repeat about 400 times per table and batch), which is where the
sorted accumulation is slow. With uniform lookups into 1M-row tables (--skew 0 --rows 1000000,
the first GPU run) both were measured equally fast on an H200 (docs/case-studies.md)."""

import torch
from harness import parse, run, skewed


class DLRM(torch.nn.Module):
    def __init__(self, tables, rows, dim, fixed):
        super().__init__()
        self.fixed = fixed
        self.tables = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(rows, dim) * 0.01) for _ in range(tables)]
        )
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, dim), torch.nn.ReLU())
        self.top = torch.nn.Sequential(
            torch.nn.Linear(dim * (tables + 1), 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )

    def lookup(self, table, idx):
        if self.fixed:
            return table.index_select(0, idx.flatten()).view(*idx.shape, -1)
        return table[idx]

    def forward(self, dense, sparse):
        pooled = [self.lookup(t, sparse[:, i]).sum(1) for i, t in enumerate(self.tables)]
        return self.top(torch.cat([self.bottom(dense), *pooled], 1))


def main(fixed: bool) -> None:
    args = parse(
        __doc__,
        steps=50,
        extra=[
            ("--skew", float, 0.6, "power-law exponent of row popularity (0 = uniform)"),
            ("--rows", int, 0, "rows per table (default 20,000 small / 200,000)"),
        ],
    )
    rows, batch = (20_000, 1024) if args.small else (200_000, 8192)
    rows = args.rows or rows
    tables, dim, hot = 8, 64, 16
    dev = args.device
    model = DLRM(tables, rows, dim, fixed).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dense = torch.randn(batch, 13, device=dev)
    sparse = torch.stack(
        [skewed(rows, (batch, hot), args.skew, dev, seed=t) for t in range(tables)], 1
    )
    label = torch.rand(batch, 1, device=dev).round()

    def step():
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, sparse), label)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run("dlrm_small", "after" if fixed else "before", args, step)
