"""The training loop waits for its input: the host spends a large part of the loop in the
DataLoader's `__next__` (loading in the main process, waiting for too few workers, or receiving
their batches), and on a GPU the device idles meanwhile."""

from __future__ import annotations

import re

from ..engine import rule
from ..finding import Finding
from ..query import Query
from ._common import cpu_metric, enclosing_call, fmt_ns, outermost

LOADER_FILE = re.compile(r"torch/utils/data/dataloader\.py$")
FETCH_FILE = re.compile(r"torch/utils/data/_utils/fetch\.py$")
WAIT_FILE = re.compile(r"/(selectors|threading)\.py$|multiprocessing/connection\.py$")
WAIT_FUNC = re.compile(r"(^|\.)(select|wait|_poll|poll)$")
IPC_FILE = re.compile(r"torch/multiprocessing/reductions\.py$|multiprocessing/resource_sharer\.py$")
IDLE = "gpu_idle_time"
MIN_SHARE = 0.15

SUGGEST_WORKERS = (
    "Load in worker processes and overlap with the step: `DataLoader(..., num_workers=N, "
    "pin_memory=True, persistent_workers=True, prefetch_factor=2)` with N about the free cores; "
    "move per-sample work out of `__getitem__` (pre-decode, batch transforms on the device)."
)
SUGGEST_MORE = (
    "The workers do not keep up: raise `num_workers` (not beyond the free cores) and "
    "`prefetch_factor`, use `persistent_workers=True` and `pin_memory=True`, and make "
    "`__getitem__` cheaper (the heaviest lines in the evidence)."
)
SUGGEST_IPC = (
    "Receiving batches from the workers dominates (tensors passed as file descriptors): use "
    "larger batches, return one tensor per batch, or "
    "`torch.multiprocessing.set_sharing_strategy('file_system')`."
)


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
    needs=("wall_time", "cpu_time", IDLE),
)
def check(q: Query):
    loaders = _loader_nodes(q)
    m = cpu_metric(q)
    if not loaders or m is None:
        return
    idle_m = IDLE if q.has(IDLE) else None
    # GPU idle is charged to the launch that ends the gap (the step's first kernel after loading),
    # so the loader's share is measured on the host; the GPU's idle total is evidence.
    # One finding per loop: the loader calls grouped by the function call that iterates them,
    # from the `for` line on (setup code before the loop does not count).
    loops: dict[tuple, list[int]] = {}
    for n in loaders:
        loops.setdefault(tuple(enclosing_call(q, n, from_line=True)), []).append(n)
    for loop, nodes in loops.items():
        load = sum(q.inc(n, m) for n in nodes)
        loop_t = sum(q.inc(n, m) for n in loop)
        if loop_t <= 0:
            continue
        inner = [d for n in nodes for d in q.descendants(n, kind="python")]
        in_process = any(FETCH_FILE.search(q.frame(d).file) for d in inner)
        waits = [
            d
            for d in inner
            if WAIT_FILE.search(q.frame(d).file) and WAIT_FUNC.search(q.frame(d).name)
        ]
        wait_t = sum(q.inc(d, m) for d in outermost(q, waits))
        ipc_t = sum(
            q.inc(d, m)
            for d in outermost(q, [d for d in inner if IPC_FILE.search(q.frame(d).file)])
        )
        if in_process:
            cause, basis, suggestion = "loading in the main process", load, SUGGEST_WORKERS
        elif wait_t >= ipc_t:
            # With workers, only blocked waiting says they do not keep up.
            cause, basis, suggestion = "waiting for workers", wait_t, SUGGEST_MORE
        else:
            cause, basis, suggestion = "receiving batches from workers", ipc_t, SUGGEST_IPC
        share = basis / loop_t
        if share < MIN_SHARE:
            continue
        # Loading that overlaps the rest of the step hides behind it: at best the loop takes
        # max(load, rest) instead of load + rest.
        rest = loop_t - load
        saving = min(basis, rest) if rest > 0 else 0.5 * basis
        heavy = q.group_by("line", m, within=nodes)[:3]
        yield Finding(
            summary=(
                f"{share:.0%} of the loop's {m} is spent in DataLoader.__next__ ({cause})"
                + (f"; the GPU was idle {fmt_ns(q.total(idle_m))} in all" if idle_m else "")
            ),
            suggestion=suggestion,
            metric=m,
            time=basis,
            saving=saving,
            estimate="loading fully overlapped with the rest of the step: min(load time, rest of the loop)",
            evidence={
                "metric": m,
                "loader_time": load,
                "loop_time": loop_t,
                "share_of_loop": share,
                "loading_in_main_process": in_process,
                "blocked_waiting": wait_t,
                "ipc_time": ipc_t,
                "gpu_idle_total": q.total(idle_m) if idle_m else None,
                "heaviest_lines": [
                    {"line": f"{g.key[0]}:{g.key[1]} ({g.key[2]})", "time": g.value} for g in heavy
                ],
            },
            node=nodes[0],
            nodes=nodes,
        )
