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


def read_meta_json(meta: dict, key: str, kind: type = list):
    """A metadata value that the profiler writes as JSON of type `kind` (notes, command,
    merged_inputs, ...), parsed; None where the file holds anything else, as a profile from
    elsewhere may (text that is not JSON, another type, nesting too deep to parse)."""
    text = meta.get(key)
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, kind) else None


def elapsed_ns(meta: dict[str, str]) -> float | None:
    """The profiled run's elapsed time (the CPU sampler's span), the whole that wall_time is a part
    of; for a merged profile the inputs' elapsed times added up (wall_time adds up across them).
    None for profiles that did not record it."""
    if "merged_inputs" in meta:
        inputs = read_meta_json(meta, "merged_inputs") or []
        metas = [i.get("meta") for i in inputs if isinstance(i, dict)]
        if len(metas) != len(inputs) or not all(isinstance(m, dict) for m in metas):
            return None
        each = [elapsed_ns(m) for m in metas]
        return None if not each or None in each else float(sum(each))  # type: ignore[arg-type]
    try:
        v = float(meta["elapsed_ns"])
    except (KeyError, ValueError, TypeError):
        return None
    return v if 0 < v < float("inf") else None


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
        # a string that is not UTF-8 (a native symbol, a hostile file) reads with U+FFFD
        con.text_factory = _decode
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        version = con.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        raise corrupt(path, str(e)) from None
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


def _decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def corrupt(path: str, what: str) -> ProfileError:
    """The one-line error for a profile whose contents are not what docs/format.md says (the
    C++ analyzer's loader words them the same way)."""
    return ProfileError(f"{path}: corrupt profile ({what})")


# Validation of untrusted profiles (a .dctx is a file people send each other): every reader of
# the tables -- Profile, render.load_tree, merge.read_input, the chrome exporter's timeline and
# the C++ analyzer (src/analyzer/profile.cpp) -- checks them by the same rules before it sizes
# anything by what they hold: real tables (a view can recurse without end), typed columns, node
# ids exactly 0..COUNT(*)-1, parents in [0, id), frames present, finite values.
_INT, _NUM = "an integer", "a finite number"
TABLES: dict[str, dict[str, str]] = {
    "meta": {},
    "strings": {"id": _INT},
    "frames": dict.fromkeys(("id", "kind", "name", "file", "line", "module"), _INT),
    "nodes": dict.fromkeys(("id", "parent", "frame"), _INT),
    "metrics": {"id": _INT},
    "node_metrics": {
        **dict.fromkeys(("node", "metric", "count"), _INT),
        **dict.fromkeys(("sum", "min", "max", "inc"), _NUM),
    },
    "node_props": {"node": _INT},
}
# Text columns are not type-checked: any value reads as its text, as the C++ loader reads it
# (sqlite3_column_text: NULL as "", a number as its digits, a BLOB's bytes as UTF-8).
META_SQL = "SELECT coalesce(CAST(key AS TEXT), ''), coalesce(CAST(value AS TEXT), '') FROM meta"
STRINGS_SQL = "SELECT id, coalesce(CAST(s AS TEXT), '') FROM strings"
METRICS_SQL = (
    "SELECT id, coalesce(CAST(name AS TEXT), ''), coalesce(CAST(unit AS TEXT), ''), "
    "coalesce(CAST(description AS TEXT), '') FROM metrics"
)
PROPS_SQL = (
    "SELECT node, coalesce(CAST(key AS TEXT), ''), coalesce(CAST(value AS TEXT), '') "
    "FROM node_props"
)
# optional tables (a bounded timeline), checked by their readers where present
TIMELINE_TABLES: dict[str, dict[str, str]] = {
    "timeline": dict.fromkeys(
        ("step", "kind", "node", "start_ns", "end_ns", "tid", "device", "stream"), _INT
    ),
    "timeline_steps": dict.fromkeys(("step", "start_ns", "end_ns"), _INT),
}
_WRONG_TYPE = {
    _INT: "typeof({c}) != 'integer'",
    # 9e999 is stored as infinity; NaN cannot be stored (it reads as NULL)
    _NUM: "(typeof({c}) NOT IN ('integer', 'real') OR abs({c}) > 1.7976931348623157e308)",
}


def table_type(con: sqlite3.Connection, name: str) -> str | None:
    row = con.execute(
        "SELECT type FROM sqlite_master WHERE name = ? COLLATE NOCASE", (name,)
    ).fetchone()
    return row[0] if row else None


def check_table(con: sqlite3.Connection, path: str, table: str, columns: dict[str, str]) -> None:
    """`table` is a real table whose columns hold the types docs/format.md gives them (one scan)."""
    kind = table_type(con, table)
    if kind is None:
        raise corrupt(path, f"no such table: {table}")
    if kind != "table":
        raise corrupt(path, f"{table} is a {kind}, not a table")
    names = list(columns)
    if not names:
        return
    wrong = [_WRONG_TYPE[columns[c]].format(c=c) for c in names]
    # one scan that stops at the first bad row (OR short-circuits: about 1 us a row), then
    # which column it is
    if not con.execute(
        f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {' OR '.join(wrong)})"
    ).fetchone()[0]:
        return
    row = con.execute(f"SELECT {', '.join(f'max({w})' for w in wrong)} FROM {table}").fetchone()
    for c, bad in zip(names, row, strict=True):
        if bad:
            raise corrupt(path, f"{table}.{c} is not {columns[c]}")


def check_tables(con: sqlite3.Connection, path: str) -> None:
    """The integrity check and every table's kind and column types."""
    rows = con.execute("PRAGMA quick_check").fetchmany(3)
    check = "; ".join(str(r[0]) for r in rows)
    if check != "ok":
        # SQLite's report spans lines ("*** in database main ***\nPage 3: ...")
        raise corrupt(path, "integrity check: " + " ".join(check.split()))
    for table, columns in TABLES.items():
        check_table(con, path, table, columns)
    negative = con.execute("SELECT node FROM node_metrics WHERE count < 0 LIMIT 1").fetchone()
    if negative:
        raise corrupt(path, f"node {negative[0]} has a negative count")


def _count(con: sqlite3.Connection, table: str) -> int:
    return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def read_header(con: sqlite3.Connection, path: str) -> tuple[dict[str, str], dict[int, Frame]]:
    """A profile's checks (check_tables), metadata and frames (strings resolved): what every
    reader of the tree needs before its nodes. Frame ids are 0..COUNT(*)-1 at most."""
    check_tables(con, path)
    meta = dict(con.execute(META_SQL))
    strings = dict(con.execute(STRINGS_SQL))
    strings.setdefault(0, "")
    count = _count(con, "frames")
    frames: dict[int, Frame] = {}
    for fid, kind, name, file, line, module in con.execute(
        "SELECT id, kind, name, file, line, module FROM frames"
    ):
        if not 0 <= fid < count:
            raise corrupt(path, f"frame id {fid} outside 0..{count - 1}")
        if not 0 <= kind <= 0x7FFFFFFF:
            raise corrupt(path, f"frame {fid} has kind {kind}")
        frames[fid] = Frame(
            kind_name(kind),
            strings.get(name, ""),
            strings.get(file, ""),
            line,
            strings.get(module, ""),
        )
    frames.setdefault(0, Frame("root", "", "", 0, ""))  # the root's frame may be implied
    return meta, frames


def kind_name(kind: int) -> str:
    return FRAME_KINDS[kind] if 0 <= kind < len(FRAME_KINDS) else f"kind{kind}"


def kind_number(name: str) -> int:
    """The inverse of kind_name."""
    return FRAME_KINDS.index(name) if name in FRAME_KINDS else int(name[4:])


def _parse_ints(text: str | None):
    import numpy as np

    if not text:
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text, sep=",", dtype=np.int64)


def columns(con: sqlite3.Connection, table: str, int_cols, real_cols=(), where="1"):
    """Columns of `table` (checked by check_tables) as numpy arrays in one scan: each as
    comma-separated integers, which numpy parses in C. REAL columns go that way when every value
    is integral (measured ns, bytes and counts are); otherwise they are fetched again through
    Python floats, exactly."""
    import itertools

    import numpy as np

    exprs = [f"group_concat({c})" for c in int_cols]
    exprs += [f"group_concat(CAST({c} AS INTEGER))" for c in real_cols]
    if real_cols:
        # a value beyond int64 saturates in the CAST and so fails the comparison too
        inexact = " + ".join(f"({c} != CAST({c} AS INTEGER))" for c in real_cols)
        exprs.append(f"total({inexact})")
    row = con.execute(f"SELECT {', '.join(exprs)} FROM {table} WHERE {where}").fetchone()
    out = [_parse_ints(t) for t in row[: len(int_cols)]]
    if real_cols and row[-1]:
        for c in real_cols:
            cur = con.execute(f"SELECT {c} FROM {table} WHERE {where}")
            out.append(np.fromiter(itertools.chain.from_iterable(cur), dtype=np.float64))
    else:
        out += [_parse_ints(t).astype(np.float64) for t in row[len(int_cols) : -1]]
    return out


def read_nodes(con: sqlite3.Connection, path: str, frames: dict[int, Frame]):
    """The tree as numpy arrays (parent, frame) indexed by node id, checked: ids exactly
    0..COUNT(*)-1 (so nothing is sized by an id the file does not back with rows), every node's
    parent in [0, id) (so every walk up ends at the root) and its frame present."""
    import numpy as np

    count = _count(con, "nodes")
    if count > 0x7FFFFFFF:
        raise corrupt(path, "more nodes than a profile may hold")
    n = max(count, 1)
    parent = np.zeros(n, dtype=np.int64)
    frame = np.zeros(n, dtype=np.int64)
    if count == 0:
        return parent, frame
    ids, par, fr = columns(con, "nodes", ("id", "parent", "frame"))
    if len(ids) != count:
        raise corrupt(path, "the nodes table changed while it was read")
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    bad = np.flatnonzero(ids != np.arange(count))
    if len(bad):
        raise corrupt(path, f"node ids are not 0..{count - 1} (found {ids[bad[0]]})")
    parent[:] = par[order]
    frame[:] = fr[order]
    parent[0] = frame[0] = 0
    bad = np.flatnonzero((parent[1:] < 0) | (parent[1:] >= np.arange(1, n))) + 1
    if len(bad):
        raise corrupt(path, f"node {bad[0]} has parent {parent[bad[0]]}")
    present = np.zeros(max(frames) + 1, dtype=bool)
    present[list(frames)] = True
    inside = (frame >= 0) & (frame < len(present))
    ok = inside.copy()
    ok[inside] = present[frame[inside]]
    ok[0] = True
    bad = np.flatnonzero(~ok)
    if len(bad):
        raise corrupt(path, f"node {bad[0]} has no frame {frame[bad[0]]}")
    return parent, frame


class Profile:
    """A loaded profile: the tree, its frames, metrics and metadata."""

    def __init__(self, path: str):
        self.path = path
        con = _open(path)
        try:
            self._load(con)
        except sqlite3.DatabaseError as e:
            raise corrupt(path, str(e)) from None
        finally:
            con.close()

    def _load(self, con: sqlite3.Connection) -> None:
        self.meta, self.frames = read_header(con, self.path)
        parent, frame = read_nodes(con, self.path, self.frames)
        self.node_parent: list[int] = parent.tolist()
        self.node_frame: list[int] = frame.tolist()
        n = len(self.node_parent)
        self.node_children: list[list[int]] = [[] for _ in range(n)]
        for nid in range(1, n):
            self.node_children[self.node_parent[nid]].append(nid)
        self.metrics: dict[str, Metric] = {}
        by_id: dict[int, str] = {}
        for mid, name, unit, desc in con.execute(METRICS_SQL):
            self.metrics[name] = Metric(mid, name, unit, desc)
            by_id[mid] = name
        # metric name -> {node: (sum, count, min, max, inc)}
        self._values: dict[str, dict[int, tuple]] = {m: {} for m in self.metrics}
        for node, mid, s, c, mn, mx, inc in con.execute(
            "SELECT node, metric, sum, count, min, max, inc FROM node_metrics"
        ):
            name = by_id.get(mid)
            if name is not None and 0 <= node < n:
                self._values[name][node] = (s, c, mn, mx, inc)
        self.props: dict[int, dict[str, str]] = {}
        for node, key, value in con.execute(PROPS_SQL):
            if 0 <= node < n:
                self.props.setdefault(node, {})[key] = value
        self.timeline_events = []
        if table_type(con, "timeline") == "table":
            check_table(con, self.path, "timeline", TIMELINE_TABLES["timeline"])
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
        return read_meta_json(self.meta, "notes") or []

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
