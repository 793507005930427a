"""Reading .dctx profiles: `deepcontext.load(path)` returns a Profile.

A Profile holds the whole calling-context tree in memory as parallel lists indexed by node id
(parent, frame, children) plus per-metric exclusive/inclusive arrays, so navigation and queries are
plain list look-ups. Every CLI command, exporter, the analyzer and the GUI server read through it.
"""

from __future__ import annotations

import enum
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

FORMAT_VERSION = 1
APPLICATION_ID = 0x44435458  # "DCTX"

FRAME_KINDS = [
    "root",
    "python",
    "scope",
    "operator",
    "native",
    "gpu_api",
    "kernel",
    "memcpy",
    "memset",
    "backward",
    "module",
    "thread",
    "sync",
    "hlo_op",
    "jax_op",
    "step",
]


from .errors import ProfileError  # noqa: E402  (re-exported)


@dataclass(frozen=True)
class Frame:
    kind: str
    name: str
    file: str
    line: int
    module: str

    def label(self) -> str:
        """How reports and exporters name the frame."""
        if self.kind == "python":
            return f"{self.name} ({os.path.basename(self.file)}:{self.line})"
        if self.kind == "native" and self.module:
            return f"{self.name} [{os.path.basename(self.module)}]"
        if self.kind in ("scope", "module", "backward", "thread", "step"):
            return f"[{self.kind}] {self.name}" if self.name else f"[{self.kind}]"
        return self.name

    def import_system(self) -> bool:
        """Python's own import machinery (`<frozen importlib._bootstrap>`, `_bootstrap_external`,
        `<frozen zipimport>`): five or more frames between an `import` line and the imported
        module's code, the same on every import. Reports and diffs splice them out by default."""
        return self.kind == "python" and self.file.startswith(_IMPORT_SYSTEM)


_IMPORT_SYSTEM = ("<frozen importlib.", "<frozen zipimport>")


@dataclass
class Metric:
    id: int
    name: str
    unit: str
    description: str


# The statistics across inputs that `deepcontext merge` stores as metrics `M:<stat>` of each
# metric M (docs/interop.md). The mean adds up like M itself (the mean of sums is the sum of
# means); the others do not.
MERGE_STATS = ("mean", "min", "max", "std", "imbalance")
_ADDITIVE_STATS = ("mean",)


class Combine(enum.Enum):
    """How the values of a metric combine when a view puts several nodes' values into one row
    (spliced frames, merged siblings, the bottom-up and flat views): the one definition that every
    view, exporter and diff follows."""

    SUM = "sum"  # values add up: times, bytes, counts, a merge's means
    # wall time adds up along one thread, but the threads run at once: the whole is the elapsed
    # time (a share is of that), not the sum of the threads' wall times
    PER_THREAD = "per_thread"
    # a merge's min/max/std/imbalance across inputs: from the stored statistics alone the value
    # of a combination is unknown (the max of a sum is not the sum of the maxima), so a row that
    # combines several measured nodes has none (NaN, shown as n/a)
    STORED = "stored"


def combine_rule(name: str, metric_names: Iterable[str]) -> Combine:
    """How `name` combines, given the names of the profile's metrics."""
    base, _, stat = name.rpartition(":")
    if base and stat in MERGE_STATS and base in metric_names:
        return Combine.SUM if stat in _ADDITIVE_STATS else Combine.STORED
    if name == "wall_time":
        return Combine.PER_THREAD
    return Combine.SUM


def stat_base(name: str) -> str | None:
    """The metric a merge statistic is of (`cpu_time` for `cpu_time:max`), else None."""
    base, _, stat = name.rpartition(":")
    return base if base and stat in MERGE_STATS else None


def elapsed_ns(meta: dict[str, str]) -> float | None:
    """The profiled run's elapsed time (the CPU sampler's span), the whole that wall_time is a part
    of; for a merged profile the inputs' elapsed times added up (wall_time adds up across them).
    None for profiles that did not record it."""
    if "merged_inputs" in meta:
        try:
            metas = [i.get("meta", {}) for i in json.loads(meta["merged_inputs"])]
        except (ValueError, TypeError, AttributeError):
            return None
        each = [elapsed_ns(m) for m in metas]
        return None if not each or None in each else float(sum(each))  # type: ignore[arg-type]
    try:
        v = float(meta["elapsed_ns"])
    except (KeyError, ValueError):
        return None
    return v if v > 0 else None


class Node:
    """A view of one tree node; cheap to create, holds only the profile and the id."""

    __slots__ = ("profile", "id")

    def __init__(self, profile: Profile, node_id: int):
        self.profile = profile
        self.id = node_id

    @property
    def frame(self) -> Frame:
        return self.profile.frames[self.profile.node_frame[self.id]]

    @property
    def parent(self) -> Node | None:
        p = self.profile.node_parent[self.id]
        return None if self.id == 0 else Node(self.profile, p)

    @property
    def children(self) -> list[Node]:
        return [Node(self.profile, c) for c in self.profile.node_children[self.id]]

    @property
    def props(self) -> dict[str, str]:
        return self.profile.props.get(self.id, {})

    def path(self) -> list[Frame]:
        """Frames from the root's child down to this node."""
        out = []
        n = self.id
        while n != 0:
            out.append(self.profile.frames[self.profile.node_frame[n]])
            n = self.profile.node_parent[n]
        return out[::-1]

    def inclusive(self, metric: str) -> float:
        return self.profile.inclusive(self.id, metric)

    def exclusive(self, metric: str) -> float:
        return self.profile.exclusive(self.id, metric)

    def stats(self, metric: str) -> dict:
        return self.profile.stats(self.id, metric)

    def walk(self) -> Iterator[Node]:
        stack = [self.id]
        while stack:
            n = stack.pop()
            yield Node(self.profile, n)
            stack.extend(reversed(self.profile.node_children[n]))

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.frame.label()!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Node) and other.id == self.id and other.profile is self.profile

    def __hash__(self) -> int:
        return hash(self.id)


def _open(path: str) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise ProfileError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ProfileError(f"{path}: is a directory, not a .dctx profile")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ProfileError(f"{path}: cannot read ({e.strerror})") from None
    if head != b"SQLite format 3\x00":
        raise ProfileError(f"{path}: not a DeepContext profile (not an SQLite database)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        version = con.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise ProfileError(f"{path}: corrupt profile ({e})") from None
    if app_id != APPLICATION_ID:
        con.close()
        raise ProfileError(
            f"{path}: not a DeepContext profile (SQLite file of another application)"
        )
    if version != FORMAT_VERSION:
        con.close()
        raise ProfileError(
            f"{path}: profile format version {version}, this reader knows {FORMAT_VERSION}"
        )
    return con


def read_header(con: sqlite3.Connection, path: str) -> tuple[dict[str, str], dict[int, Frame]]:
    """A profile's integrity check, metadata and frames (strings resolved): what every reader of
    the tree needs before its nodes."""
    check = con.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise ProfileError(f"{path}: corrupt profile (integrity check: {check})")
    meta = dict(con.execute("SELECT key, value FROM meta"))
    strings = dict(con.execute("SELECT id, s FROM strings"))
    strings.setdefault(0, "")
    frames: dict[int, Frame] = {}
    for fid, kind, name, file, line, module in con.execute(
        "SELECT id, kind, name, file, line, module FROM frames"
    ):
        kname = FRAME_KINDS[kind] if 0 <= kind < len(FRAME_KINDS) else f"kind{kind}"
        frames[fid] = Frame(
            kname, strings.get(name, ""), strings.get(file, ""), line, strings.get(module, "")
        )
    frames.setdefault(0, Frame("root", "", "", 0, ""))
    return meta, frames


class Profile:
    """A loaded profile: the tree, its frames, metrics and metadata."""

    def __init__(self, path: str):
        self.path = path
        con = _open(path)
        try:
            self._load(con)
        except sqlite3.DatabaseError as e:
            raise ProfileError(f"{path}: corrupt profile ({e})") from None
        finally:
            con.close()

    def _load(self, con: sqlite3.Connection) -> None:
        self.meta, self.frames = read_header(con, self.path)
        rows = con.execute("SELECT id, parent, frame FROM nodes ORDER BY id").fetchall()
        n = (rows[-1][0] + 1) if rows else 1
        self.node_parent = [0] * n
        self.node_frame = [0] * n
        self.node_children: list[list[int]] = [[] for _ in range(n)]
        for nid, parent, frame in rows:
            if nid == 0:
                continue
            if parent >= nid:
                raise ProfileError(f"{self.path}: corrupt profile (node {nid} has parent {parent})")
            self.node_parent[nid] = parent
            self.node_frame[nid] = frame
            self.node_children[parent].append(nid)
        self.metrics: dict[str, Metric] = {}
        by_id: dict[int, str] = {}
        for mid, name, unit, desc in con.execute("SELECT id, name, unit, description FROM metrics"):
            self.metrics[name] = Metric(mid, name, unit, desc)
            by_id[mid] = name
        # metric name -> {node: (sum, count, min, max, inc)}
        self._values: dict[str, dict[int, tuple]] = {m: {} for m in self.metrics}
        for node, mid, s, c, mn, mx, inc in con.execute(
            "SELECT node, metric, sum, count, min, max, inc FROM node_metrics"
        ):
            name = by_id.get(mid)
            if name is not None:
                self._values[name][node] = (s, c, mn, mx, inc)
        self.props: dict[int, dict[str, str]] = {}
        for node, key, value in con.execute("SELECT node, key, value FROM node_props"):
            self.props.setdefault(node, {})[key] = value
        self.timeline_events = []
        has_timeline = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='timeline'"
        ).fetchone()
        if has_timeline:
            self.timeline_events = con.execute(
                "SELECT * FROM timeline ORDER BY start_ns"
            ).fetchall()

    # -- navigation -----------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return Node(self, 0)

    def node(self, node_id: int) -> Node:
        return Node(self, node_id)

    def __len__(self) -> int:
        return len(self.node_parent)

    def nodes(self) -> Iterator[Node]:
        return self.root.walk()

    @property
    def notes(self) -> list[str]:
        return json.loads(self.meta.get("notes", "[]"))

    # -- metrics --------------------------------------------------------------------------
    def metric_names(self) -> list[str]:
        return list(self.metrics)

    def _check_metric(self, metric: str) -> dict[int, tuple]:
        try:
            return self._values[metric]
        except KeyError:
            known = ", ".join(self.metrics) or "none"
            raise ProfileError(f"unknown metric {metric!r} (this profile has: {known})") from None

    def inclusive(self, node_id: int, metric: str) -> float:
        v = self._check_metric(metric).get(node_id)
        return v[4] if v else 0.0

    def exclusive(self, node_id: int, metric: str) -> float:
        v = self._check_metric(metric).get(node_id)
        return v[0] if v else 0.0

    def stats(self, node_id: int, metric: str) -> dict:
        v = self._check_metric(metric).get(node_id)
        s, c, mn, mx, inc = v if v else (0.0, 0, 0.0, 0.0, 0.0)
        return {"inclusive": inc, "exclusive": s, "count": c, "min": mn, "max": mx}

    def total(self, metric: str) -> float:
        """The metric's whole: the root's inclusive value, but for wall_time the elapsed time
        where the profile has it and wall time was sampled (the root holds the threads' wall times
        added up)."""
        total = self.inclusive(0, metric)
        if metric == "wall_time" and total > 0:
            return elapsed_ns(self.meta) or total
        return total

    def default_metric(self) -> str:
        for m in ("gpu_time", "cpu_time", "op_time", "wall_time"):
            if m in self.metrics and self.total(m) > 0:
                return m
        return next(iter(self.metrics), "cpu_time")

    # -- queries --------------------------------------------------------------------------
    def find(
        self,
        name: str | None = None,
        *,
        regex: str | None = None,
        file: str | None = None,
        kind: str | None = None,
        line: int | None = None,
    ) -> list[Node]:
        """Nodes whose frame matches every given criterion (name exact, regex on the label,
        file by suffix, kind, line)."""
        pat = re.compile(regex) if regex else None
        wanted = set()
        for fid, f in self.frames.items():
            if name is not None and f.name != name:
                continue
            if kind is not None and f.kind != kind:
                continue
            if file is not None and not (f.file == file or f.file.endswith("/" + file.lstrip("/"))):
                continue
            if line is not None and f.line != line:
                continue
            if pat is not None and not (pat.search(f.name) or pat.search(f.label())):
                continue
            wanted.add(fid)
        return [
            Node(self, i) for i in range(1, len(self.node_frame)) if self.node_frame[i] in wanted
        ]

    def hot_path(self, metric: str | None = None) -> list[Node]:
        """Follow the heaviest child from the root while it holds at least half its parent."""
        metric = metric or self.default_metric()
        path = []
        n = 0
        while True:
            kids = self.node_children[n]
            if not kids:
                break
            best = max(kids, key=lambda c: self.inclusive(c, metric))
            if (
                self.inclusive(best, metric) < 0.5 * self.inclusive(n, metric)
                or self.inclusive(best, metric) <= 0
            ):
                break
            path.append(Node(self, best))
            n = best
        return path

    def to_dataframe(self, metrics: Iterable[str] | None = None):
        """One row per node: id, parent, depth, frame fields, and <metric>_inc / <metric>_exc."""
        try:
            import pandas as pd
        except ImportError:
            raise ProfileError("to_dataframe() needs pandas (pip install pandas)") from None
        metrics = list(metrics or self.metrics)
        depth = [0] * len(self.node_parent)
        for i in range(1, len(depth)):
            depth[i] = depth[self.node_parent[i]] + 1
        cols: dict[str, list] = {
            "id": list(range(len(self.node_parent))),
            "parent": list(self.node_parent),
            "depth": depth,
            "kind": [],
            "name": [],
            "file": [],
            "line": [],
            "module": [],
        }
        for fid in self.node_frame:
            f = self.frames[fid]
            cols["kind"].append(f.kind)
            cols["name"].append(f.name)
            cols["file"].append(f.file)
            cols["line"].append(f.line)
            cols["module"].append(f.module)
        for m in metrics:
            vals = self._check_metric(m)
            cols[f"{m}_inc"] = [vals[i][4] if i in vals else 0.0 for i in cols["id"]]
            cols[f"{m}_exc"] = [vals[i][0] if i in vals else 0.0 for i in cols["id"]]
        return pd.DataFrame(cols)


def load(path: str | os.PathLike) -> Profile:
    """Load a .dctx profile; raises ProfileError with a one-line message if it is not one."""
    return Profile(os.fspath(path))
