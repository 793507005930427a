"""Shared driver of the case studies: picks the device, runs warm-up and timed training steps,
and prints the time per step (synchronizing the device only around the timed block)."""

from __future__ import annotations

import argparse
import json
import time

import torch


def parse(description: str, steps: int) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="CPU-sized problem (default on CPU)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = ap.parse_args()
    args.small = args.small or args.device == "cpu"
    return args


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
