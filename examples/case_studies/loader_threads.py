"""Training fed by a DataLoader whose workers decode and crop images on the CPU, and a batch-level
augmentation (zoom, blur, colour jitter) in the main process on the CPU with torch's intra-op
threads: one loader worker per core plus one intra-op thread per core over-subscribe the cores
twice, so the main process's parallel regions wait for preempted threads; the fix splits the
cores between the two, half each (the prototype's U-Net 16 -> 8 data-loader threads case,
54 s -> 47 s)."""

import os

import numpy as np
import torch
import torch.nn.functional as F
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
        # "Decode" an original of twice the size and scale it down (workers run torch on 1 thread).
        big = rng.random((1, 3, 2 * self.size + 32, 2 * self.size + 32), dtype=np.float32)
        img = F.interpolate(
            torch.from_numpy(big), scale_factor=0.5, mode="bilinear", antialias=True
        )[0].numpy()
        y0, x0 = rng.integers(0, 16, 2)
        img = img[:, y0 : y0 + self.size, x0 : x0 + self.size]  # random crop
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(img.copy()), torch.from_numpy(
            rng.integers(0, 4, (self.size, self.size))
        )


def augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Batch-level augmentation on the CPU, as many pipelines do between the loader and the
    model: a random zoom, a Gaussian blur and a colour jitter (all parallel torch CPU ops)."""
    size = x.shape[-1]
    zoom = 1.0 + 0.25 * float(torch.rand((), generator=g))
    x = F.interpolate(x, scale_factor=zoom, mode="bilinear", align_corners=False)
    x = x[..., :size, :size]
    k = torch.exp(-(torch.linspace(-2, 2, 9) ** 2) / 2)
    k = (k[:, None] * k[None, :]) / k.sum() ** 2
    x = F.conv2d(x, k.expand(x.shape[1], 1, 9, 9).contiguous(), padding=4, groups=x.shape[1])
    jitter = 1.0 + 0.2 * (torch.rand(x.shape[0], x.shape[1], 1, 1, generator=g) - 0.5)
    return (x * jitter).clamp_(-3, 3).contiguous()


def main(fixed: bool) -> None:
    args = parse(__doc__, steps=40)
    cores = len(os.sched_getaffinity(0))
    batch, size = (4, 64) if args.small else (16, 256)
    # Before: as many workers as cores, and torch's intra-op threads on every core too.
    workers = max(1, cores // 2) if fixed else cores
    torch.set_num_threads(max(1, cores - workers) if fixed else cores)
    dev = args.device
    # The U-Net as the channels_last case left it (channels_last, bf16 autocast on the GPU): the
    # GPU step is short, so the host's threads are what sets the pace.
    model = UNet(width=16).to(dev, memory_format=torch.channels_last)
    cuda = dev.startswith("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = (args.steps + args.warmup) * batch
    loader = iter(
        DataLoader(
            Augmented(total, size),
            batch_size=batch,
            num_workers=workers,
            pin_memory=cuda,
            persistent_workers=True,
        )
    )

    g = torch.Generator().manual_seed(0)

    def step():
        x, y = next(loader)
        x = augment(x, g)
        x = x.to(dev, non_blocking=True, memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
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
