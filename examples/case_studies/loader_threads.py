"""Training fed by a DataLoader whose workers decode and crop images on the CPU, and a batch-level
augmentation in the main process on the CPU with torch's intra-op threads. Before: one loader
worker per core plus one intra-op thread per core, so the cores are over-subscribed twice: the
workers always have decoding to do, and the main process's parallel regions (many short ones)
wait for whichever of their threads a worker preempted, with the others spinning at the barrier.
After: the cores split between the two, half each (the prototype's U-Net 16 -> 8 data-loader
threads case, 54 s -> 47 s)."""

import numpy as np
import torch
import torch.nn.functional as F
from harness import parse, run, usable_cpus
from torch.utils.data import DataLoader, Dataset
from unet import UNet


class Augmented(Dataset):
    """Each sample "decodes" an original `decode` times the size and scales it down (antialiased:
    the CPU cost grows with decode**2), then crops, flips and normalizes it."""

    def __init__(self, n, size, decode):
        self.n, self.size, self.decode = n, size, decode

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        side = self.decode * (self.size + 16)
        big = rng.random((1, 3, side, side), dtype=np.float32)
        img = F.interpolate(  # workers run torch on one thread (DataLoader sets it)
            torch.from_numpy(big), size=(self.size + 16,) * 2, mode="bilinear", antialias=True
        )[0].numpy()
        y0, x0 = rng.integers(0, 16, 2)
        img = img[:, y0 : y0 + self.size, x0 : x0 + self.size]  # random crop
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(img.copy()), torch.from_numpy(
            rng.integers(0, 4, (self.size, self.size))
        )


def augment(x: torch.Tensor, g: torch.Generator, rounds: int) -> torch.Tensor:
    """Batch-level augmentation on the CPU, as many pipelines do between the loader and the
    model: a random zoom, a box blur, then `rounds` of photometric jitter (contrast, gamma,
    per-channel normalization). Each op is one short parallel region of the intra-op pool."""
    size = x.shape[-1]
    zoom = 1.0 + 0.25 * float(torch.rand((), generator=g))
    x = F.interpolate(x, scale_factor=zoom, mode="bilinear", align_corners=False)
    x = F.avg_pool2d(x[..., :size, :size], 3, stride=1, padding=1).contiguous()
    for _ in range(rounds):
        c = 1.0 + 0.2 * (torch.rand(x.shape[0], x.shape[1], 1, 1, generator=g) - 0.5)
        x = torch.sigmoid(x * c)
        x = x.pow(0.8 + 0.4 * float(torch.rand((), generator=g)))
        mean = x.mean(dim=(2, 3), keepdim=True)
        std = x.std(dim=(2, 3), keepdim=True)
        x = ((x - mean) / (std + 1e-6)).clamp_(-3, 3)
    return x


def main(fixed: bool) -> None:
    args = parse(
        __doc__,
        steps=60,
        extra=(
            ("--decode", int, 3, "original size / crop size of the loader's decode"),
            ("--rounds", int, 6, "photometric rounds of the main process's augmentation"),
            ("--workers", int, 0, "loader workers (0: the variant's choice)"),
            ("--threads", int, 0, "intra-op threads (0: the variant's choice)"),
        ),
    )
    cores = usable_cpus()
    batch, size = (4, 64) if args.small else (16, 256)
    # Before: as many workers as cores, and torch's intra-op threads on every core too.
    workers = args.workers or (max(1, cores // 2) if fixed else cores)
    threads = args.threads or (max(1, cores - workers) if fixed else cores)
    torch.set_num_threads(threads)
    # Steady state only: the warm-up drains what the workers prefetched while the model was built.
    args.warmup = max(args.warmup, 2 * workers + 3)
    dev = args.device
    # The U-Net as the channels_last case left it (channels_last, bf16 autocast on the GPU): the
    # GPU step is short, so the host's threads are what sets the pace.
    model = UNet(width=16).to(dev, memory_format=torch.channels_last)
    cuda = dev.startswith("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = (args.steps + args.warmup) * batch
    loader = iter(
        DataLoader(
            Augmented(total, size, args.decode),
            batch_size=batch,
            num_workers=workers,
            pin_memory=cuda,
            persistent_workers=True,
        )
    )

    g = torch.Generator().manual_seed(0)

    def step():
        x, y = next(loader)
        x = augment(x, g, args.rounds)
        x = x.to(dev, non_blocking=True, memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run(
        "loader_threads",
        f"after ({workers} workers, {threads} threads)"
        if fixed
        else f"before ({workers} workers, {threads} threads)",
        args,
        step,
    )
