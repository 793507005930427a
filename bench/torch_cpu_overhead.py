"""Overhead of DeepContext on a PyTorch CPU training loop, against no profiler and torch.profiler.

    python bench/torch_cpu_overhead.py [--steps 200] [--repeat 3] [--model mlp] [--markdown OUT]

Every configuration runs the same loop (examples/torch: model + SGD step, one intra-op thread) in
a fresh interpreter, `--repeat` times, interleaved; a run reports the loop's wall and CPU time,
the time to finish (stop the profiler and write its output) and the peak RSS. The table shows
the best time and the median memory of the runs, and the ratio to the no-profiler run. The memory rows run DeepContext at 50 and at 500
steps (peak RSS and profile size should not grow with the number of steps), in the first
`--memory-rounds` rounds.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples", "torch")

CONFIGS = {
    "none": "no profiler",
    "deepcontext": "deepcontext (operators, modules, memory)",
    "deepcontext-nomod": "deepcontext --no-modules",
    "torch.profiler": "torch.profiler (CPU)",
    "torch.profiler+stack": "torch.profiler (CPU, with_stack)",
}

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {examples!r})
cfg, steps, model_kind, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
import torch
from torch import nn
torch.set_num_threads(1)
import train
torch.manual_seed(0)
model = train.make_model(model_kind)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
data = train.Synthetic(model_kind, 64 * 8)
batches = [data[i] for i in range(64 * 8)]
xs = torch.stack([b[0] for b in batches]).split(64)
ys = torch.tensor([b[1] for b in batches]).split(64)
for i in range(5):
    train.train_step(model, opt, loss_fn, xs[i % 8], ys[i % 8])
prof = None
if cfg.startswith("deepcontext"):
    import deepcontext.session as session
    opts = {{"torch_modules": cfg != "deepcontext-nomod", "checkpoint_s": 0, "gpu": False}}
    session.start(out, **opts)
elif cfg.startswith("torch.profiler"):
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU], with_stack=cfg.endswith("+stack"))
    prof.__enter__()
w0, c0 = time.perf_counter(), time.process_time()
for i in range(steps):
    train.train_step(model, opt, loss_fn, xs[i % 8], ys[i % 8])
w1, c1 = time.perf_counter(), time.process_time()
size = 0
if cfg.startswith("deepcontext"):
    session.stop()
    size = os.path.getsize(out)
elif prof is not None:
    prof.__exit__(None, None, None)
    prof.key_averages()
    prof.export_chrome_trace(out)
    size = os.path.getsize(out)
w2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"wall": w1 - w0, "cpu": c1 - c0, "finish": w2 - w1, "rss": rss, "size": size}}))
"""


def run_one(cfg: str, steps: int, model: str, tmp: str) -> dict:
    out = os.path.join(tmp, f"{cfg}-{steps}.out")
    code = CHILD.format(examples=EXAMPLES)
    env = dict(os.environ)
    if glob.glob(os.path.join(ROOT, "python", "deepcontext", "_core*.so")):  # a built dev tree
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")] if p
        )
    env.setdefault("OMP_NUM_THREADS", "1")
    res = subprocess.run(
        [sys.executable, "-c", code, cfg, str(steps), model, out],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
    )
    if res.returncode != 0:
        raise SystemExit(f"{cfg} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", choices=["mlp", "cnn", "gather"], default="mlp")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    ap.add_argument("--markdown", help="also write the tables to this file")
    ap.add_argument(
        "--memory-rounds",
        type=int,
        default=1,
        help="rounds that also run deepcontext at 50 and 500 steps (the memory rows)",
    )
    args = ap.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]

    results: dict[str, list[dict]] = {c: [] for c in configs}
    mem: dict[int, list[dict]] = {50: [], 500: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            # rotated, so that no configuration always runs right after the same other one
            for c in configs[r % len(configs) :] + configs[: r % len(configs)]:
                results[c].append(run_one(c, args.steps, args.model, tmp))
                print(f"  run {r + 1}/{args.repeat} {c}: {results[c][-1]}", file=sys.stderr)
            if "deepcontext" in configs and r < args.memory_rounds:
                for steps in mem:
                    mem[steps].append(run_one("deepcontext", steps, args.model, tmp))

    def med(rows, key):
        # Times: the best run (least disturbed by other load on the machine); sizes: the median.
        values = [x[key] for x in rows]
        return min(values) if key in ("wall", "cpu", "finish") else statistics.median(values)

    base = results.get("none")
    lines = [
        f"PyTorch CPU training loop: `{args.model}` from examples/torch, {args.steps} steps, "
        f"batch 64, 1 thread; best of {args.repeat} runs for times, median for memory "
        "(ratios against no profiler; the paired ratio is the median over the rounds of each "
        "round's ratio).",
        "",
        "| configuration | loop wall (s) | ratio | paired ratio, median | loop CPU (s) | ratio "
        "| finish (s) | peak RSS (MiB) | ratio | output (KiB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in configs:
        rows = results[c]
        w, cpu, rss = med(rows, "wall"), med(rows, "cpu"), med(rows, "rss")
        rw = f"{w / med(base, 'wall'):.2f}x" if base else "-"
        rc = f"{cpu / med(base, 'cpu'):.2f}x" if base else "-"
        rr = f"{rss / med(base, 'rss'):.2f}x" if base else "-"
        # each round's wall against the same round's unprofiled run: drift over the rounds cancels
        paired = (
            f"{statistics.median(x['wall'] / b['wall'] for x, b in zip(rows, base, strict=True)):.2f}x"
            if base
            else "-"
        )
        lines.append(
            f"| {CONFIGS[c]} | {w:.3f} | {rw} | {paired} | {cpu:.3f} | {rc} "
            f"| {med(rows, 'finish'):.3f} "
            f"| {rss / 2**20:.0f} | {rr} | {med(rows, 'size') / 1024:.0f} |"
        )
    if mem[50]:
        lines += [
            "",
            "| deepcontext, steps | loop wall (s) | peak RSS (MiB) | profile (KiB) |",
            "| --- | --- | --- | --- |",
        ]
        for steps, rows in mem.items():
            lines.append(
                f"| {steps} | {med(rows, 'wall'):.3f} | {med(rows, 'rss') / 2**20:.1f} "
                f"| {med(rows, 'size') / 1024:.0f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
