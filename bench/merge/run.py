"""The merge benchmark: 64 synthetic per-rank profiles of 100,000 nodes each (make_profiles.py),
merged by `deepcontext merge`; prints the wall time, the CPU time of the merge and its children,
the load of the machine around it, and checks the merged totals against the inputs'.

    python bench/merge/run.py [--dir /tmp/dctx-merge-bench] [--inputs 64] [--nodes 100000]
                              [--repeat 3] [--jobs N]

Inputs are generated once into --dir (kept between runs; delete it to regenerate). The goal
(issue 8): <= 30 s for 64 x 100,000 nodes.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def total(path: str, metric: str = "cpu_time") -> float:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = con.execute(
            "SELECT nm.inc FROM node_metrics nm JOIN metrics m ON m.id = nm.metric "
            "WHERE nm.node = 0 AND m.name = ?",
            (metric,),
        ).fetchone()
        return row[0] if row else 0.0
    finally:
        con.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/dctx-merge-bench")
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args()
    ins_dir = os.path.join(a.dir, f"in-{a.inputs}x{a.nodes}")
    inputs = sorted(glob.glob(os.path.join(ins_dir, "rank*.dctx")))
    if len(inputs) != a.inputs:
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, os.path.join(HERE, "make_profiles.py"), ins_dir]
            + ["--inputs", str(a.inputs), "--nodes", str(a.nodes)],
            check=True,
        )
        print(f"generated inputs in {time.perf_counter() - t:.1f} s")
        inputs = sorted(glob.glob(os.path.join(ins_dir, "rank*.dctx")))
    out = os.path.join(a.dir, "merged.dctx")
    cmd = [sys.executable, "-m", "deepcontext", "merge", "-q", *inputs, "-o", out]
    if a.jobs:
        cmd += ["--jobs", str(a.jobs)]
    want = sum(total(p) for p in inputs)
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )
    print(f"command: deepcontext merge -q <{len(inputs)} inputs of {a.nodes} nodes> -o {out}")
    walls = []
    for r in range(a.repeat):
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        got = total(out)
        ok = "ok" if got == want else f"MISMATCH ({got} != {want})"
        walls.append(wall)
        print(
            f"run {r + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU, load before {load:.1f}, "
            f"after {os.getloadavg()[0]:.1f}; peak RSS {after.ru_maxrss / 1024:.0f} MiB; "
            f"totals {ok}"
        )
    best = min(walls)
    print(f"best {best:.1f} s, median {sorted(walls)[len(walls) // 2]:.1f} s (goal <= 30 s)")
    return 0 if best <= 30 else 1


if __name__ == "__main__":
    raise SystemExit(main())
