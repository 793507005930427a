"""GPU overhead and accuracy of deepcontext against torch.profiler, side by side in one run.

Three training workloads (TransformerEncoder 6x512, ResNet-18, a DLRM-like model whose 8 embedding
tables are read through aten::index), each in three configurations, every (workload, configuration,
repeat) its own process: no profiler, torch.profiler (CPU+CUDA activities), deepcontext (session
started just before the measured steps, the same window torch.profiler records). Reports the median
step time and peak RSS as ratios to the unprofiled run, deepcontext's total gpu_time against
torch.profiler's kernel total over the same steps, the share of kernel time under a user source line
and an aten operator, the share of backward kernel time placed under the forward operator's path,
deepcontext's peak RSS for 10x the steps, and the resident size at each tenth of those steps.
Every child prints a line as it ends (step time, the CPU part of the step: the time until the step
is issued, which above the GPU's time means a CPU-bound step). The configurations' order rotates
from one run to the next; the paired ratio is the median of each run's ratio to the unprofiled
run of its own round, so that the host's drift between rounds cancels.

    python bench/gpu_overhead.py [--steps 60] [--runs 2] [--long-steps 600] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("transformer", "resnet18", "dlrm")
MODES = ("baseline", "torch.profiler", "deepcontext")
# deepcontext configurations: session options. The partial ones show where the cost goes.
DEEPCONTEXT_MODES = {
    "deepcontext": {},
    "deepcontext-gpu-only": {"torch": False},
    "deepcontext-no-gpu": {"gpu": False},
    "deepcontext-no-sampling": {"interval_ms": 1e6, "wall": False},
    "deepcontext-no-modules": {"torch_modules": False},
    # diagnosis: deepcontext's own native stacks (1 ms) of the run, kept with --keep DIR
    "deepcontext-native": {"native": True, "interval_ms": 1.0},
    # CUPTI activity buffers of 8 MiB (the default is 1 MiB): what buffer size does to RSS
    "deepcontext-buf8m": {},
    # CUPTI API callbacks on the runtime and the driver (the default is the driver's only)
    "deepcontext-rtdriver": {},
    # the floor of any CUPTI kernel tracer: activity records alone (no API callbacks, so kernels
    # go unattributed), no operators; what is left is CUPTI's cost per launch and the sampler
    "deepcontext-cupti-floor": {"torch": False},
    # diagnostic: the floor with the activity buffers dropped unread (RSS: ours or CUPTI's?)
    "deepcontext-cupti-discard": {"torch": False},
}
# environment a configuration's child runs with
MODE_ENV = {
    "deepcontext-buf8m": {"DEEPCONTEXT_CUPTI_BUFFER_KB": "8192"},
    "deepcontext-rtdriver": {"DEEPCONTEXT_CUPTI_API_DOMAINS": "runtime,driver"},
    "deepcontext-cupti-floor": {"DEEPCONTEXT_CUPTI_API_DOMAINS": "none"},
    "deepcontext-cupti-discard": {
        "DEEPCONTEXT_CUPTI_API_DOMAINS": "none",
        "DEEPCONTEXT_CUPTI_DISCARD": "1",
    },
}
WARMUP = 10


# --------------------------------------------------------------------------------------------
# Workloads (run in the child)
# --------------------------------------------------------------------------------------------


def build(name: str):
    import torch
    import torch.nn.functional as F

    dev = "cuda"
    torch.manual_seed(0)
    if name == "transformer":
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 6).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(32, 256, 512, device=dev)
        target = torch.randn(32, 256, 512, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), target)
            loss.backward()
            opt.step()
            return loss  # the caller's loss.item() waits for the step's GPU work

    elif name == "resnet18":
        import torchvision

        model = torchvision.models.resnet18(num_classes=1000).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(64, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (64,), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss  # the caller's loss.item() waits for the step's GPU work

    elif name == "dlrm":
        tables = [torch.nn.Parameter(torch.randn(200_000, 64, device=dev) * 0.01) for _ in range(8)]
        mlp = torch.nn.Sequential(
            torch.nn.Linear(8 * 64 + 13, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1),
        ).to(dev)
        opt = torch.optim.SGD([*tables, *mlp.parameters()], lr=0.01)
        batch = 8192
        idx = [torch.randint(0, 200_000, (batch,), device=dev) for _ in range(8)]
        dense = torch.randn(batch, 13, device=dev)
        label = torch.rand(batch, 1, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            emb = [t[i] for t, i in zip(tables, idx, strict=True)]  # aten::index
            logits = mlp(torch.cat([dense, *emb], dim=1))
            loss = F.binary_cross_entropy_with_logits(logits, label)
            loss.backward()
            opt.step()
            return loss  # the caller's loss.item() waits for the step's GPU work

    else:
        raise SystemExit(f"unknown workload {name}")
    return step


def torch_kernels(prof) -> tuple[float, int]:
    """Kernel time (ns) and count of a finished torch.profiler, copies and memsets excluded."""
    from torch.autograd import DeviceType

    total, count = 0.0, 0
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != DeviceType.CUDA:
            continue
        # GPU-side ranges of record_function scopes (e.g. Optimizer.step#SGD.step) span kernels.
        if getattr(e, "is_user_annotation", lambda: False)():
            continue
        if e.name().startswith(("Memcpy", "Memset")):
            continue
        total += e.duration_ns()
        count += 1
    return total, count


def attribution(path: str, user_file: str) -> dict:
    from deepcontext import reader as profile

    prof = profile.load(path)
    total = prof.total("gpu_time") if "gpu_time" in prof.metrics else 0.0
    line_and_op = backward = backward_placed = 0.0
    unplaced: dict[str, float] = {}
    for n in prof.nodes():
        if n.frame.kind != "kernel":
            continue
        t = n.exclusive("gpu_time")
        frames = n.path()
        user = any(f.kind == "python" and f.file == user_file for f in frames)
        op = any(f.kind == "operator" and f.name.startswith("aten::") for f in frames)
        if user and op:
            line_and_op += t
        else:
            key = " > ".join(f.name[:60] for f in frames if f.kind != "python")
            unplaced[key] = unplaced.get(key, 0.0) + t
        # autograd's device threads: any thread but the main one (every path starts at a thread)
        on_autograd_thread = (
            bool(frames) and frames[0].kind == "thread" and (frames[0].name != "MainThread")
        )
        under_backward = any(f.kind == "backward" for f in frames)
        if on_autograd_thread or under_backward:
            backward += t
            if under_backward and user:
                backward_placed += t
    stats = json.loads(prof.meta.get("gpu_stats", "{}"))
    return {
        "gpu_time_ns": total,
        "under_line_and_op": line_and_op / total if total else 0.0,
        "backward_under_forward": backward_placed / backward if backward else 0.0,
        "gpu_stats": stats,
        "kernels_seen": stats.get("kernels", 0),
        "nodes": len(prof),
        "top_unplaced": sorted(((t / total, k) for k, t in unplaced.items()), reverse=True)[:6],
        "notes": prof.notes,
    }


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def mappings_kb() -> dict[str, int]:
    """Resident KiB per mapping (path, [heap], or the anonymous map's address), from smaps."""
    out: dict[str, int] = {}
    name = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if "-" in head[0] and ":" not in head[0]:
                name = head[5].strip() if len(head) > 5 else "anon@" + head[0].split("-")[0]
            elif head[0] == "Rss:":
                out[name] = out.get(name, 0) + int(head[1])
    return out


def growth_by_mapping(before: dict[str, int], after: dict[str, int]) -> list[tuple[str, int]]:
    """The mappings whose resident size grew most between two snapshots (KiB), new ones included."""
    grown = [(k, v - before.get(k, 0)) for k, v in after.items() if v - before.get(k, 0) > 64]
    return sorted(grown, key=lambda kv: -kv[1])[:8]


def child(args) -> int:
    import torch

    step = build(args.workload)
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    times: list[float] = []
    cpu_times: list[float] = []  # until the step is issued: above the GPU's time, CPU-bound
    result: dict = {}

    rss_curve: list[tuple[int, float]] = []  # (steps done, resident MiB) at each tenth
    maps_first: dict[str, int] = {}  # resident KiB per mapping at the first tenth

    def measured():
        for i in range(args.steps):
            t0 = time.perf_counter()
            loss = step()
            t1 = time.perf_counter()  # the CPU has issued the step; the GPU may still run it
            loss.item()
            times.append(time.perf_counter() - t0)
            cpu_times.append(t1 - t0)
            if (i + 1) % max(1, args.steps // 10) == 0:
                rss_curve.append((i + 1, resident_mb()))
                if len(rss_curve) == 1:
                    maps_first.update(mappings_kb())

    w0 = time.perf_counter()
    if args.mode == "baseline":
        measured()
    elif args.mode == "torch.profiler":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            measured()
        result["window_s"] = time.perf_counter() - w0
        result["kernel_ns"], result["kernels"] = torch_kernels(p)
    else:
        from deepcontext import session

        session.start(args.output, **DEEPCONTEXT_MODES[args.mode])
        measured()
        session.stop()
    result.setdefault("window_s", time.perf_counter() - w0)
    result["output"] = args.output
    result["rss_curve"] = rss_curve
    if maps_first:  # where the growth from the first tenth to the end lies
        result["rss_growth_kb"] = growth_by_mapping(maps_first, mappings_kb())
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["median_step_s"] = statistics.median(times)
    result["median_cpu_s"] = statistics.median(cpu_times)
    result["total_s"] = sum(times)
    if args.mode in DEEPCONTEXT_MODES and args.mode != "deepcontext-no-gpu":
        result["profile_mb"] = os.path.getsize(args.output) / 2**20
        result.update(attribution(args.output, os.path.abspath(__file__)))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Orchestration (parent)
# --------------------------------------------------------------------------------------------


def run_child(workload: str, mode: str, steps: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"{workload}-{mode}-{steps}-{time.monotonic_ns()}.dctx")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, "--mode", mode]
    cmd += ["--steps", str(steps), "--output", out]
    env = {**os.environ, **MODE_ENV.get(mode, {})}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{workload}/{mode} failed:\n{res.stderr[-3000:]}")


def report(workload: str, mode: str, steps: int, r: dict) -> None:
    """One line per child as it finishes, so a run cut by a time limit still tells something."""
    curve = r.get("rss_curve") or []
    rss = f", resident MiB {curve[0][1]:.0f} -> {curve[-1][1]:.0f}" if curve else ""
    print(
        f"  {workload} {mode} x{steps}: step {r['median_step_s'] * 1e3:.2f} ms "
        f"(CPU issues it in {r['median_cpu_s'] * 1e3:.2f}), "
        f"peak RSS {r['peak_rss_mb']:.0f} MiB{rss}",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--long-steps", type=int, default=600, help="0: skip the long-run RSS check")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", help="write all results here")
    ap.add_argument(
        "--extra-modes",
        default="",
        help="comma-separated partial deepcontext configurations to add: "
        + ", ".join(m for m in DEEPCONTEXT_MODES if m != "deepcontext"),
    )
    ap.add_argument(
        "--long-modes",
        default="",
        help="comma-separated configurations to run for --long-steps too (default: deepcontext, "
        "no profiler, and deepcontext-buf8m when it is among the modes); 'all' for every mode",
    )
    ap.add_argument("--keep", metavar="DIR", help="copy the deepcontext-native profiles here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.workload = args.child
        return child(args)

    import torch

    results: dict = {
        "machine": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "steps": args.steps,
        "runs": args.runs,
        "workloads": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.workloads.split(","):
            modes = [*MODES, *filter(None, args.extra_modes.split(","))]
            runs: dict[str, list] = {m: [] for m in modes}
            for r in range(args.runs):
                # interleaved and rotated, so drift and position hit every configuration alike
                for m in modes[r % len(modes) :] + modes[: r % len(modes)]:
                    runs[m].append(run_child(w, m, args.steps, tmp))
                    report(w, m, args.steps, runs[m][-1])
                    if m == "deepcontext-native" and args.keep:
                        os.makedirs(args.keep, exist_ok=True)
                        shutil.copy(runs[m][-1]["output"], os.path.join(args.keep, f"{w}.dctx"))
            if args.long_steps:
                # the program's own growth over the same steps (CUDA caching allocator, Python)
                long_modes = ["deepcontext", "baseline"]
                if "deepcontext-buf8m" in modes:
                    long_modes.append("deepcontext-buf8m")
                if args.long_modes == "all":
                    long_modes = [m for m in modes if m != "torch.profiler"]
                elif args.long_modes:
                    long_modes = args.long_modes.split(",")
                for m in long_modes:
                    runs[f"{m}-long"] = [run_child(w, m, args.long_steps, tmp)]
                    report(w, m, args.long_steps, runs[f"{m}-long"][0])
            results["workloads"][w] = runs
            if args.runs:  # --runs 0: the long RSS runs only
                print(summary_row(w, runs), flush=True)
    if args.runs:
        print(summary_table(results))
    print(rss_curves(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def _med(runs, key):
    return statistics.median(r[key] for r in runs)


def _paired(runs: dict, mode: str) -> float:
    """Median over the rounds of each round's step time against that round's own run without a
    profiler: the host's drift from round to round cancels out."""
    pairs = zip(runs[mode], runs["baseline"], strict=True)
    return statistics.median(a["median_step_s"] / b["median_step_s"] for a, b in pairs)


def summary_row(w: str, runs: dict) -> str:
    base = _med(runs["baseline"], "median_step_s")
    tp = _med(runs["torch.profiler"], "median_step_s") / base
    dc = _med(runs["deepcontext"], "median_step_s") / base
    paired = (
        f" (paired {_paired(runs, 'torch.profiler'):.3f}x / {_paired(runs, 'deepcontext'):.3f}x)"
    )
    extra = "".join(
        f", {m} {_med(r, 'median_step_s') / base:.3f}x"
        for m, r in runs.items()
        if m in DEEPCONTEXT_MODES and m != "deepcontext"
    )
    return f"{w}: torch.profiler {tp:.3f}x, deepcontext {dc:.3f}x{extra}{paired}"


def rss_curves(results: dict) -> str:
    """Resident MiB at each tenth of the long runs: flat, or still growing at the end?"""
    lines = []
    for w, runs in results["workloads"].items():
        for m, r in runs.items():
            if m.endswith("-long") and r and r[0].get("rss_curve"):
                pts = " ".join(f"{n}:{mb:.0f}" for n, mb in r[0]["rss_curve"])
                lines.append(f"RSS {w} {m}: {pts}")
                grown = ", ".join(f"{k} +{kb} KiB" for k, kb in r[0].get("rss_growth_kb", []))
                if grown:
                    lines.append(f"    grew in: {grown}")
    return "\n".join(lines)


def summary_table(results: dict) -> str:
    head = (
        "| workload | base step ms | torch.profiler | deepcontext | paired: torch.profiler / "
        "deepcontext | RSS +MB torch.profiler | "
        f"RSS +MB deepcontext | RSS +MB {results['steps']}->long: deepcontext (no profiler) | "
        "gpu_time / "
        "torch.profiler kernels (count) | under line+aten | backward under forward | window "
        "incl. start/stop: torch.profiler / deepcontext |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = [head]
    for w, runs in results["workloads"].items():
        base = _med(runs["baseline"], "median_step_s")
        rss0 = _med(runs["baseline"], "peak_rss_mb")
        tp, dc = runs["torch.profiler"], runs["deepcontext"]
        long = runs.get("deepcontext-long")
        growth = f"{long[0]['peak_rss_mb'] - _med(dc, 'peak_rss_mb'):+.0f}" if long else "-"
        if runs.get("baseline-long"):
            growth += f" ({runs['baseline-long'][0]['peak_rss_mb'] - rss0:+.0f})"
        ratio = _med(dc, "gpu_time_ns") / _med(tp, "kernel_ns")
        counts = f"{_med(dc, 'kernels_seen'):.0f}/{_med(tp, 'kernels'):.0f}"
        window0 = _med(runs["baseline"], "window_s")
        rows.append(
            f"| {w} | {base * 1e3:.2f} | {_med(tp, 'median_step_s') / base:.3f}x | "
            f"{_med(dc, 'median_step_s') / base:.3f}x | "
            f"{_paired(runs, 'torch.profiler'):.3f}x / {_paired(runs, 'deepcontext'):.3f}x | "
            f"{_med(tp, 'peak_rss_mb') - rss0:+.0f} | "
            f"{_med(dc, 'peak_rss_mb') - rss0:+.0f} | {growth} | {ratio:.4f} ({counts}) | "
            f"{_med(dc, 'under_line_and_op') * 100:.2f}% | "
            f"{_med(dc, 'backward_under_forward') * 100:.2f}% | "
            f"{_med(tp, 'window_s') / window0:.3f}x / {_med(dc, 'window_s') / window0:.3f}x |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
