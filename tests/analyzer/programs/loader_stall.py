"""A training loop whose DataLoader reads each sample with I/O latency (1 ms, like a file or network
read). Before: num_workers=0, the step waits for every read. Fixed (--fixed): 4 worker processes
read ahead while the step runs. The step is long next to what receiving a batch from a worker
costs (a socket handshake per tensor, about 2 ms a batch on a 2-core machine): with a 10 ms step
that alone was 12-18 % of the fixed loop, so the fixed loop still stalled."""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowReads(Dataset):
    def __init__(self):
        self.data = torch.randn(len(self), 64, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return 32 * 40

    def __getitem__(self, i):
        time.sleep(0.001)
        return self.data[i], i % 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.fixed:
        loader = DataLoader(SlowReads(), batch_size=32, num_workers=4, prefetch_factor=4)
    else:
        loader = DataLoader(SlowReads(), batch_size=32)
    t0 = time.perf_counter()
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for _ in range(128):  # the rest of the step (~40 ms): longer than 32 reads over 4 workers
            model(torch.randn(512, 64)).sum()
    print(f"loss {loss.item():.4f} in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
