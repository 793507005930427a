"""The query layer the analyzer's rules (built-in and custom) are written against.

A Query wraps a loaded Profile and precomputes, for every node, the context a finding names: the
innermost user source line, the nn.Module path, the outermost and innermost framework operator, the
enclosing backward marker and the thread. On top of that it offers find by name/regex, grouping of a
metric by source line / operator / kernel / module, and helpers to build findings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from ..reader import Frame, Node, Profile, elapsed_ns

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPU_TIME_METRICS = ("gpu_time",)
CPU_TIME_METRICS = ("cpu_time", "wall_time", "op_time")
IDLE_METRIC = "gpu_idle_time"
COMPILE = "xla_compile("  # the scope jax_support.py opens around each XLA compilation
# Host time to issue one eager kernel (Python, dispatcher, cudaLaunchKernel) without a profiler
# attached. A kernel shorter than this leaves the device idle for the difference when kernels are
# issued back to back. Calibrated on the H200 machine (docs/case-studies.md): launches x
# max(0, 10 us - kernel time) matched the unprofiled step time minus the kernels' time of the
# case studies within 0.4 ms/step (transformer before: 6.7 modeled vs 6.3 ms/step measured).
LAUNCH_HOST_NS = 10_000.0


def is_user_file(path: str) -> bool:
    """True for a source file of the profiled program, False for the standard library, installed
    packages (torch, numpy, ...), DeepContext itself and synthetic files (`<frozen ...>`)."""
    if not path or path.startswith("<"):
        return False
    p = path.replace("\\", "/")
    if "/site-packages/" in p or "/dist-packages/" in p:
        return False
    if re.search(r"/lib/python\d+(\.\d+)?/", p):
        return False
    if os.path.abspath(path).startswith(_PKG_DIR + os.sep):
        return False
    return True


@dataclass
class Group:
    """One row of Query.group_by: the key, the summed value, and the nodes that contributed."""

    key: Hashable
    value: float = 0.0
    count: int = 0
    share: float = 0.0
    nodes: list[int] = field(default_factory=list)
    anchors: list[int] = field(default_factory=list)


class Query:
    """Read-only queries over one profile; cheap after construction (one pass over the tree)."""

    def __init__(self, profile: Profile):
        self.profile = profile
        n = len(profile.node_parent)
        parent = profile.node_parent
        frames = profile.frames
        nf = profile.node_frame
        self.kind = [frames[nf[i]].kind for i in range(n)]
        self.depth = [0] * n
        self.user_line = [-1] * n
        self.module = [-1] * n
        self.top_op = [-1] * n
        self.leaf_op = [-1] * n
        self.backward = [-1] * n
        self.thread = [-1] * n
        self.python = [-1] * n
        self.compile = [-1] * n  # the enclosing xla_compile(<module>) scope
        self._launch_idle: dict[int, float] | None = None
        user_cache: dict[str, bool] = {}
        for i in range(1, n):
            p = parent[i]
            k = self.kind[i]
            self.depth[i] = self.depth[p] + 1
            self.user_line[i] = self.user_line[p]
            self.module[i] = self.module[p]
            self.top_op[i] = self.top_op[p]
            self.leaf_op[i] = self.leaf_op[p]
            self.backward[i] = self.backward[p]
            self.thread[i] = self.thread[p]
            self.python[i] = self.python[p]
            self.compile[i] = self.compile[p]
            if k == "python":
                self.python[i] = i
                f = frames[nf[i]].file
                u = user_cache.get(f)
                if u is None:
                    u = user_cache[f] = is_user_file(f)
                if u:
                    self.user_line[i] = i
            elif k == "module":
                self.module[i] = i
            elif k in ("operator", "hlo_op"):
                if self.top_op[i] < 0:
                    self.top_op[i] = i
                self.leaf_op[i] = i
            elif k == "backward":
                self.backward[i] = i
            elif k == "thread":
                self.thread[i] = i
            elif k == "scope" and self.compile[i] < 0 and frames[nf[i]].name.startswith(COMPILE):
                self.compile[i] = i

    # -- basics -------------------------------------------------------------------------------
    def frame(self, node: int) -> Frame:
        return self.profile.frames[self.profile.node_frame[node]]

    def name(self, node: int) -> str:
        return self.frame(node).name

    def compiling(self, node: int) -> bool:
        """Inside an XLA compilation (GPU autotuning runs and synchronizes candidate kernels
        there: the compiler's work, not the program's steps)."""
        return self.compile[node] >= 0

    def parent(self, node: int) -> int:
        return self.profile.node_parent[node]

    def children(self, node: int) -> list[int]:
        return self.profile.node_children[node]

    def has(self, metric: str) -> bool:
        return metric in self.profile.metrics and self.total(metric) > 0

    def values(self, metric: str) -> dict[int, tuple]:
        """node -> (sum, count, min, max, inc) for every node with a value (empty if absent)."""
        return self.profile._values.get(metric, {})

    def inc(self, node: int, metric: str) -> float:
        v = self.values(metric).get(node)
        return v[4] if v else 0.0

    def exc(self, node: int, metric: str) -> float:
        v = self.values(metric).get(node)
        return v[0] if v else 0.0

    def count(self, node: int, metric: str) -> int:
        """Exclusive count of the metric at the node (e.g. calls of an operator, launches)."""
        v = self.values(metric).get(node)
        return int(v[1]) if v else 0

    def inc_count(self, node: int, metric: str) -> int:
        """Count of the metric summed over the node's subtree."""
        vals = self.values(metric)
        return sum(int(vals[d][1]) for d in self.subtree(node) if d in vals)

    def total(self, metric: str) -> float:
        return self.inc(0, metric)

    def share(self, value: float, metric: str) -> float:
        t = self.total(metric)
        return value / t if t > 0 else 0.0

    def time_metric(self, prefer_gpu: bool = True) -> str | None:
        """The metric a share of "total time" is taken of: GPU time when the profile has it (and
        prefer_gpu), else CPU time, wall time, operator time."""
        order = GPU_TIME_METRICS + CPU_TIME_METRICS if prefer_gpu else CPU_TIME_METRICS
        for m in order:
            if self.has(m):
                return m
        return None

    def is_gpu(self) -> bool:
        return self.has("gpu_time")

    # -- GPU idle between launches ------------------------------------------------------------
    def launch_idle(self, node: int) -> float:
        """Launch-overhead idle charged to one launch API node: the device idle before its kernels
        that their host issue cost explains, min(measured gpu_idle_time, launches x max(0,
        LAUNCH_HOST_NS - kernel time)). The measured gaps alone overstate it: they include one-off
        gaps (first-call module loading, setup, data loading) and the profiler's own per-launch
        host overhead; the model alone would charge idle to kernels queued behind busy work,
        which the measured gap rules out."""
        cache = self._launch_idle
        if cache is None:
            cache = self._launch_idle = self._compute_launch_idle()
        return cache.get(node, 0.0)

    def _compute_launch_idle(self) -> dict[int, float]:
        out: dict[int, float] = {}
        if IDLE_METRIC not in self.profile.metrics:
            return out
        kids = self.profile.node_children
        for n, v in self.values(IDLE_METRIC).items():
            measured = v[0]
            if measured <= 0 or self.kind[n] != "gpu_api" or self.compiling(n):
                continue
            model = 0.0
            for k in kids[n]:
                if self.kind[k] != "kernel":
                    continue
                launches = self.launches(k)
                if launches > 0:
                    mean = self.inc(k, "gpu_time") / launches
                    model += launches * max(0.0, LAUNCH_HOST_NS - mean)
            if model > 0:
                out[n] = min(measured, model)
        return out

    def idle(self, node: int) -> float:
        """Launch-overhead idle (launch_idle) summed over the node's subtree."""
        if self._launch_idle is None:
            self._launch_idle = self._compute_launch_idle()
        if node == 0:
            return sum(self._launch_idle.values())
        return sum(v for n, v in self._launch_idle.items() if self.in_subtree(n, node))

    def denominator(self, metric: str) -> float:
        """The total a finding's share is taken of. For gpu_time: the kernels' time plus the
        launch-overhead idle between them (the device timeline the program's kernels occupy), so
        a saving in idle time and one in kernel time are fractions of the same whole; for other
        metrics their profile total, but for wall_time the run's elapsed time (its root adds up the
        threads' wall times; the C++ engine's Query::denominator does the same)."""
        t = self.total(metric)
        if metric == "gpu_time":
            t += self.idle(0)
        if metric == "wall_time" and t > 0:
            t = elapsed_ns(self.profile.meta) or t
        return t

    # -- navigation ---------------------------------------------------------------------------
    def subtree(self, node: int) -> Iterator[int]:
        stack = [node]
        kids = self.profile.node_children
        while stack:
            n = stack.pop()
            yield n
            stack.extend(kids[n])

    def descendants(
        self, node: int, kind: str | None = None, regex: str | None = None
    ) -> list[int]:
        pat = re.compile(regex) if regex else None
        out = []
        for d in self.subtree(node):
            if d == node:
                continue
            if kind is not None and self.kind[d] != kind:
                continue
            if pat is not None and not pat.search(self.name(d)):
                continue
            out.append(d)
        return out

    def ancestors(self, node: int) -> Iterator[int]:
        """The node's ancestors, nearest first, root excluded."""
        n = self.profile.node_parent[node]
        while n != 0:
            yield n
            n = self.profile.node_parent[n]

    def path(self, node: int) -> list[Frame]:
        return self.profile.node(node).path()

    def path_labels(self, node: int) -> list[str]:
        return [f.label() for f in self.path(node)]

    def find(
        self,
        name: str | None = None,
        *,
        regex: str | None = None,
        kind: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> list[int]:
        """Node ids whose frame matches every given criterion (see Profile.find)."""
        return [n.id for n in self.profile.find(name, regex=regex, kind=kind, file=file, line=line)]

    def nodes_of_kind(self, *kinds: str) -> list[int]:
        ks = set(kinds)
        return [i for i in range(1, len(self.kind)) if self.kind[i] in ks]

    def in_subtree(self, node: int, ancestor: int) -> bool:
        n = node
        while n > ancestor:
            n = self.profile.node_parent[n]
        return n == ancestor

    # -- context of a node --------------------------------------------------------------------
    def source(self, node: int) -> dict | None:
        """The innermost user source line on the node's path: {file, line, function}."""
        u = self.user_line[node]
        if u < 0:
            p = self.python[node]
            if p < 0:
                return None
            u = p
        f = self.frame(u)
        return {"file": f.file, "line": f.line, "function": f.name}

    def source_label(self, node: int) -> str:
        s = self.source(node)
        if not s:
            return "(no Python source line)"
        return f"{s['file']}:{s['line']} ({s['function']})"

    def module_path(self, node: int) -> str | None:
        m = self.module[node]
        return self.name(m) if m >= 0 else None

    def operators(self, node: int) -> list[str]:
        """Operator names on the node's path, outermost first."""
        return [f.name for f in self.path(node) if f.kind in ("operator", "hlo_op")]

    def forward_operator(self, node: int) -> int:
        """For a node inside backward work: the forward operator the backward marker sits under."""
        b = self.backward[node]
        if b < 0:
            return -1
        p = self.profile.node_parent[b]
        return p if self.kind[p] in ("operator", "hlo_op") else self.leaf_op[p]

    def kernels(self, node: int, metric: str = "gpu_time", limit: int = 5) -> list[dict]:
        """The heaviest distinct kernels under a node: [{name, time, launches}] (without XLA's
        autotuning kernels, unless the node is inside that compilation)."""
        agg: dict[str, list[float]] = {}
        for d in self.subtree(node):
            if self.kind[d] != "kernel" or (self.compiling(d) and not self.compiling(node)):
                continue
            a = agg.setdefault(self.name(d), [0.0, 0])
            a[0] += self.inc(d, metric)
            a[1] += self.launches(d)
        rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:limit]
        return [{"name": k, "time": v[0], "launches": int(v[1])} for k, v in rows]

    def launches(self, node: int) -> int:
        """Launch count of a kernel node (the `launches` metric, else its gpu_time count)."""
        if "launches" in self.profile.metrics:
            v = self.values("launches").get(node)
            if v:
                return int(v[0]) if v[0] else int(v[1])
        return self.count(node, "gpu_time")

    def calls(self, node: int) -> int:
        """Calls of an operator node (the `op_count` metric, else its op_time count)."""
        v = self.values("op_count").get(node)
        if v:
            return int(v[0]) if v[0] else int(v[1])
        return self.count(node, "op_time")

    # -- grouping -----------------------------------------------------------------------------
    def key_of(self, by: str | Callable[[int], Hashable], node: int) -> Hashable:
        if callable(by):
            return by(node)
        if by == "line":
            s = self.source(node)
            return (s["file"], s["line"], s["function"]) if s else None
        if by == "function":
            s = self.source(node)
            return (s["file"], s["function"]) if s else None
        if by == "operator":
            return self.name(self.top_op[node]) if self.top_op[node] >= 0 else None
        if by == "leaf_operator":
            return self.name(self.leaf_op[node]) if self.leaf_op[node] >= 0 else None
        if by == "module":
            return self.module_path(node)
        if by == "kernel":
            return self.name(node) if self.kind[node] == "kernel" else None
        if by == "frame":
            return self.frame(node)
        raise ValueError(
            f"unknown grouping {by!r} (line, function, operator, leaf_operator, module, kernel, frame)"
        )

    def _anchor(self, by, node: int) -> int:
        if by in ("line", "function"):
            u = self.user_line[node]
            return u if u >= 0 else self.python[node]
        if by == "operator":
            return self.top_op[node]
        if by == "leaf_operator":
            return self.leaf_op[node]
        if by == "module":
            return self.module[node]
        return node

    def group_by(
        self,
        by: str | Callable[[int], Hashable],
        metric: str,
        *,
        within: int | Iterable[int] | None = None,
        where: Callable[[int], bool] | None = None,
        keep_none: bool = False,
    ) -> list[Group]:
        """Sum the metric's exclusive values by a key of each measured node, heaviest first.

        by: "line" (innermost user source line), "function", "operator" (outermost operator),
        "leaf_operator", "module" (nn.Module path), "kernel" (kernel nodes only), "frame", or a
        function node_id -> key. within: restrict to the subtree(s) of these nodes. where: a node
        filter.
        """
        vals = self.values(metric)
        if within is None:
            candidates: Iterable[int] = vals.keys()
        else:
            roots = [within] if isinstance(within, int) else list(within)
            candidates = {d for r in roots for d in self.subtree(r) if d in vals}
        groups: dict[Hashable, Group] = {}
        total = self.total(metric)
        for nid in candidates:
            v = vals[nid]
            if v[1] == 0 and v[0] == 0:
                continue
            if where is not None and not where(nid):
                continue
            key = self.key_of(by, nid)
            if key is None and not keep_none:
                continue
            g = groups.get(key)
            if g is None:
                g = groups[key] = Group(key)
            g.value += v[0]
            g.count += int(v[1])
            g.nodes.append(nid)
            a = self._anchor(by, nid)
            if a >= 0 and a not in g.anchors:
                g.anchors.append(a)
        out = sorted(groups.values(), key=lambda g: -g.value)
        for g in out:
            g.share = g.value / total if total > 0 else 0.0
        return out

    def common_ancestor(self, nodes: Iterable[int]) -> int:
        nodes = list(nodes)
        if not nodes:
            return 0
        parent = self.profile.node_parent
        acc = nodes[0]
        for n in nodes[1:]:
            a, b = acc, n
            while a != b:
                if a > b:
                    a = parent[a]
                else:
                    b = parent[b]
            acc = a
        return acc

    def node(self, node: int) -> Node:
        return self.profile.node(node)
