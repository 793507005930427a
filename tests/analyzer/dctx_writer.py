"""A small .dctx writer (docs/format.md, version 1) for analyzer tests that need a tree of a shape a
CPU-only machine cannot record (GPU kernels, copies, syncs). Real-program tests profile with
`deepcontext run` instead."""

from __future__ import annotations

import os
import sqlite3

KINDS = {
    "root": 0,
    "python": 1,
    "scope": 2,
    "operator": 3,
    "native": 4,
    "gpu_api": 5,
    "kernel": 6,
    "memcpy": 7,
    "memset": 8,
    "backward": 9,
    "module": 10,
    "thread": 11,
    "sync": 12,
    "hlo_op": 13,
    "jax_op": 14,
    "step": 15,
}

UNITS = {"count": "count", "launches": "count", "op_count": "count", "samples": "count"}


class ProfileBuilder:
    """Builds a calling-context tree in memory and writes it as a .dctx file."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {"": 0}
        self.frames: dict[tuple, int] = {(0, 0, 0, 0, 0): 0}
        self.nodes: list[tuple[int, int]] = [(0, 0)]
        self.child: dict[tuple[int, int], int] = {}
        self.values: dict[tuple[int, str], list[float]] = {}
        self.props: dict[tuple[int, str], str] = {}
        self.meta: dict[str, str] = {"format_version": "1", "complete": "1"}
        self.units: dict[str, str] = {}

    def _s(self, s: str) -> int:
        return self.strings.setdefault(s, len(self.strings))

    def frame(self, kind: str, name: str, file: str = "", line: int = 0, module: str = "") -> int:
        key = (KINDS[kind], self._s(name), self._s(file), line, self._s(module))
        return self.frames.setdefault(key, len(self.frames))

    def node(
        self, parent: int, kind: str, name: str, file: str = "", line: int = 0, module: str = ""
    ) -> int:
        f = self.frame(kind, name, file, line, module)
        key = (parent, f)
        if key not in self.child:
            self.child[key] = len(self.nodes)
            self.nodes.append((parent, f))
        return self.child[key]

    def path(self, *frames: tuple, parent: int = 0) -> int:
        """Each frame is (kind, name) or (kind, name, file, line[, module])."""
        n = parent
        for fr in frames:
            n = self.node(n, *fr)
        return n

    def add(
        self, node: int, metric: str, value: float, count: int = 1, unit: str | None = None
    ) -> None:
        self.units.setdefault(
            metric, unit or UNITS.get(metric, "ns" if "bytes" not in metric else "bytes")
        )
        v = self.values.setdefault((node, metric), [0.0, 0, float("inf"), float("-inf")])
        v[0] += value
        v[1] += count
        per = value / count if count else value
        v[2] = min(v[2], per)
        v[3] = max(v[3], per)

    def prop(self, node: int, key: str, value: str) -> None:
        self.props[(node, key)] = value

    def write(self, path: str | os.PathLike) -> str:
        path = os.fspath(path)
        if os.path.exists(path):
            os.remove(path)
        con = sqlite3.connect(path)
        con.executescript(
            """
            PRAGMA application_id = 1145262168;
            PRAGMA user_version = 1;
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE strings (id INTEGER PRIMARY KEY, s TEXT NOT NULL);
            CREATE TABLE frames (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, name INTEGER NOT NULL,
                                 file INTEGER NOT NULL, line INTEGER NOT NULL, module INTEGER NOT NULL);
            CREATE TABLE nodes (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, frame INTEGER NOT NULL);
            CREATE TABLE metrics (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, unit TEXT NOT NULL,
                                  description TEXT NOT NULL);
            CREATE TABLE node_metrics (node INTEGER NOT NULL, metric INTEGER NOT NULL, sum REAL NOT NULL,
                                  count INTEGER NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
                                  inc REAL NOT NULL, PRIMARY KEY (node, metric)) WITHOUT ROWID;
            CREATE TABLE node_props (node INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                                  PRIMARY KEY (node, key)) WITHOUT ROWID;
            """
        )
        con.executemany("INSERT INTO meta VALUES (?, ?)", self.meta.items())
        con.executemany(
            "INSERT INTO strings VALUES (?, ?)", [(i, s) for s, i in self.strings.items()]
        )
        con.executemany(
            "INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?)",
            [(i, *k) for k, i in self.frames.items()],
        )
        con.executemany(
            "INSERT INTO nodes VALUES (?, ?, ?)", [(i, p, f) for i, (p, f) in enumerate(self.nodes)]
        )
        metric_ids = {m: i + 1 for i, m in enumerate(sorted(self.units))}
        con.executemany(
            "INSERT INTO metrics VALUES (?, ?, ?, '')",
            [(i, m, self.units[m]) for m, i in metric_ids.items()],
        )
        for m, mid in metric_ids.items():
            inc = [0.0] * len(self.nodes)
            for (n, name), v in self.values.items():
                if name == m:
                    inc[n] += v[0]
            for n in range(len(self.nodes) - 1, 0, -1):
                inc[self.nodes[n][0]] += inc[n]
            rows = []
            for n in range(len(self.nodes)):
                v = self.values.get((n, m))
                if v is None and inc[n] == 0:
                    continue
                s, c, mn, mx = v if v else (0.0, 0, 0.0, 0.0)
                rows.append((n, mid, s, c, mn, mx, inc[n]))
            con.executemany("INSERT INTO node_metrics VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        con.executemany(
            "INSERT INTO node_props VALUES (?, ?, ?)",
            [(n, k, v) for (n, k), v in self.props.items()],
        )
        con.commit()
        con.close()
        return path
