"""CPU profiling overhead: the same workload without a profiler, under deepcontext (default and
--native), py-spy, pyinstrument and cProfile, in one run. Reports the median wall time and the
CPU time (user+sys of the whole process tree) of several runs each, and their ratios against no
profiler. Usage: python bench/cpu_overhead.py [--repeat 5] [--scale 1.0]"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "cpu", "workload.py")


def tools(py: str, out: str) -> dict[str, list[str] | None]:
    pyspy = shutil.which("py-spy", path=os.path.dirname(py)) or shutil.which("py-spy")
    return {
        "none": [py, WORKLOAD],
        "deepcontext": [py, "-m", "deepcontext", "run", "-q", "-o", f"{out}/d.dctx", WORKLOAD],
        "deepcontext --native": [
            py,
            "-m",
            "deepcontext",
            "run",
            "-q",
            "--native",
            "-o",
            f"{out}/n.dctx",
            WORKLOAD,
        ],
        "py-spy (100 Hz)": [
            pyspy,
            "record",
            "-r",
            "100",
            "-o",
            f"{out}/s.txt",
            "-f",
            "raw",
            "--",
            py,
            WORKLOAD,
        ]
        if pyspy
        else None,
        "pyinstrument": [py, "-m", "pyinstrument", "-o", f"{out}/p.txt", WORKLOAD],
        "cProfile": [py, "-m", "cProfile", "-o", f"{out}/c.prof", WORKLOAD],
    }


def measure(cmd: list[str], scale: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([*cmd, scale], capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr.strip().splitlines()[-1:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", default="5.0")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="dctx-bench-")
    cmds = tools(sys.executable, out)
    results: dict[str, tuple[float, float]] = {}
    errors: dict[str, str] = {}
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    # Interleave the tools run by run so drifts of the machine hit all of them alike.
    for _ in range(args.repeat):
        for name, cmd in cmds.items():
            if cmd is None or name in errors:
                continue
            try:
                samples[name].append(measure(cmd, args.scale))
            except RuntimeError as exc:
                errors[name] = str(exc)
    for name, s in samples.items():
        if s:
            results[name] = (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
    base_wall, base_cpu = results["none"]
    print(f"machine: {platform.node()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print(f"{'tool':24} {'wall s':>8} {'x wall':>7} {'cpu s':>8} {'x cpu':>7}")
    for name, (wall, cpu) in results.items():
        print(f"{name:24} {wall:8.3f} {wall / base_wall:7.3f} {cpu:8.3f} {cpu / base_cpu:7.3f}")
    for name, err in errors.items():
        print(f"{name:24} not measured: {err}")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
