"""The training loop waits for its input: the host spends a large part of the step in the
DataLoader's `__next__` (loading in the main process, or waiting for too few workers), and on a GPU
the device idles meanwhile."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import cpu_metric, enclosing_call, fmt_ns, outermost

LOADER_FILE = re.compile(r"torch/utils/data/dataloader\.py$")
FETCH_FILE = re.compile(r"torch/utils/data/_utils/fetch\.py$")
MIN_SHARE = 0.15
MIN_IDLE_SHARE = 0.05


def _loader_nodes(q: Query) -> list[int]:
    out = []
    for n in q.nodes_of_kind("python"):
        f = q.frame(n)
        if f.name.endswith("__next__") and LOADER_FILE.search(f.file):
            out.append(n)
    return outermost(q, out)


@rule(
    "data-loader-stall",
    "The step waits for the data loader",
    needs=("wall_time", "cpu_time", "gpu_idle"),
)
def check(q: Query):
    loaders = _loader_nodes(q)
    if not loaders:
        return
    m = cpu_metric(q)
    idle_m = "gpu_idle" if q.has("gpu_idle") else None
    # One finding per loop: the loader calls grouped by the function call that iterates them.
    loops: dict[tuple, list[int]] = {}
    for n in loaders:
        loops.setdefault(tuple(enclosing_call(q, n, from_line=True)), []).append(n)
    for loop, nodes in loops.items():
        load = sum(q.inc(n, m) for n in nodes) if m else 0.0
        thread_total = sum(q.inc(n, m) for n in loop) if m else 0.0
        idle = sum(q.inc(n, idle_m) for n in nodes) if idle_m else 0.0
        in_process = any(
            FETCH_FILE.search(q.frame(d).file)
            for n in nodes
            for d in q.descendants(n, kind="python")
        )
        load_share = load / thread_total if thread_total > 0 else 0.0
        if idle_m:
            idle_share = q.share(idle, idle_m)
            if idle_share < MIN_IDLE_SHARE and load_share < MIN_SHARE:
                continue
        elif load_share < MIN_SHARE:
            continue
        # Loading that overlaps the rest of the step hides behind it: at best the step becomes
        # max(load, rest) instead of load + rest.
        rest = thread_total - load
        saving = min(load, rest) if rest > 0 else 0.5 * load
        heavy = q.group_by("line", m, within=nodes)[:3] if m else []
        if in_process:
            suggestion = (
                "Load in worker processes and overlap with the step: `DataLoader(..., num_workers=N, "
                "pin_memory=True, persistent_workers=True, prefetch_factor=2)` with N about the free "
                "cores; move per-sample work out of `__getitem__` (pre-decode, batch transforms on "
                "the device)."
            )
        else:
            suggestion = (
                "The workers do not keep up: raise `num_workers` (not beyond the free cores), "
                "`prefetch_factor`, use `persistent_workers=True` and `pin_memory=True`, and make "
                "`__getitem__` cheaper (the heaviest lines below)."
            )
        metric = idle_m if idle_m and q.has("gpu_time") else m
        time = idle if metric == idle_m else load
        yield Finding(
            summary=(
                f"{load_share:.0%} of the loop's {m} is spent in DataLoader.__next__ "
                f"({'loading in the main process' if in_process else 'waiting for workers'})"
                + (f"; the GPU idles {fmt_ns(idle)} meanwhile" if idle_m else "")
            ),
            suggestion=suggestion,
            metric=metric,
            time=time,
            saving=saving if metric == m else min(idle, saving),
            estimate=(
                "loading fully overlapped with the rest of the step: min(load time, rest of the step)"
                + ("; at most the GPU idle time during loading" if metric == idle_m else "")
            ),
            evidence={
                "load_time": load,
                "loop_time": thread_total,
                "load_share_of_loop": load_share,
                "gpu_idle_during_load": idle if idle_m else None,
                "loading_in_main_process": in_process,
                "heaviest_lines": [
                    {"line": f"{g.key[0]}:{g.key[1]} ({g.key[2]})", "time": g.value} for g in heavy
                ],
                "metric": m,
            },
            node=nodes[0],
            nodes=nodes,
        )
