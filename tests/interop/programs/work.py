"""A small torch program: start-up (`import torch`), then its work in two functions.

INTEROP_SLOW=1 runs `transform` four times as many rounds (the one function a change made
slower); everything else, start-up included, does the same work. The work is fixed, not timed.
"""

import os

import torch

SLOW = os.environ.get("INTEROP_SLOW") == "1"
torch.manual_seed(0)
torch.set_num_threads(1)
w = torch.randn(256, 256)


def prepare(n):
    x = torch.randn(n, 256)
    for _ in range(20):
        x = torch.relu(x @ w) / 16
    return x


def transform(x, rounds):
    for _ in range(rounds):
        x = torch.tanh(x @ w)
    return x


def main():
    x = prepare(512)
    y = transform(x, 240 if SLOW else 60)
    print(float(y.sum()))


main()
