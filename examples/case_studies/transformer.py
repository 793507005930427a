"""Transformer block with hand-written GELU, LayerNorm and attention (chains of small elementwise
kernels) and a per-parameter AdamW, vs fused ops and the fused optimizer (the prototype's
Transformer-Big kernel-fusion case, 30.5 s -> 23.9 s). --compile adds torch.compile on top."""

import math

import torch
from harness import parse, run
from torch import nn


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


class Block(nn.Module):
    def __init__(self, d, heads, fixed):
        super().__init__()
        self.fixed, self.heads = fixed, heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def norm(self, ln, x):
        return ln(x) if self.fixed else layer_norm(x, ln.weight, ln.bias)

    def attention(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.fixed:
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.norm(self.ln1, x))
        h = self.fc1(self.norm(self.ln2, x))
        h = nn.functional.gelu(h, approximate="tanh") if self.fixed else gelu_tanh(h)
        return x + self.fc2(h)


def main(fixed: bool) -> None:
    args = parse(__doc__, steps=30)
    d, layers, batch, seq = (128, 2, 8, 64) if args.small else (512, 6, 16, 256)
    dev = args.device
    model = nn.Sequential(*[Block(d, 8, fixed) for _ in range(layers)]).to(dev)
    cuda = dev.startswith("cuda")
    if fixed:
        opt = torch.optim.AdamW(
            model.parameters(), lr=1e-4, **({"fused": True} if cuda else {"foreach": True})
        )
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(batch, seq, d, device=dev)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    run("transformer", "after" if fixed else "before", args, step)
