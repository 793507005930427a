"""A CPU training loop with 16 intra-op threads (more than the machine's cores). Fixed (--fixed):
as many threads as the cores this process may run on."""

import argparse
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if args.fixed else 16)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 3, 64, 64)
    y = torch.randint(0, 10, (16,))
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"{torch.get_num_threads()} threads: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
