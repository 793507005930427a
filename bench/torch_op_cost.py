"""What deepcontext adds to one PyTorch operator, on CPU tensors and on CUDA tensors.

    python bench/torch_op_cost.py [--devices cpu,cuda] [--rounds 2]

Two loops of tiny tensors (16 elements, so the time is the framework's per-call cost, not
compute): "ops", 300 eager calls (add, mul_, relu) per round, and "backward", a multiply, a sum
and a backward pass. Each configuration runs in a fresh interpreter (under `deepcontext run`
with parts turned off); best of 15 rounds in each of --rounds processes, in microseconds per
call or per backward iteration, and the difference to no profiler. On CUDA the operator layer
and CUPTI add per call, and the backward pass runs on autograd's device thread.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

LOOP = r"""
import sys, time, torch
dev, what = sys.argv[1], sys.argv[2]
x = torch.ones(16, device=dev)
w = torch.ones(16, device=dev, requires_grad=True)
def ops():
    for _ in range(100):
        y = x + 1
        y.mul_(2)
        torch.relu(y)
def backward():
    for _ in range(20):
        (x * w).sum().backward()
fn, per_round = (ops, 300) if what == "ops" else (backward, 20)
def sync():
    if dev == "cuda":
        torch.cuda.synchronize()
for _ in range(20):
    fn()
sync()
best = float("inf")
for _ in range(15):
    t = time.perf_counter()
    fn()
    sync()
    best = min(best, (time.perf_counter() - t) / per_round * 1e6)
print(best)
"""

CONFIGS = {
    "no profiler": None,
    "deepcontext": [],
    "--no-torch (sampling, CUPTI)": ["--no-torch"],
    "--no-gpu (sampling, operators, modules, memory)": ["--no-gpu"],
}
# CUPTI's parts (CUDA only, --no-torch): runtime and driver callbacks (the default before
# 2026-12-04; now the driver's only), activity records only.
CUPTI_CONFIGS = {
    "--no-torch, runtime and driver API callbacks": (["--no-torch"], "runtime,driver"),
    "--no-torch, no API callbacks": (["--no-torch"], "none"),
}


def run(flags, device: str, what: str, tmp: str, domains: str | None = None) -> float:
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as f:
        f.write(LOOP)
    cmd = [sys.executable, script, device, what]
    if flags is not None:
        out = os.path.join(tmp, "p.dctx")
        cmd = [sys.executable, "-m", "deepcontext", "run", "-q", *flags, "-o", out, *cmd[1:]]
    env = dict(os.environ)
    if domains is not None:
        env["DEEPCONTEXT_CUPTI_API_DOMAINS"] = domains
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{res.stderr[-2000:]}")
    return float(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--rounds", type=int, default=2, help="processes per configuration")
    ap.add_argument("--loops", default="ops,backward")
    ap.add_argument(
        "--cupti-parts", action="store_true", help="CUDA: also " + ", ".join(CUPTI_CONFIGS)
    )
    args = ap.parse_args()
    names = [*CONFIGS, *(CUPTI_CONFIGS if args.cupti_parts else {})]
    print("| device | loop | " + " | ".join(names) + " |")
    print("| --- | --- |" + " ---: |" * len(names))
    with tempfile.TemporaryDirectory() as tmp:
        for device in args.devices.split(","):
            for what in args.loops.split(","):
                configs = {n: (f, None) for n, f in CONFIGS.items()}
                if args.cupti_parts and device == "cuda":
                    configs.update(CUPTI_CONFIGS)
                best = {name: float("inf") for name in configs}
                for _ in range(args.rounds):  # interleaved: drifts hit every configuration
                    for name, (flags, domains) in configs.items():
                        best[name] = min(best[name], run(flags, device, what, tmp, domains))
                base = best["no profiler"]
                cells = [f"{base:.2f} us"] + [
                    f"+{best[n] - base:.2f}" if n in best else "-" for n in names[1:]
                ]
                print(f"| {device} | {what} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
