"""CPU sampling: shares at file:line, scopes, threads, native frames under the Python line."""

from __future__ import annotations

import json
import subprocess
import sys

import deepcontext
import pytest
from core_helpers import line_of

SHARES = """
import deepcontext

def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x

def sixty():
    return spin(6_000_000)  # LINE60

def thirty():
    return spin(3_000_000)  # LINE30

def ten():
    return spin(1_000_000)  # LINE10

for _ in range(3):
    sixty(); thirty(); ten()
"""


def by_line(profile, file_suffix: str, line: int, metric: str = "cpu_time") -> float:
    total = 0.0
    for node in profile.nodes():
        f = node.frame
        if f.kind == "python" and f.file.endswith(file_suffix) and f.line == line:
            # Count each node once even if the line recurses: only outermost occurrences.
            if not any(
                p.kind == "python" and p.file.endswith(file_suffix) and p.line == line
                for p in node.path()[:-1]
            ):
                total += node.inclusive(metric)
    return total


def test_cpu_shares_match_work_at_source_lines(run_program):
    _, out = run_program(SHARES)
    p = deepcontext.load(out)
    parts = {k: by_line(p, "prog.py", line_of(SHARES, f"LINE{k}")) for k in (60, 30, 10)}
    total = sum(parts.values())
    assert total > 0.5e9  # the program burns well over half a second of CPU
    for k, v in parts.items():
        assert abs(100 * v / total - k) <= 5, parts
    # cpu_time is also the share of the whole profile: the three lines dominate it.
    assert total >= 0.85 * p.total("cpu_time")
    assert p.meta["complete"] == "1"
    # Samples at the loop's back edge (an instruction without a line) still name a real line.
    assert all(
        n.frame.line > 0
        for n in p.nodes()
        if n.frame.kind == "python" and n.frame.file.endswith("prog.py")
    )


SCOPES = """
import deepcontext

def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x

@deepcontext.scope
def decorated():
    return spin(2_000_000)

@deepcontext.scope("named")
def named():
    return spin(2_000_000)

with deepcontext.scope("load"):
    spin(3_000_000)  # INSIDE
decorated()
named()
"""


def test_user_scopes_wrap_the_lines_inside(run_program):
    _, out = run_program(SCOPES)
    p = deepcontext.load(out)
    scopes = {n.frame.name: n for n in p.nodes() if n.frame.kind == "scope"}
    assert set(scopes) == {"load", "decorated", "named"}
    load = scopes["load"]
    # The scope sits under the line of the `with` and above the work inside it.
    assert load.parent.frame.kind == "python" and load.parent.frame.name == "<module>"
    inside = line_of(SCOPES, "INSIDE")
    lines = {c.frame.line for c in load.children}
    assert inside in lines
    assert load.inclusive("cpu_time") > 0.5 * scopes["decorated"].inclusive("cpu_time")
    # No frame of deepcontext itself appears in any path.
    assert not any("deepcontext" in n.frame.file for n in p.nodes() if n.frame.kind == "python")


THREADS = """
import threading, time

def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x

used = {}  # each worker's own CPU time, as the kernel counts it

# Long enough for tens of samples each on a fast machine (the GIL hands off every 5 ms).
def worker_a():
    spin(16_000_000)  # A
    used["a"] = time.thread_time()

def worker_b():
    spin(8_000_000)  # B
    used["b"] = time.thread_time()

ta = threading.Thread(target=worker_a, name="alpha")
tb = threading.Thread(target=worker_b, name="beta")
ta.start(); tb.start(); ta.join(); tb.join()
print(used["a"], used["b"])
# Tens of samples for the main thread too.
spin(4_000_000)  # MAIN
"""


def test_threads_are_attributed_separately(run_program):
    proc, out = run_program(THREADS)
    used_a, used_b = (float(v) * 1e9 for v in proc.stdout.split())
    p = deepcontext.load(out)
    threads = {n.frame.name: n for n in p.root.children if n.frame.kind == "thread"}
    assert {"alpha", "beta", "MainThread"} <= set(threads)
    a = by_line(p, "prog.py", line_of(THREADS, "# A"))
    b = by_line(p, "prog.py", line_of(THREADS, "# B"))
    assert threads["alpha"].inclusive("cpu_time") >= 0.9 * a > 0
    assert threads["beta"].inclusive("cpu_time") >= 0.9 * b > 0
    # With the GIL the two workers interleave, yet CPU time follows each thread's own: all of
    # it, including what a thread used before the sampler first saw it.
    assert a == pytest.approx(used_a, rel=0.1), (a, used_a)
    assert b == pytest.approx(used_b, rel=0.1), (b, used_b)
    # Counted once: not a second time as a thread without Python when its tstate is gone.
    others = sum(
        n.inclusive("cpu_time")
        for k, n in threads.items()
        if k not in ("alpha", "beta", "MainThread")
    )
    assert others < 0.05 * p.total("cpu_time"), {
        k: n.inclusive("cpu_time") for k, n in threads.items()
    }
    assert by_line(p, "prog.py", line_of(THREADS, "# MAIN")) > 0


TOTALS = """
import time

t0 = time.thread_time()
x = 0
for i in range(3_000_000):
    x += i
print(time.thread_time() - t0)
"""


def test_cpu_time_totals_the_threads_clock(run_program):
    proc, out = run_program(TOTALS)
    measured = float(proc.stdout.split()[-1]) * 1e9
    p = deepcontext.load(out)
    main = next(
        n for n in p.root.children if n.frame.kind == "thread" and n.frame.name == "MainThread"
    )
    # Samples carry the exact CPU time since the thread's previous one; the first interval (from
    # the start of sampling) and the last (to its stop) are counted too, so nothing of the
    # script's CPU time is missing (it was short by up to two intervals, ~10 % here).
    assert main.inclusive("cpu_time") >= 0.99 * measured
    # And nothing is counted twice: the profile spans the script plus its start and exit.
    assert main.inclusive("cpu_time") <= measured + 0.5e9


MANY_THREADS = """
import os, threading, time

go = threading.Event()
threads = [threading.Thread(target=go.wait) for _ in range(300)]
for t in threads:
    t.start()
time.sleep(0.3)  # the sampler sees every thread for many ticks
print(len(os.listdir("/proc/self/fd")))
go.set()
for t in threads:
    t.join()
"""


def test_descriptors_stay_bounded_with_many_threads(run_program):
    # Per-thread files (schedstat, hardware counters) count against the program's limit of open
    # files (often 1024): a program with a large thread pool must not run out because of us.
    plain = subprocess.run(
        [sys.executable, "-c", MANY_THREADS], capture_output=True, text=True, timeout=60
    )
    assert plain.returncode == 0, plain.stderr
    proc, out = run_program(MANY_THREADS)
    extra = int(proc.stdout.split()[-1]) - int(plain.stdout.split()[-1])
    assert extra < 150, f"{extra} more descriptors under profiling with 300 threads"
    p = deepcontext.load(out)
    assert p.total("cpu_time") > 0


NATIVE = """
import numpy as np

a = np.random.rand(2_000_000)
for _ in range(200):
    b = np.sort(a)  # SORT
"""


def test_native_frames_sit_under_the_python_line(run_program):
    _, out = run_program(NATIVE, "--native")
    p = deepcontext.load(out)
    sort_line = line_of(NATIVE, "SORT")
    line_nodes = [
        n
        for n in p.nodes()
        if n.frame.kind == "python"
        and n.frame.line == sort_line
        and n.frame.file.endswith("prog.py")
    ]
    assert line_nodes
    native_below = [
        n
        for ln in line_nodes
        for n in ln.walk()
        if n.frame.kind == "native" and "multiarray" in n.frame.module
    ]
    assert native_below, "numpy's C frames must appear under the line that called np.sort"
    native_cpu = sum(
        n.exclusive("cpu_time") for ln in line_nodes for n in ln.walk() if n.frame.kind == "native"
    )
    assert native_cpu >= 0.5 * sum(ln.inclusive("cpu_time") for ln in line_nodes)
    # Interpreter frames are replaced by Python frames, not shown.
    assert not any(n.frame.name == "_PyEval_EvalFrameDefault" for n in p.nodes())


def test_without_native_there_are_no_native_frames(run_program):
    _, out = run_program(NATIVE)
    p = deepcontext.load(out)
    assert not any(n.frame.kind == "native" for n in p.nodes())


POOL = """
import os
import numpy as np
import deepcontext._core as core

def fanned_out():
    a = np.random.rand(1200, 1200)
    core.set_worker_context(core.current())  # WORKER
    for _ in range(10):
        a @ a
    core.set_worker_context(0)

def unowned():
    a = np.random.rand(1200, 1200)
    for _ in range(5):
        a @ a

fanned_out()
unowned()
"""


def test_threads_without_python_are_sampled_under_the_worker_context(run_program):
    # OpenBLAS runs the matrix products on its own pthreads, which never run Python.
    _, out = run_program(POOL, env={"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"})
    p = deepcontext.load(out)
    worker_line = line_of(POOL, "WORKER")
    pool_nodes = [n for n in p.nodes() if n.frame.kind == "thread" and n.frame.name != "MainThread"]
    under_line = [
        n
        for n in pool_nodes
        if any(f.kind == "python" and f.line == worker_line for f in n.path()[:-1])
    ]
    at_root = [n for n in pool_nodes if n.parent is not None and n.parent.frame.kind == "root"]
    assert under_line, "the pool's samples belong under the line that set the worker context"
    assert at_root, "without a worker context the pool's samples go under the root"
    pool_cpu = sum(n.inclusive("cpu_time") for n in under_line)
    assert pool_cpu > 0.2 * p.total("cpu_time")
    # The sampler's own thread and the checkpoint thread never appear.
    assert not any(n.frame.name.startswith("dctx-") for n in pool_nodes)


WALL = """
import queue, threading

def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x

jobs = queue.Queue()

def feeder():  # idle: waits for the queue the whole run
    jobs.get()

t = threading.Thread(target=feeder, name="feeder")
t.start()
for _ in range(3):
    spin(1_500_000)  # WORK
jobs.put(None)
t.join()
"""


def test_wall_time_total_is_the_elapsed_time_not_the_threads_sum(run_program):
    _, out = run_program(WALL)
    p = deepcontext.load(out)
    elapsed = float(p.meta["elapsed_ns"])
    threads = {n.frame.name: n for n in p.root.children if n.frame.kind == "thread"}
    main, feeder = threads["MainThread"], threads["feeder"]
    # Each thread's wall time is its own, a part of the run's elapsed time; the idle feeder's is
    # about the main thread's, so the two add up to about twice the run.
    for n in (main, feeder):
        assert 0 < n.inclusive("wall_time") <= elapsed
    assert main.inclusive("wall_time") + feeder.inclusive("wall_time") > 1.5 * elapsed
    assert p.total("wall_time") == elapsed
    r = subprocess.run(
        [sys.executable, "-m", "deepcontext", "report", str(out), "-m", "wall_time"]
        + ["--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(r.stdout)
    root = doc["tree"]
    assert root["metrics"]["wall_time"]["inclusive"] == elapsed
    assert doc["metrics"][0]["total"] == elapsed
    shown = {c["frame"]["name"]: c for c in root["children"] if c["frame"]["kind"] == "thread"}
    assert shown["feeder"]["metrics"]["wall_time"]["inclusive"] == feeder.inclusive("wall_time")
    # The text report: the root is the elapsed time, and no row is more than 100 % of it.
    text = subprocess.run(
        [sys.executable, "-m", "deepcontext", "report", str(out), "-m", "wall_time"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares = [
        float(cells[0][:-1])
        for cells in (line.split() for line in text.splitlines())
        if cells and cells[0].endswith("%") and cells[0][:-1].replace(".", "").isdigit()
    ]
    assert shares and max(shares) <= 100.0, text
    assert "the total is the elapsed time" in text


def test_a_stack_deeper_than_512_frames_keeps_its_outermost_frames(tmp_path):
    # 700 frames of recursion under main(): the cut keeps the program's entry, not the innermost.
    prog = tmp_path / "deep.py"
    prog.write_text(
        "import sys, time\n"
        "sys.setrecursionlimit(5000)\n"
        "def down(n):\n"
        "    if n:\n"
        "        return down(n - 1)\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 0.5:\n"
        "        pass\n"
        "def main():\n"
        "    down(700)\n"
        "main()\n"
    )
    out = tmp_path / "deep.dctx"
    subprocess.run(
        [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), str(prog)],
        check=True,
        capture_output=True,
    )
    p = deepcontext.load(out)
    assert p.find("main", file="deep.py"), "the outermost frames were cut"
    notes = [n for n in p.notes if "512" in n]
    assert len(notes) == 1 and "outermost" in notes[0] and "deep" in notes[0], p.notes
