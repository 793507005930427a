"""CPU workload for bench/cpu_overhead.py: pure-Python loops, function calls and numpy, in the
proportions of a data-preprocessing step. Prints nothing; takes about 1 s per unit of scale."""

import sys

import numpy as np


def tokenize(text: str) -> list[int]:
    return [hash(w) % 50_000 for w in text.split()]


def python_part(n: int) -> int:
    text = "the quick brown fox jumps over the lazy dog " * 20
    total = 0
    for _ in range(n):
        total += sum(tokenize(text))
    return total


def numpy_part(n: int) -> float:
    rng = np.random.default_rng(0)
    a = rng.random((300, 300))
    acc = 0.0
    for _ in range(n):
        b = a @ a.T
        acc += float(np.sort(b, axis=None)[-1])
    return acc


if __name__ == "__main__":
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    python_part(int(6000 * scale))
    numpy_part(int(60 * scale))
