"""Training fed by a DataLoader whose workers decode and augment images on the CPU: 16 loader
workers plus the main process's intra-op threads over-subscribe the cores vs 8 workers and the
intra-op threads capped (the prototype's U-Net 16 -> 8 data-loader threads case, 54 s -> 47 s)."""

import os

import numpy as np
import torch
from harness import parse, run
from torch.utils.data import DataLoader, Dataset
from unet import UNet


class Augmented(Dataset):
    def __init__(self, n, size):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.random((3, self.size + 16, self.size + 16), dtype=np.float32)  # "decode"
        y0, x0 = rng.integers(0, 16, 2)
        img = img[:, y0 : y0 + self.size, x0 : x0 + self.size]  # random crop
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(img.copy()), torch.from_numpy(
            rng.integers(0, 4, (self.size, self.size))
        )


def main(fixed: bool) -> None:
    args = parse(__doc__, steps=40)
    cores = len(os.sched_getaffinity(0))
    batch, size = (4, 64) if args.small else (16, 256)
    workers = max(1, cores // 2) if fixed else cores
    if fixed:
        torch.set_num_threads(max(1, cores - workers))
    dev = args.device
    model = UNet(width=16).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = (args.steps + args.warmup) * batch
    loader = iter(
        DataLoader(
            Augmented(total, size),
            batch_size=batch,
            num_workers=workers,
            pin_memory=dev.startswith("cuda"),
            persistent_workers=True,
        )
    )

    def step():
        x, y = next(loader)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run(
        "loader_threads",
        f"after ({workers} workers)" if fixed else f"before ({workers} workers)",
        args,
        step,
    )
