"""Overhead of DeepContext on a JAX training loop, side by side with jax.profiler, in one run.

    python bench/jax_overhead.py [--models mlp,transformer] [--steps 200] [--repeat 3]
                                 [--markdown OUT] [--json OUT] [--diagnose DIR]

Every configuration runs examples/jax/train.py (a jitted training step; the time per step after
warm-up) in a fresh interpreter, `--repeat` times, interleaved: no profiler, `deepcontext run` (on
a GPU: sampled GPU tracing, JAX's default; `node` for every record),
`deepcontext run --no-jax-hlo-ops` (no NVTX thunk ranges: kernels under the jitted call site
only), and jax.profiler (start_trace/stop_trace around the script). The table shows the best time
per step, its ratio to the no-profiler run's best, the paired median (each round's ratio to its
own unprofiled run; robust to a host whose speed drifts) and the peak RSS of each process; DeepContext also runs
with --long-factor times the steps (peak RSS should not grow with the number of steps).
`--configs` may add "deepcontext, NVTX via CUPTI" (CUPTI as the NVTX injection, the old path);
short names: node (every GPU record), nohlo, nocmdbuf (command buffers off), cupti-nvtx (e.g. `--configs none,deepcontext,nohlo,jax.profiler,cupti-nvtx`).
`--diagnose DIR` profiles the deepcontext run itself with `--native` (1 ms interval) and prints
the native frames where the launching thread spends its time (DIR/diagnose.dctx). `--json` is
rewritten after every run, so a run cut short by a time limit keeps what it measured.
Works on CPU (XLA:CPU) and on an NVIDIA GPU (scripts/gpu-check.sh, step jaxbench).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRAIN = os.path.join(ROOT, "examples", "jax", "train.py")

# jax.profiler around the unchanged script (its trace goes to a temporary directory).
JAXPROF = """
import os, runpy, sys, tempfile, jax
d = tempfile.mkdtemp(prefix="jaxprof-")
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
jax.profiler.start_trace(d)
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    jax.profiler.stop_trace()
"""

CONFIGS = ["none", "deepcontext", "deepcontext --no-jax-hlo-ops", "jax.profiler"]
VIA_CUPTI = "deepcontext, NVTX via CUPTI"
# deepcontext run with an environment of its own. Optional: XLA's NVTX ranges through CUPTI's
# NVTX injection and callbacks instead of our own; where CUPTI's share goes: its API callbacks
# on the runtime and the driver (the default is the driver's only; DEEPCONTEXT_CUPTI_API_DOMAINS,
# docs/gpu.md), or none at all (activity records only: kernels unattributed).
ENV_CONFIGS = {
    VIA_CUPTI: {"DEEPCONTEXT_NVTX_INJECTION": "cupti"},
    "deepcontext, runtime and driver API callbacks": {
        "DEEPCONTEXT_CUPTI_API_DOMAINS": "runtime,driver"
    },
    "deepcontext, no API callbacks": {"DEEPCONTEXT_CUPTI_API_DOMAINS": "none"},
    # What CUPTI's per-kernel records cost the program: none at all, or one per graph launch
    # (kernels are not attributed in either; diagnostics only).
    "deepcontext, no kernel records": {"DEEPCONTEXT_CUPTI_KERNELS": "off"},
    "deepcontext, graph-level records": {"DEEPCONTEXT_CUPTI_KERNELS": "graph"},
    # The user-facing graph-level mode (docs/gpu.md): graph launches timed whole, kernels
    # outside graphs as usual.
    "deepcontext, graphs timed whole": {"DEEPCONTEXT_CUPTI_GRAPHS": "graph"},
    # Sampled tracing (--cuda-graphs sample): per-kernel records 100 ms of every second.
    "deepcontext, sampled": {"DEEPCONTEXT_CUPTI_GRAPHS": "sample"},
    # Leaner sampling: 50 ms windows every second, the first closing after 2,000 launch calls
    # instead of 5,000 (on a launch-bound step the windows' per-node tracing is the overhead).
    "deepcontext, sampled 50:1000:2000": {"DEEPCONTEXT_CUPTI_SAMPLE": "50:1000:2000"},
}
# Short names for --configs (shell-friendly: no spaces).
ALIASES = {
    "nohlo": "deepcontext --no-jax-hlo-ops",
    "nocmdbuf": "deepcontext --no-jax-command-buffers",
    "nogpu": "deepcontext --no-gpu",
    "nogpu-nosample": "deepcontext --no-gpu --no-wall --interval 100000",
    "cupti-nvtx": VIA_CUPTI,
    "rtdriver": "deepcontext, runtime and driver API callbacks",
    "noapi": "deepcontext, no API callbacks",
    "nokernels": "deepcontext, no kernel records",
    "graphtrace": "deepcontext, graph-level records",
    "graphs": "deepcontext, graphs timed whole",
    "sample": "deepcontext, sampled",
    "sample-lean": "deepcontext, sampled 50:1000:2000",
    "node": "deepcontext --cuda-graphs node",
}
STEPS_RE = re.compile(r"(\d+) steps in ([\d.]+) s")


def command(cfg: str, py: str, train_args: list[str], out: str) -> list[str]:
    if cfg in ENV_CONFIGS:
        env = [f"{k}={v}" for k, v in ENV_CONFIGS[cfg].items()]
        return ["env", *env, *command("deepcontext", py, train_args, out)]
    if cfg == "none":
        return [py, TRAIN, *train_args]
    if cfg == "jax.profiler":
        return [py, "-c", JAXPROF, TRAIN, *train_args]
    extra = cfg.split()[1:]
    return [py, "-m", "deepcontext", "run", "-q", *extra, "-o", out, TRAIN, *train_args]


def run_one(cmd: list[str]) -> dict:
    """ms per step and peak RSS (MiB) of one process."""
    env = dict(os.environ)
    if glob.glob(os.path.join(ROOT, "python", "deepcontext", "_core*.so")):  # a built dev tree
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")] if p
        )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    m = STEPS_RE.search(out)
    if os.waitstatus_to_exitcode(status) != 0 or not m:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out[-2000:]}")
    return {
        "ms_per_step": float(m.group(2)) / int(m.group(1)) * 1e3,
        "rss_mib": usage.ru_maxrss / 1024,
    }


def paired_median(runs: dict[str, list[dict]], config: str) -> float:
    """Median over the rounds of each round's ratio to the unprofiled run of the same round: the
    rounds run one after another, so this cancels a host's drift that best-of ratios hide."""
    ratios = [
        a["ms_per_step"] / b["ms_per_step"]
        for a, b in zip(runs[config], runs["none"], strict=False)
    ]
    return statistics.median(ratios)


def write_json(path: str, results: dict) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def diagnose(py: str, train_args: list[str], out_dir: str) -> None:
    """Where the time goes under deepcontext: its own --native profile, flat by native frame."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "diagnose.dctx")
    cmd = [py, "-m", "deepcontext", "run", "-q", "--native", "--interval", "1", "-o", path]
    run_one([*cmd, TRAIN, *train_args])
    for view in ("flat", "bottom-up"):
        rep = subprocess.run(
            [py, "-m", "deepcontext", "report", path, "-m", "cpu_time", "--view", view]
            + (["--limit", "40"] if view == "flat" else ["--depth", "6", "--min-share", "1.5"]),
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"\n== diagnose: {view} (cpu_time)\n{rep.stdout[-12000:]}{rep.stderr[-2000:]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long-factor", type=int, default=4, help="0: skip the long-run RSS check")
    ap.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help="comma-separated (;-separated if a name has a comma)",
    )
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--diagnose", metavar="DIR", help="also profile the deepcontext run (--native)")
    args = ap.parse_args(argv)
    py = sys.executable
    sep = ";" if ";" in args.configs else ","
    configs = [ALIASES.get(c.strip(), c.strip()) for c in args.configs.split(sep) if c.strip()]
    results: dict[str, dict] = {}
    rows = [
        "| model | base ms/step | "
        + " | ".join(c for c in configs if c != "none")
        + " | peak RSS MiB (none / deepcontext / jax.profiler) | deepcontext RSS, "
        f"{args.long_factor}x steps |",
        "| --- " * (len(configs) + 3) + "|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for model in [m for m in args.models.split(",") if m]:
            train_args = ["--model", model, "--steps", str(args.steps)]
            runs: dict[str, list[dict]] = {c: [] for c in configs}
            results[model] = {"runs": runs}
            for r in range(args.repeat):
                for c in configs:
                    out = os.path.join(tmp, f"{model}-{r}.dctx")
                    runs[c].append(run_one(command(c, py, train_args, out)))
                    print(
                        f"  {model} run {r + 1}/{args.repeat} {c}: {runs[c][-1]}", file=sys.stderr
                    )
                    if args.json:  # a run cut short by a time limit keeps what it measured
                        write_json(args.json, results)
            long = None
            if args.long_factor > 0 and "deepcontext" in configs:
                long_args = ["--model", model, "--steps", str(args.steps * args.long_factor)]
                long = run_one(command("deepcontext", py, long_args, os.path.join(tmp, "l.dctx")))
            best = {c: min(x["ms_per_step"] for x in v) for c, v in runs.items() if v}
            rss = {c: max(x["rss_mib"] for x in v) for c, v in runs.items() if v}
            base = best.get("none")
            results[model].update(best_ms=best, rss_mib=rss, long=long)
            ratios = [
                f"{best[c]:.3f} ({best[c] / base:.2f}x; paired median {paired_median(runs, c):.2f}x)"
                if base
                else f"{best[c]:.3f}"
                for c in configs
                if c != "none"
            ]
            mem = " / ".join(
                f"{rss[c]:.0f}" if c in rss else "-"
                for c in ("none", "deepcontext", "jax.profiler")
            )
            grow = (
                f"{long['rss_mib']:.0f} ({long['rss_mib'] - rss['deepcontext']:+.0f})"
                if long
                else "-"
            )
            rows.append(f"| {model} | {base:.3f} | " + " | ".join(ratios) + f" | {mem} | {grow} |")
            if args.diagnose and model == args.models.split(",")[0]:
                diagnose(py, train_args, args.diagnose)
    table = "\n".join(rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
