"""U-Net trained under bf16 autocast with NCHW tensors (cuDNN converts layouts around every
convolution) vs channels_last model and input (the prototype's 54 s -> 42 s case)."""

import torch
from harness import parse, run
from torch import nn


def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, width=32, classes=4):
        super().__init__()
        w = [width, width * 2, width * 4, width * 8]
        self.downs = nn.ModuleList([block(3, w[0]), block(w[0], w[1]), block(w[1], w[2])])
        self.mid = block(w[2], w[3])
        self.ups = nn.ModuleList(
            [nn.ConvTranspose2d(w[i + 1], w[i], 2, stride=2) for i in (2, 1, 0)]
        )
        self.dec = nn.ModuleList([block(w[i] * 2, w[i]) for i in (2, 1, 0)])
        self.out = nn.Conv2d(w[0], classes, 1)

    def forward(self, x):
        skips = []
        for d in self.downs:
            x = d(x)
            skips.append(x)
            x = nn.functional.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec in zip(self.ups, self.dec, strict=True):
            x = dec(torch.cat([up(x), skips.pop()], 1))
        return self.out(x)


def main(fixed: bool) -> None:
    args = parse(__doc__, steps=30)
    batch, size = (4, 64) if args.small else (16, 256)
    dev = args.device
    model = UNet().to(dev)
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.randint(0, 4, (batch, size, size), device=dev)
    if fixed:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    dtype = torch.bfloat16

    def step():
        with torch.autocast(dev.split(":")[0], dtype=dtype):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    run("unet", "after" if fixed else "before", args, step)
