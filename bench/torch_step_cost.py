"""Per-step cost of each part of the PyTorch layer on a step of many tiny operators.

    python bench/torch_step_cost.py [--steps 30000] [--repeat 4]

A 3-layer MLP of width 32 at batch 8 (forward, backward, SGD: about 110 operators and 4 module
calls per step, each a few microseconds), so the step time is the framework's per-operator cost
and ours on top of it. Each configuration runs in a fresh interpreter under `deepcontext run`
with parts of the torch layer turned off; best of --repeat, microseconds per step, and the
difference to the configuration above it (what that part costs per step).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

LOOP = r"""
import sys, time, torch
from torch import nn
torch.set_num_threads(1)
steps = int(sys.argv[1])
x = torch.randn(8, 32)
mlp = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
opt = torch.optim.SGD(mlp.parameters(), lr=0.01)
def step():
    loss = mlp(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
for _ in range(500):
    step()
t = time.perf_counter()
for _ in range(steps):
    step()
print((time.perf_counter() - t) / steps * 1e6)
"""

CONFIGS = [
    ("no profiler", None),
    ("deepcontext --no-torch (sampling only)", ["--no-torch"]),
    ("+ operators (--no-modules --no-torch-memory)", ["--no-modules", "--no-torch-memory"]),
    ("+ memory (--no-modules)", ["--no-modules"]),
    ("+ module frames (default)", []),
]


def run(flags, steps: int, tmp: str) -> float:
    script = os.path.join(tmp, "loop.py")
    with open(script, "w") as f:
        f.write(LOOP)
    if flags is None:
        cmd = [sys.executable, script, str(steps)]
    else:
        out = os.path.join(tmp, "p.dctx")
        cmd = [sys.executable, "-m", "deepcontext", "run", "-q", *flags, "-o", out, script]
        cmd.append(str(steps))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    if res.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{res.stderr[-2000:]}")
    return float(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30000)
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    best = {name: float("inf") for name, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):  # interleaved, so drifts of the machine hit all alike
            for name, flags in CONFIGS:
                best[name] = min(best[name], run(flags, args.steps, tmp))
    print(f"tiny-MLP step, {args.steps} steps, best of {args.repeat} (us per step)\n")
    print("| configuration | us/step | vs no profiler | this part |")
    print("| --- | ---: | ---: | ---: |")
    base = prev = best[CONFIGS[0][0]]
    for name, _ in CONFIGS:
        v = best[name]
        print(f"| {name} | {v:.1f} | {v / base:.2f}x | {v - prev:+.1f} |")
        prev = v
    return 0


if __name__ == "__main__":
    sys.exit(main())
