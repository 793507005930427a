"""A pure-Python writer of .dctx profiles (docs/format.md, version 1).

`ProfileWriter` builds a calling-context tree in memory (interned strings, frames and child nodes,
exclusive metric values with count/min/max) and `write(path)` stores it with inclusive values
computed, atomically: into `<path>.tmp-<pid>`, then renamed. `write_tables` is the row-level entry
that `deepcontext merge` uses to store tables it has built in bulk.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterable

from .reader import APPLICATION_ID, FORMAT_VERSION, FRAME_KINDS

KIND_IDS = {name: i for i, name in enumerate(FRAME_KINDS)}

DEFAULT_UNITS = {
    "cpu_time": "ns",
    "wall_time": "ns",
    "op_time": "ns",
    "gpu_time": "ns",
    "samples": "count",
    "op_count": "count",
    "launches": "count",
    "alloc_count": "count",
    "alloc_bytes": "bytes",
    "peak_bytes": "bytes",
    "cycles": "cycles",
    "instructions": "instructions",
}


def meta_json(value) -> str:
    """A metadata value as strict JSON: the analyzer's parser (nlohmann/json) refuses Python's NaN
    and Infinity, so non-finite floats are written as null."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def fast_writes(con: sqlite3.Connection) -> None:
    """A file written once and renamed into place needs no journal and no fsync."""
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-131072")


def insert_tables(
    con: sqlite3.Connection,
    *,
    meta: dict[str, str],
    strings: Iterable[tuple[int, str]],
    frames: Iterable[tuple[int, int, int, int, int, int]],
    nodes: Iterable[tuple[int, int, int]],
    metrics: Iterable[tuple[int, str, str, str]],
    node_metrics: Iterable[tuple[int, int, float, int, float, float, float]],
    node_props: Iterable[tuple[int, str, str]] = (),
) -> None:
    """The format's header and tables into an empty database, the rows in one transaction."""
    con.execute(f"PRAGMA application_id={APPLICATION_ID}")
    con.execute(f"PRAGMA user_version={FORMAT_VERSION}")
    from . import _core  # the tables as the native writer defines them (src/store/writer.cpp)

    con.executescript(_core.PROFILE_SCHEMA)
    with con:
        meta = {"format_version": str(FORMAT_VERSION), **meta}
        con.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        con.executemany("INSERT INTO strings VALUES (?, ?)", strings)
        con.executemany("INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?)", frames)
        con.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
        con.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", metrics)
        con.executemany("INSERT INTO node_metrics VALUES (?, ?, ?, ?, ?, ?, ?)", node_metrics)
        con.executemany("INSERT INTO node_props VALUES (?, ?, ?)", node_props)


def write_tables(path: str | os.PathLike, **tables) -> None:
    """Write already-built rows (insert_tables' keyword arguments) as a .dctx file at `path`
    (temp file, then rename)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        os.unlink(tmp)
    con = sqlite3.connect(tmp)
    try:
        fast_writes(con)
        insert_tables(con, **tables)
        con.close()
        os.replace(tmp, path)
    except BaseException:
        con.close()
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class ProfileWriter:
    """An in-memory calling-context tree that writes itself as a .dctx profile.

    Node 0 is the root; `child(parent, frame)` returns the existing child for that frame or makes
    one, so adding the same path twice lands on one node, as the native core aggregates.
    """

    def __init__(self, meta: dict[str, str] | None = None) -> None:
        self.meta: dict[str, str] = {"complete": "1", **(meta or {})}
        self._strings: dict[str, int] = {"": 0}
        self._frames: dict[tuple, int] = {(0, 0, 0, 0, 0): 0}
        self.parent: list[int] = [0]
        self.node_frame: list[int] = [0]
        self._child: dict[tuple[int, int], int] = {}
        self._metrics: dict[str, tuple[int, str, str]] = {}
        # (node, metric id) -> [sum, count, min, max]
        self._values: dict[tuple[int, int], list] = {}
        self._props: dict[tuple[int, str], str] = {}

    def string(self, s: str) -> int:
        return self._strings.setdefault(s, len(self._strings))

    def frame(
        self, kind: str | int, name: str, file: str = "", line: int = 0, module: str = ""
    ) -> int:
        k = KIND_IDS[kind] if isinstance(kind, str) else int(kind)
        key = (k, self.string(name), self.string(file), int(line), self.string(module))
        return self._frames.setdefault(key, len(self._frames))

    def metric(self, name: str, unit: str | None = None, description: str = "") -> int:
        m = self._metrics.get(name)
        if m is None:
            m = (len(self._metrics) + 1, unit or DEFAULT_UNITS.get(name, "count"), description)
            self._metrics[name] = m
        return m[0]

    def child(self, parent: int, frame: int) -> int:
        key = (parent, frame)
        n = self._child.get(key)
        if n is None:
            n = len(self.parent)
            self.parent.append(parent)
            self.node_frame.append(frame)
            self._child[key] = n
        return n

    def path(self, frames: Iterable[int], parent: int = 0) -> int:
        """The node at the end of `frames` (frame ids) below `parent`, made where missing."""
        n = parent
        for f in frames:
            n = self.child(n, f)
        return n

    def add(self, node: int, metric: str, value: float, count: int = 1) -> None:
        """Add an exclusive measurement of `value` (made of `count` events) at `node`; a NaN or
        infinite value is left out, as the native core does."""
        if not math.isfinite(value):
            return
        mid = self.metric(metric)
        v = self._values.get((node, mid))
        if v is None:
            self._values[(node, mid)] = [float(value), count, float(value), float(value)]
        else:
            v[0] += value
            v[1] += count
            v[2] = min(v[2], value)
            v[3] = max(v[3], value)

    def set_prop(self, node: int, key: str, value: str) -> None:
        self._props[(node, key)] = str(value)

    def set_meta(self, key: str, value) -> None:
        self.meta[key] = value if isinstance(value, str) else meta_json(value)

    def __len__(self) -> int:
        return len(self.parent)

    def write(self, path: str | os.PathLike) -> None:
        n = len(self.parent)
        rows = []
        for mid, _unit, _desc in self._metrics.values():
            exc = [0.0] * n
            has = [False] * n
            for (node, m), v in self._values.items():
                if m == mid:
                    exc[node] += v[0]
                    has[node] = True
            inc = list(exc)
            for i in range(n - 1, 0, -1):
                p = self.parent[i]
                inc[p] += inc[i]
                has[p] = has[p] or has[i]
            for i in range(n):
                if not has[i]:
                    continue
                v = self._values.get((i, mid))
                if v is None:
                    rows.append((i, mid, 0.0, 0, 0.0, 0.0, inc[i]))
                else:
                    rows.append((i, mid, v[0], v[1], v[2], v[3], inc[i]))
        write_tables(
            path,
            meta=self.meta,
            strings=((i, s) for s, i in self._strings.items()),
            frames=((i, *k) for k, i in self._frames.items()),
            nodes=zip(range(n), self.parent, self.node_frame, strict=True),
            metrics=((mid, name, unit, desc) for name, (mid, unit, desc) in self._metrics.items()),
            node_metrics=rows,
            node_props=((node, k, v) for (node, k), v in self._props.items()),
        )
