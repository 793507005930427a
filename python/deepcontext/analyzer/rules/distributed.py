"""Distributed training: a straggler rank the others wait for, and communication-bound steps.

Both rules read what deepcontext.distributed records in each rank's profile (`dist.*` frames with
comm_wait_time, comm_time, comm_bytes; the `distributed` metadata summary) and the statistics
`deepcontext merge` keeps across ranks (`merged_inputs`, `merged_totals`, `M:mean/min/max`).

rank-straggler (merged profile of >= 2 ranks): the rank that waits least in collectives is the one
the others wait for. It fires when the other ranks wait, on average, >= 10 ms and >= 5 % of their
time longer than it. The path that makes it slow is the call path where the straggler spends the
most time beyond the other ranks' median (exclusive time, outside communication, within the
training loop: the source loop around the collectives' call sites), read from the
per-rank profiles named in `merged_inputs` when they are still there; without them, from the
merged maxima (the slow rank is then named from the waits only).

communication-bound (merged or single-rank profile): every rank, the least-waiting one included,
spends >= 30 % of its time communicating (collective calls + waits outside them + DDP's bucket
wait). Its time is the training loop (first DDP forward to last gradient sync), else the lines of
the source loop around the collectives' call sites. The steps are then bound by communication rather than by a slow rank.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import statistics

from ...errors import ProfileError
from ..engine import NotApplicable, rule
from ..finding import Finding
from ..query import Query, is_user_file
from ._common import fmt_ns

COMM_PREFIXES = ("dist.", "c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:")
MIN_WAIT_NS = 10e6
MIN_WAIT_SHARE = 0.05
COMM_BOUND_SHARE = 0.30


def is_comm(q: Query, node: int) -> bool:
    return q.kind[node] == "operator" and q.name(node).startswith(COMM_PREFIXES)


def time_metric(q: Query) -> str | None:
    for m in ("wall_time", "cpu_time", "op_time"):
        if q.has(m):
            return m
    return None


def _inputs(q: Query) -> list[dict]:
    try:
        inputs = json.loads(q.profile.meta.get("merged_inputs", "[]"))
    except ValueError:
        return []
    return [i for i in inputs if isinstance(i, dict)]


def _rank_label(inp: dict, i: int) -> str:
    r = (inp.get("meta") or {}).get("rank")
    return f"rank {r}" if r not in (None, "") else inp.get("label") or f"input {i}"


def _totals(q: Query, metric: str, n: int) -> list[float] | None:
    try:
        t = json.loads(q.profile.meta.get("merged_totals", "{}")).get(metric)
    except ValueError:
        return None
    if isinstance(t, list) and len(t) == n:
        return [float(v) for v in t]
    return None


def _summary(meta: dict) -> dict:
    try:
        s = json.loads(meta.get("distributed", "{}"))
    except ValueError:
        return {}
    return s if isinstance(s, dict) else {}


def _loop_comm(s: dict) -> float:
    """Communication time of the training loop when it is known (DDP), else of the whole run."""
    if s.get("ddp_loop_time"):
        return s.get("ddp_loop_comm_time", s.get("comm_total_time", 0))
    return s.get("comm_total_time", 0)


def comm_nodes(q: Query) -> list[int]:
    return [n for n in range(len(q.kind)) if is_comm(q, n)]


@functools.lru_cache(maxsize=64)
def _loops(path: str) -> tuple[tuple[int, int], ...]:
    """(first, last) line of every for/while loop of a Python source file (empty if unreadable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return ()
    return tuple(
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.For | ast.While | ast.AsyncFor)
    )


def region(q: Query, nodes: list[int]) -> list[int]:
    """Where the steps run: the line nodes of the training loop, found as the innermost source
    loop (for/while, read from the user's file) around a call path of communication, the one with
    the most collective calls; else the lowest common ancestor of the collectives' user lines."""
    weight: dict[tuple, float] = {}
    for n in nodes:
        w = q.inc(n, "comm_calls") or q.inc(n, "op_count") or 1.0
        for a in (n, *q.ancestors(n)):
            if q.kind[a] != "python":
                continue
            f = q.frame(a)
            if not is_user_file(f.file):
                continue
            around = [lp for lp in _loops(f.file) if lp[0] <= f.line <= lp[1]]
            if around:
                lo, hi = max(around)  # the innermost: the one starting last
                key = (q.parent(a), f.file, f.name, lo, hi)
                weight[key] = weight.get(key, 0.0) + w
                break
    if weight:
        par, file, fn, lo, hi = max(weight, key=weight.get)
        return [
            c
            for c in q.children(par)
            if q.kind[c] == "python"
            and q.frame(c).file == file
            and q.frame(c).name == fn
            and lo <= q.frame(c).line <= hi
        ]
    anchors = [q.user_line[n] if q.user_line[n] >= 0 else n for n in nodes]
    return [q.common_ancestor(anchors)] if anchors else [0]


def _load_rank_profiles(q: Query, inputs: list[dict]):
    from ...reader import load

    base = os.path.dirname(os.path.abspath(q.profile.path))
    out = []
    for inp in inputs:
        p = inp.get("path") or ""
        for cand in (p, os.path.join(base, p), os.path.join(base, os.path.basename(p))):
            if cand and os.path.isfile(cand):
                try:
                    out.append(load(cand))
                    break
                except (ProfileError, OSError):
                    pass
        else:
            return None
    return out


def _map_to(q: Query, prof) -> list[int]:
    """For each node of `prof`, the node of q's profile with the same call path (-1: none)."""
    key: dict[tuple, int] = {}
    qp = q.profile
    for n in range(1, len(qp.node_parent)):
        key[(qp.node_parent[n], qp.frames[qp.node_frame[n]])] = n
    out = [-1] * len(prof.node_parent)
    out[0] = 0
    for n in range(1, len(prof.node_parent)):
        par = out[prof.node_parent[n]]
        if par >= 0:
            out[n] = key.get((par, prof.frames[prof.node_frame[n]]), -1)
    return out


def _candidates(q: Query, tops: list[int]) -> list[int]:
    """Nodes of the region's subtree that are not communication (nor below it), nor the direct
    callers of a collective: their exclusive time is the wait inside collectives that run in C++
    (DDP's parameter check at construction, DDP's backward)."""
    out = []
    stack = list(tops)
    while stack:
        n = stack.pop()
        if is_comm(q, n):
            continue
        kids = q.children(n)
        if not any(is_comm(q, c) for c in kids):
            out.append(n)
        stack.extend(kids)
    return out


class _Ranks:
    """Per-rank facts of a merged profile."""

    def __init__(self, q: Query, metric: str):
        self.q = q
        self.metric = metric
        self.inputs = _inputs(q)
        self.n = len(self.inputs)
        self.labels = [_rank_label(inp, i) for i, inp in enumerate(self.inputs)]
        self.comm = comm_nodes(q)
        self.region = region(q, self.comm)
        self.profiles = _load_rank_profiles(q, self.inputs) if self.n else None
        self.maps = [_map_to(q, p) for p in self.profiles] if self.profiles else None
        waits = _totals(q, "comm_wait_time", self.n)
        self.waits = waits or [
            float(_summary(inp.get("meta") or {}).get("comm_wait_time", 0)) for inp in self.inputs
        ]
        self.region_time = [self._region_time(i) for i in range(self.n)]
        sums = [_summary(inp.get("meta") or {}) for inp in self.inputs]
        self.comm_total = [float(_loop_comm(s)) for s in sums]
        self.ddp_syncs = [
            int((s.get("by_collective", {}).get("ddp_all_reduce") or {}).get("comm_calls", 0))
            for s in sums
        ]

    def _region_time(self, i: int) -> float:
        loop = _summary(self.inputs[i].get("meta") or {}).get("ddp_loop_time")
        if loop:
            return float(loop)
        if self.maps:
            prof, m = self.profiles[i], self.maps[i]
            want = set(self.region)
            return sum(prof.inclusive(n, self.metric) for n in range(len(m)) if m[n] in want)
        return sum(
            self.q.inc(n, f"{self.metric}:mean") or self.q.inc(n, self.metric) for n in self.region
        )

    def exclusive_by_rank(self) -> list[dict[int, float]] | None:
        if not self.maps:
            return None
        out = []
        for prof, m in zip(self.profiles, self.maps, strict=True):
            vals: dict[int, float] = {}
            for node, v in prof._values.get(self.metric, {}).items():
                g = m[node] if node < len(m) else -1
                if g >= 0 and v[0]:
                    vals[g] = vals.get(g, 0.0) + v[0]
            out.append(vals)
        return out


def _merged(q: Query) -> bool:
    try:
        return int(q.profile.meta.get("merged_count", "0")) >= 2
    except ValueError:
        return False


@rule(
    "rank-straggler",
    "A slow rank the other ranks wait for in collectives",
    needs=("comm_wait_time",),
)
def straggler(q: Query):
    if not _merged(q):
        raise NotApplicable("not a merged profile of several ranks (deepcontext merge rank*.dctx)")
    m = time_metric(q)
    if m is None:
        raise NotApplicable("profile has no wall_time, cpu_time or op_time")
    r = _Ranks(q, m)
    if r.n < 2 or len(r.waits) != r.n:
        raise NotApplicable("the merged profile does not list its inputs' waits")
    s = min(range(r.n), key=lambda i: r.waits[i])
    excess = [r.waits[i] - r.waits[s] for i in range(r.n)]
    others = [i for i in range(r.n) if i != s]
    mean_excess = sum(excess[i] for i in others) / len(others)
    mean_time = sum(r.region_time[i] for i in others) / len(others)
    if mean_excess < MIN_WAIT_NS or mean_excess < MIN_WAIT_SHARE * max(mean_time, 1.0):
        return
    # the path that makes the straggler slow
    cands = _candidates(q, r.region)
    per_rank = r.exclusive_by_rank()
    paths = []
    if per_rank is not None:
        for n in cands:
            mine = per_rank[s].get(n, 0.0)
            if mine <= 0:
                continue
            rest = statistics.median(per_rank[i].get(n, 0.0) for i in others)
            if mine - rest > 0:
                paths.append((mine - rest, n, mine, rest))
        how = "per-rank profiles"
    else:
        key = f"{m}:max_input"
        for n in cands:
            mx, mean = q.exc(n, f"{m}:max"), q.exc(n, f"{m}:mean")
            who = q.profile.props.get(n, {}).get(key)
            if mx - mean > 0 and (who is None or who == r.labels[s]):
                paths.append((mx - mean, n, mx, mean))
        how = "merged maxima (per-rank profiles not found)"
    paths.sort(key=lambda t: -t[0])
    node = paths[0][1] if paths else (r.region[0] or None)
    top = [
        {
            "path": q.path_labels(n),
            "source": q.source_label(n),
            "straggler_time": mine,
            "others_median": rest,
            "excess": d,
        }
        for d, n, mine, rest in paths[:3]
    ]
    where = f" at {q.source_label(node)}" if node else ""
    extra = f" (+{fmt_ns(paths[0][0])} there)" if paths else ""
    syncs = max(r.ddp_syncs) if r.ddp_syncs else 0
    per_step = f", {fmt_ns(mean_excess / syncs)} per step" if syncs else ""
    slowest_waiter = max(others, key=lambda i: excess[i])
    yield Finding(
        summary=(
            f"{r.labels[s]} is a straggler: the other ranks wait {fmt_ns(mean_excess)} more than "
            f"it in collectives ({mean_excess / max(mean_time, 1.0):.0%} of their time{per_step}); "
            f"it is slow{where}{extra}"
        ),
        suggestion=(
            f"Make {r.labels[s]} as fast as the others at the path below: balance the work across "
            "ranks (equal batch shapes and sequence lengths per rank, an even DistributedSampler), "
            "take slow input loading or logging/checkpointing off the step (DataLoader workers, "
            "do it on every rank or asynchronously), and check that rank's host/GPU for contention."
        ),
        metric=m,
        time=sum(excess),
        saving=sum(excess),
        estimate="the other ranks' extra wait in collectives over the straggler's, summed over "
        "ranks: it goes away when the straggler is as fast as the rest",
        evidence={
            "straggler_rank": r.labels[s],
            "waits": {r.labels[i]: r.waits[i] for i in range(r.n)},
            "rank_time": {r.labels[i]: r.region_time[i] for i in range(r.n)},
            "mean_extra_wait": mean_excess,
            "most_waiting_rank": r.labels[slowest_waiter],
            "ddp_steps": syncs,
            "slow_paths": top,
            "slow_path_from": how,
        },
        node=node,
        nodes=[t[1] for t in paths[:3]],
    )


@rule(
    "communication-bound",
    "Steps bound by communication on every rank",
    needs=("comm_time", "comm_wait_time"),
)
def communication_bound(q: Query):
    m = time_metric(q)
    if m is None:
        raise NotApplicable("profile has no wall_time, cpu_time or op_time")
    comm = comm_nodes(q)
    if not comm:
        return
    top = [n for n in comm if q.name(n).startswith("dist.") and q.name(n) != "dist.wait"]
    top += [
        n
        for n in comm
        if q.name(n) == "dist.wait" and not any(is_comm(q, a) for a in q.ancestors(n))
    ]
    if _merged(q):
        r = _Ranks(q, m)
        labels, totals, times = r.labels, r.comm_total, r.region_time
    else:
        s = _summary(q.profile.meta)
        reg = region(q, comm)
        labels = [f"rank {q.profile.meta['rank']}" if "rank" in q.profile.meta else "this process"]
        totals = [float(_loop_comm(s))]
        times = [float(s.get("ddp_loop_time") or sum(q.inc(n, m) for n in reg))]
    shares = [t / x if x > 0 else 0.0 for t, x in zip(totals, times, strict=True)]
    if not shares or min(shares) < COMM_BOUND_SHARE:
        return

    def value(n: int) -> float:
        if q.name(n) in ("dist.wait", "dist.ddp_wait"):
            return q.inc(n, "comm_wait_time")
        return q.inc(n, "comm_time")

    top.sort(key=lambda n: -value(n))
    node = top[0] if top else comm[0]
    heaviest = [
        {
            "frame": q.name(n),
            "source": q.source_label(n),
            "time": value(n),
            "bytes": q.inc(n, "comm_bytes"),
            "calls": q.inc(n, "comm_calls"),
        }
        for n in top[:5]
    ]
    total = sum(totals)
    if len(labels) > 1:
        who = f"every rank spends >= {min(shares):.0%} of its time in collectives"
        caveat = ""
    else:
        who = f"{labels[0]} spends {shares[0]:.0%} of its time in collectives"
        caveat = (
            " One rank's profile cannot tell slow communication from waiting for a slower rank: "
            "merge the ranks' profiles (deepcontext merge) and analyze the merged one."
        )
    yield Finding(
        summary=(
            f"communication-bound: {who}; the heaviest is {q.name(node)} at {q.source_label(node)}"
        ),
        suggestion=(
            "Communicate less often or overlap it: gradient accumulation with DDP's no_sync() for "
            "all but the last micro-batch, a larger bucket_cap_mb, a bf16/fp16 compression comm "
            "hook, a larger per-rank batch; collectives in the loop for logging (loss all_reduce) "
            "every N steps or with async_op=True." + caveat
        ),
        metric=m,
        time=total,
        saving=0.5 * total,
        estimate="half of the communication time: overlapped with compute or halved in volume",
        evidence={
            "comm_share": dict(zip(labels, shares, strict=True)),
            "comm_time": dict(zip(labels, totals, strict=True)),
            "heaviest": heaviest,
        },
        node=node,
        nodes=top[:5],
    )
