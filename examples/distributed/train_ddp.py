"""A small DistributedDataParallel training job for profiling distributed runs.

    torchrun --nproc_per_node 2 train_ddp.py --steps 30                 # gloo on CPU, NCCL on GPUs
    python train_ddp.py --spawn 2 --steps 30                            # torch.multiprocessing.spawn
    deepcontext run -o ddp.dctx -- torchrun --nproc_per_node 2 train_ddp.py --straggler-rank 1
    deepcontext merge ddp.rank*-of2.dctx -o ddp.merged.dctx && deepcontext analyze ddp.merged.dctx

--straggler-rank R --straggler-ms MS makes rank R sleep MS milliseconds in every step (in
`load_batch`, as a slow input pipeline would), so the other ranks wait for it in DDP's gradient
all-reduce. Besides DDP's bucketed all-reduce each step all-reduces the loss (for logging); at the
end the ranks run all_gather, broadcast, reduce_scatter and barrier once.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=2, help="steps before the timed ones")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--backend", default="auto", help="gloo, nccl or auto (nccl with CUDA)")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--straggler-ms", type=float, default=50.0)
    p.add_argument("--spawn", type=int, default=0, metavar="N", help="start N ranks with mp.spawn")
    p.add_argument("--port", type=int, default=29517, help="MASTER_PORT for --spawn")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    return p.parse_args(argv)


class MLP(nn.Module):
    def __init__(self, hidden: int, layers: int):
        super().__init__()
        blocks = []
        for _ in range(layers):
            blocks += [nn.Linear(hidden, hidden), nn.ReLU()]
        self.body = nn.Sequential(*blocks)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(self.body(x))


def load_batch(args, rank: int, device):
    """The input pipeline; the straggler rank is slow here."""
    if rank == args.straggler_rank:
        time.sleep(args.straggler_ms / 1000.0)
    x = torch.randn(args.batch, args.hidden, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    return x, y


def train_step(model, opt, x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def worker(rank: int, world: int, args) -> None:
    torch.set_num_threads(args.threads)
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = MLP(args.hidden, args.layers).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    # mean loss for logging (gloo has no AVG; NCCL's AVG also runs a kernel with one rank, where an
    # in-place SUM is a no-op)
    op = dist.ReduceOp.AVG if backend == "nccl" else dist.ReduceOp.SUM
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = load_batch(args, rank, device)
        loss = train_step(ddp, opt, x, y)
        dist.all_reduce(loss, op=op)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    if op == dist.ReduceOp.SUM:
        loss /= world
    # one of each of the other collectives
    t = torch.full((1024,), float(rank), device=device)
    gathered = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(gathered, t)
    dist.broadcast(t, src=0)
    out = torch.empty(1024 // world if 1024 % world == 0 else 1024, device=device)
    if 1024 % world == 0:
        dist.reduce_scatter_tensor(out, torch.ones(1024, device=device))
    dist.barrier()
    if rank == 0:
        print(
            f"train_ddp: {world} ranks ({backend}), {args.steps} steps in {elapsed:.3f} s, "
            f"{1000 * elapsed / max(args.steps, 1):.2f} ms/step, loss {loss.item():.4f}",
            flush=True,
        )
    dist.destroy_process_group()


def _spawned(i: int, world: int, args) -> None:
    worker(i, world, args)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        import torch.multiprocessing as mp

        mp.spawn(_spawned, args=(args.spawn, args), nprocs=args.spawn, join=True)
        return
    worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
