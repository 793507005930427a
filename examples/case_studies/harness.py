"""Shared driver of the case studies: picks the device, runs warm-up and timed training steps,
and prints the time per step (synchronizing the device only around the timed block)."""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch


def parse(description: str, steps: int, extra=()) -> argparse.Namespace:
    """Common flags; extra: (flag, type, default, help) of the case's own."""
    ap = argparse.ArgumentParser(description=description)
    for flag, typ, default, text in extra:
        ap.add_argument(flag, type=typ, default=default, help=text)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="CPU-sized problem (default on CPU)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = ap.parse_args()
    args.small = args.small or args.device == "cpu"
    return args


def skewed(n: int, size, s: float, device: str, seed: int = 1) -> torch.Tensor:
    """Indices in [0, n) drawn with power-law popularity: P(rank k) ~ (k + 1) ** -s, the hot ids
    scattered over the range. s=0 is uniform. Real categorical features (click logs) and graph
    degrees are skewed like this, which is what makes rows repeat within a batch."""
    g = torch.Generator().manual_seed(seed)
    count = 1
    for d in size if isinstance(size, tuple) else (size,):
        count *= d
    if s <= 0:
        idx = torch.randint(0, n, (count,), generator=g)
    else:
        weights = torch.arange(1, n + 1, dtype=torch.float64).pow(-s)
        idx = torch.randperm(n, generator=g)[torch.multinomial(weights, count, True, generator=g)]
    return idx.view(size).to(device)


def usable_cpus() -> int:
    """CPUs this process can keep busy: those it may run on, capped by a cgroup v2 CPU quota
    (a container may show 16 cores and allow 3 CPUs' worth of time)."""
    cores = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            limit, period = f.read().split()[:2]
        if limit != "max":
            cores = min(cores, max(1, math.ceil(int(limit) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(name: str, variant: str, args: argparse.Namespace, step) -> float:
    """Call step() warmup + steps times; returns and prints seconds per timed step."""
    torch.manual_seed(0)
    for _ in range(args.warmup):
        step()
    sync(args.device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(args.device)
    per_step = (time.perf_counter() - t0) / args.steps
    if args.json:
        print(
            json.dumps(
                {"case": name, "variant": variant, "device": args.device, "step_s": per_step}
            )
        )
    else:
        print(
            f"{name} {variant} on {args.device}: {per_step * 1e3:.2f} ms/step over {args.steps} steps"
        )
    return per_step
