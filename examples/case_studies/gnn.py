"""GNN (GraphSAGE-like mean aggregation): node features gathered along edges with advanced
indexing (`x[src]`) vs index_select (the prototype's GNN case, 3.97 s -> 3.71 s). Source nodes
follow a power-law degree distribution (--skew, like real graphs: a Zipf exponent of 1 means a
few hubs with hundreds of thousands of edges, as in social graphs), so the gradient of `x[src]`
adds up many repeats per hub row. On an H200 (docs/case-studies.md): --skew 1.0 464 -> 24 ms per
step with index_select, --skew 0.4 (largest hub about 1,600 of the 4M edges) and a uniform graph
(--skew 0) no faster."""

import torch
from harness import parse, run, skewed


class SAGE(torch.nn.Module):
    def __init__(self, dim, layers, fixed):
        super().__init__()
        self.fixed = fixed
        self.lins = torch.nn.ModuleList([torch.nn.Linear(2 * dim, dim) for _ in range(layers)])

    def gather(self, x, src):
        return x.index_select(0, src) if self.fixed else x[src]

    def forward(self, x, src, dst, deg):
        for lin in self.lins:
            msg = self.gather(x, src)
            agg = torch.zeros_like(x).index_add_(0, dst, msg) / deg
            x = torch.relu(lin(torch.cat([x, agg], 1)))
        return x


def main(fixed: bool) -> None:
    args = parse(
        __doc__,
        steps=50,
        extra=[("--skew", float, 1.0, "power-law exponent of source-node degrees (0 = uniform)")],
    )
    nodes, edges = (20_000, 200_000) if args.small else (200_000, 4_000_000)
    dim, dev = 64, args.device
    model = SAGE(dim, 3, fixed).to(dev)
    head = torch.nn.Linear(dim, 16).to(dev)
    opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
    x = torch.randn(nodes, dim, device=dev)
    src = skewed(nodes, edges, args.skew, dev)
    dst = torch.randint(0, nodes, (edges,), device=dev)
    deg = torch.bincount(dst, minlength=nodes).clamp_min(1).unsqueeze(1).float()
    y = torch.randint(0, 16, (nodes,), device=dev)

    def step():
        loss = torch.nn.functional.cross_entropy(head(model(x, src, dst, deg)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run("gnn", "after" if fixed else "before", args, step)
