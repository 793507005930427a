"""Helpers shared by the built-in rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..query import Query


def fmt_ns(ns: float) -> str:
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def op_metric(q: Query) -> str | None:
    """The metric operator-level rules measure with: GPU time when the profile has it, else the
    operator timers (exact), else sampled CPU time."""
    for m in ("gpu_time", "op_time", "cpu_time", "wall_time"):
        if q.has(m):
            return m
    return None


def cpu_metric(q: Query) -> str | None:
    """Host-side time: wall time when sampled (waiting counts), else CPU time, else operator time."""
    for m in ("wall_time", "cpu_time", "op_time"):
        if q.has(m):
            return m
    return None


def line_key(q: Query, node: int) -> tuple:
    s = q.source(node)
    return (s["file"], s["line"]) if s else ("", 0)


@dataclass
class Site:
    """Nodes of one kind of problem aggregated by the user source line they come from."""

    key: tuple
    nodes: list[int] = field(default_factory=list)
    values: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, v: float) -> None:
        self.values[name] = self.values.get(name, 0.0) + v

    def get(self, name: str) -> float:
        return self.values.get(name, 0.0)


def by_line(q: Query, nodes, extra_key=None) -> list[Site]:
    """Group nodes by source line (and an optional extra key function)."""
    sites: dict[tuple, Site] = {}
    for n in nodes:
        key = line_key(q, n) + ((extra_key(n),) if extra_key else ())
        s = sites.get(key)
        if s is None:
            s = sites[key] = Site(key)
        s.nodes.append(n)
    return list(sites.values())


def outermost(q: Query, nodes: list[int]) -> list[int]:
    """Drop nodes that lie inside another node of the list (so inclusive values are not summed
    twice)."""
    chosen = set(nodes)
    out = []
    for n in nodes:
        if not any(a in chosen for a in q.ancestors(n)):
            out.append(n)
    return out


def meta_json(q: Query, key: str, default=None):
    v = q.profile.meta.get(key)
    if v is None:
        return default
    try:
        return json.loads(v)
    except ValueError:
        return v


def meta_int(q: Query, *keys: str) -> int | None:
    for k in keys:
        v = q.profile.meta.get(k)
        if v is None:
            continue
        try:
            return int(float(v))
        except ValueError:
            m = re.search(r"\d+", v)
            if m:
                return int(m.group())
    return None


def gpu_devices(q: Query) -> list[dict]:
    """Device descriptions from the profile's metadata (`devices` or `gpu_devices`, JSON)."""
    for k in ("devices", "gpu_devices", "gpus"):
        v = meta_json(q, k)
        if isinstance(v, list):
            return [d for d in v if isinstance(d, dict)]
        if isinstance(v, dict):
            return [v]
    return []


def device_prop(q: Query, *names: str):
    for d in gpu_devices(q):
        for n in names:
            if n in d:
                return d[n]
    for n in names:
        for k in (n, "gpu_" + n, "device_" + n):
            if k in q.profile.meta:
                return meta_json(q, k)
    return None


def enclosing_call(q: Query, node: int, from_line: bool = False) -> list[int]:
    """The nodes of the Python function call that the node's innermost user line belongs to: a
    Python frame node is one (function, line) pair, so the call is the line node and its siblings
    of the same function and file (e.g. every line of a training loop). from_line: only the lines
    from the node's own line on (a loop's body follows its `for` line; setup code precedes it)."""
    u = q.user_line[node]
    if u < 0:
        u = q.python[node]
    if u < 0:
        return [node]
    f = q.frame(u)
    return [
        c
        for c in q.children(q.parent(u))
        if q.kind[c] == "python"
        and q.frame(c).name == f.name
        and q.frame(c).file == f.file
        and (not from_line or q.frame(c).line >= f.line)
    ]


MODULE_FILE = re.compile(r"torch/nn/modules/module\.py$")
MODEL_TRANSFER_FUNCS = re.compile(
    r"^Module\.(to|cuda|_apply|to_empty|xpu|mps|cpu|half|float|bfloat16)$"
)


def in_model_transfer(q: Query, node: int) -> bool:
    """True when the node lies under `nn.Module.to()` / `.cuda()` (Module._apply): moving or
    casting a model's parameters is one-off setup, not work of the step."""
    for a in q.ancestors(node):
        if q.kind[a] == "python":
            f = q.frame(a)
            if MODEL_TRANSFER_FUNCS.match(f.name) and MODULE_FILE.search(f.file):
                return True
    return False
