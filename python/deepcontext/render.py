"""Shared rendering of profiles: frame labels, human units, and the report's tree views.

`frame_label` names a frame the same way everywhere (report, exporters, diff, GUI):
`train.py:42 step` for Python, `aten::addmm` for an operator, `libfoo.so!bar` for a native frame.
`Tree` is a calling-context tree as numpy arrays (parent, frame, per-metric exclusive/inclusive);
`Tree.transformed` applies the report's focus and hide transforms, `invert` builds the bottom-up
tree, `flat_rows` the flat profile, and `text_tree`/`json_tree_text` render them. Every walk of
the tree is iterative and linear in its nodes: a call path may be 100,000 frames deep.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .errors import UserError
from .reader import (
    FRAME_KINDS,
    METRICS_SQL,
    PROPS_SQL,
    Combine,
    Frame,
    Metric,
    Profile,
    _open,
    combine_rule,
    corrupt,
    elapsed_ns,
    read_header,
    read_meta_json,
    read_nodes,
    stat_base,
)

_MARKED_KINDS = {"scope", "module", "thread", "step", "backward"}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` for a terminal or a text file: control characters (an escape sequence or a newline in
    a frame name from the program) are shown as `\\x1b`, never written raw. Every text output of
    names (report, diff, analyze) goes through it; JSON and the GUI keep the names as they are."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def frame_label(frame: Frame) -> str:
    """The one-line name of a frame used by every view and exporter."""
    kind = frame.kind
    if kind == "root":
        return "<root>"
    if kind == "python":
        where = f"{os.path.basename(frame.file)}:{frame.line}" if frame.file else ""
        return f"{where} {frame.name}".strip()
    if kind == "native":
        if frame.module:
            return f"{os.path.basename(frame.module)}!{frame.name}"
        return frame.name
    if kind in _MARKED_KINDS:
        return f"[{kind}] {frame.name}" if frame.name else f"[{kind}]"
    if kind == "hlo_op" and frame.file:
        return f"{frame.name} ({os.path.basename(frame.file)}:{frame.line})"
    return frame.name or f"<{kind}>"


def frame_dict(frame: Frame) -> dict:
    return {
        "kind": frame.kind,
        "name": frame.name,
        "file": frame.file,
        "line": frame.line,
        "module": frame.module,
    }


_SCALES = {
    "ns": [(1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")],
    "bytes": [(2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"), (1.0, "B")],
}
_DECIMAL = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]


NOT_COMBINABLE = "n/a"  # how a value that cannot be derived (Combine.STORED) reads


def format_value(value: float, unit: str) -> str:
    """`value` in human units: 1.23 s, 45.6 ms, 3.0 MiB, 1.2M (counts, cycles); n/a for NaN, a
    statistic that the row's nodes do not determine."""
    if value != value:
        return NOT_COMBINABLE
    if value == 0:
        return "0"
    scales = _SCALES.get(unit, _DECIMAL)
    a = abs(value)
    factor, suffix = scales[-1]
    for f, sfx in scales:
        if a >= f:
            factor, suffix = f, sfx
            break
    v = value / factor
    text = f"{v:.0f}" if factor == 1.0 and float(value).is_integer() else f"{v:.3g}"
    if unit in _SCALES:
        return f"{text} {suffix}"
    return f"{text}{suffix}"


def format_share(part: float, total: float | None) -> str:
    """`part` as a percentage of `total`; "-" where there is no whole to be a share of."""
    if not total:
        return "-"
    if part != part:
        return NOT_COMBINABLE
    return f"{100.0 * part / total:.1f}%"


def number(value: float) -> float | None:
    """A value for JSON: None (null) for one that cannot be derived (NaN is not JSON)."""
    v = float(value)
    return None if v != v else v


INT64_MAX = 2**63 - 1


def integral(value: float, tree: Tree, metric: str) -> int:
    """`value` rounded, for the formats that hold integers (pprof: int64). Values are finite as
    loaded, but a sum of huge ones (a hostile file's) overflows to infinity: an error, not a
    traceback or a wrapped-around number."""
    v = float(value)
    if v != v or abs(v) >= INT64_MAX:
        raise UserError(
            f"{tree.profile.path}: {metric} has a value ({v:g}) beyond what the format holds"
        )
    return round(v)


@dataclass
class MetricData:
    exc: np.ndarray  # float64 per node
    inc: np.ndarray
    count: np.ndarray  # int64
    min: np.ndarray
    max: np.ndarray
    rule: Combine = Combine.SUM
    # Combine.STORED only: per node, whether any merged input measured the statistic's metric
    # there (its event count > 0). A node that none did adds 0 to every input's value, so a
    # combination with it keeps the other node's statistic exactly.
    measured: np.ndarray | None = None


def _combine_stored(
    group: np.ndarray, values: np.ndarray, measured: np.ndarray, size: int
) -> np.ndarray:
    """Per group, the combination of a Combine.STORED statistic over its members: 0 where no
    member was measured, the one measured member's value, NaN where several were (unknown)."""
    live = measured.astype(bool)
    k = np.bincount(group[live], minlength=size)
    one = np.bincount(group[live], weights=values[live], minlength=size)
    out = np.where(k == 1, one, 0.0)
    out[k > 1] = np.nan
    return out


class Tree:
    """A calling-context tree as arrays indexed by node id (parent < id; node 0 is the root).

    `frames` maps frame ids to Frame; `origin` gives, for each node, the profile node it came from
    (-1 for nodes made by merging several), so props can be looked up.
    """

    def __init__(
        self,
        profile: Profile,
        parent: np.ndarray,
        frame: np.ndarray,
        metrics: dict[str, MetricData],
        origin: np.ndarray,
        frames: dict[int, Frame] | None = None,
    ):
        self.profile = profile
        self.parent = parent
        self.frame = frame
        self.metrics = metrics
        self.origin = origin
        self.frames = frames if frames is not None else profile.frames
        self._children: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # after `transformed`: per node of the profile, its node here (-1: left out)
        self.node_map: np.ndarray | None = None
        # every node but the root lies in one thread (the root's children are the threads), so
        # a node's wall time is a part of the elapsed time; not so once threads are merged
        self.per_thread = True

    def share_total(self, metric: str) -> float | None:
        """The whole that a share of `metric` is of: the root's inclusive value for a metric that
        adds up, the run's elapsed time for wall_time (Combine.PER_THREAD), None for a statistic
        that does not add up (no share: a node's max is no part of the root's max)."""
        md = self.metrics[metric]
        if md.rule is Combine.STORED or (md.rule is Combine.PER_THREAD and not self.per_thread):
            return None
        total = float(md.inc[0])
        return total if total == total else None

    @classmethod
    def from_profile(cls, profile: Profile, metrics: Iterable[str] | None = None) -> Tree:
        names = list(metrics) if metrics is not None else list(profile.metrics)
        n = len(profile.node_parent)
        data = {}
        for m in names:
            values = profile._check_metric(m)
            md = MetricData(
                np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n)
            )
            if values:
                ids = np.fromiter(values.keys(), dtype=np.int64, count=len(values))
                rows = np.array(list(values.values()), dtype=np.float64).reshape(-1, 5)
                md.exc[ids] = rows[:, 0]
                md.count[ids] = rows[:, 1].astype(np.int64)
                md.min[ids] = rows[:, 2]
                md.max[ids] = rows[:, 3]
                md.inc[ids] = rows[:, 4]
            data[m] = md

        def measured(base: str) -> np.ndarray:
            out = np.zeros(n, dtype=bool)
            for node, row in profile._check_metric(base).items():
                out[node] = row[1] > 0
            return out

        _set_rules(data, list(profile.metrics), profile.meta, measured)
        parent = np.asarray(profile.node_parent, dtype=np.int64)
        frame = np.asarray(profile.node_frame, dtype=np.int64)
        return cls(profile, parent, frame, data, np.arange(n, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.parent)

    def label(self, node: int) -> str:
        return frame_label(self.frames[int(self.frame[node])])

    def depth(self) -> np.ndarray:
        return _depths(self.parent)

    def children(self, node: int) -> np.ndarray:
        if self._children is None:
            order = np.argsort(self.parent[1:], kind="stable") + 1
            sorted_parents = self.parent[order]
            idx = np.arange(len(self.parent))
            start = np.searchsorted(sorted_parents, idx, side="left")
            end = np.searchsorted(sorted_parents, idx, side="right")
            self._children = (order, start, end)
        order, start, end = self._children
        return order[start[node] : end[node]]

    def frame_mask(self, predicate: Callable[[Frame], bool]) -> np.ndarray:
        """Per node: whether its frame satisfies `predicate` (evaluated once per frame)."""
        top = int(max(self.frames)) + 1 if self.frames else 1
        by_frame = np.zeros(top, dtype=bool)
        for fid, f in self.frames.items():
            by_frame[fid] = bool(predicate(f))
        return by_frame[self.frame]

    def transformed(
        self, *, hide: np.ndarray | None = None, focus: np.ndarray | None = None
    ) -> Tree:
        """A new tree with `hide` nodes spliced out (their values and children go to their parent)
        and, with `focus`, only the subtrees rooted at focus nodes, re-rooted and merged by frame."""
        fast = self._splice(hide) if focus is None and hide is not None else None
        if fast is not None:
            mapping, parent_a, frame_a, origin = fast
        else:
            mapping, parent_a, frame_a, origin = self._remap(hide, focus)
        keep = mapping >= 0
        if focus is not None:
            keep[0] = False  # the root's own value lies outside every focused subtree
        m = len(parent_a)
        origin[0] = 0 if focus is None else -1
        tgt = mapping[keep]
        data = {}
        for name, md in self.metrics.items():
            count = np.zeros(m, dtype=np.int64)
            np.add.at(count, tgt, md.count[keep])
            has = md.count[keep] > 0
            vmin = np.full(m, np.inf)
            np.minimum.at(vmin, tgt[has], md.min[keep][has])
            vmax = np.full(m, -np.inf)
            np.maximum.at(vmax, tgt[has], md.max[keep][has])
            vmin[count == 0] = 0.0
            vmax[count == 0] = 0.0
            if md.rule is Combine.STORED:
                exc, inc, measured = self._stored_values(md, mapping, keep, origin, parent_a)
                data[name] = MetricData(exc, inc, count, vmin, vmax, md.rule, measured)
                continue
            exc = np.bincount(tgt, weights=md.exc[keep], minlength=m)
            inc = _inclusive(parent_a, exc)
            if focus is None:  # the root's subtree is the whole tree still (wall: the elapsed)
                inc[0] = md.inc[0]
            data[name] = MetricData(exc, inc, count, vmin, vmax, md.rule)
        out = Tree(self.profile, parent_a, frame_a, data, origin, self.frames)
        out.node_map = mapping if self.node_map is None else _compose(self.node_map, mapping)
        out.per_thread = self.per_thread and focus is None
        return out

    def _stored_values(self, md, mapping, keep, origin, parent_a):
        """`transformed`'s values of a Combine.STORED statistic. A node's exclusive value combines
        those of the nodes that went into it (its own and the ones spliced into it). Its inclusive
        value is the stored one of the node it came from, whose whole subtree it has; for a node
        merged from several, the combination of their inclusive values."""
        m = len(parent_a)
        tgt = mapping[keep]
        measured = md.measured if md.measured is not None else md.count > 0
        exc = _combine_stored(tgt, md.exc[keep], measured[keep], m)
        new_measured = np.bincount(tgt, weights=measured[keep], minlength=m) > 0
        inc = np.zeros(m)
        single = origin >= 0
        inc[single] = md.inc[origin[single]]
        # the nodes a merged node came from: those that map to it and whose parent does not (a
        # spliced node maps where its parent does)
        member = keep.copy()
        member[0] = False
        member[1:] &= mapping[self.parent[1:]] != mapping[1:]
        in_subtree = _inclusive(self.parent, measured.astype(np.float64)) > 0
        merged = _combine_stored(mapping[member], md.inc[member], in_subtree[member], m)
        inc[~single] = merged[~single]
        if origin[0] < 0:  # focused: the root holds the focused subtrees, the root's children
            kids = np.flatnonzero(parent_a[1:] == 0) + 1
            live = _inclusive(parent_a, new_measured.astype(np.float64))[kids] > 0
            inc[0] = _combine_stored(np.zeros(len(kids), np.int64), inc[kids], live, 1)[0]
        return exc, inc, new_measured

    def _splice(self, hide: np.ndarray):
        """`transformed`'s node mapping for `hide` alone, with numpy: each hidden node goes to its
        nearest shown ancestor; shown siblings that then meet under one parent with the same
        frame merge, level by level of the new tree. None for trees so deep and thin that a
        numpy call per level would cost more than `_remap`'s loop over the nodes."""
        n = len(self.parent)
        idx = np.arange(n, dtype=np.int64)
        hide = hide.copy()
        hide[0] = False
        # Nearest shown ancestor-or-self, by pointer jumping (a few rounds: hidden runs are short).
        up = np.where(hide, self.parent, idx)
        up[0] = 0
        while True:
            nxt = up[up]
            if np.array_equal(nxt, up):
                break
            up = nxt
        shown = np.flatnonzero(~hide)
        kids = shown[1:]  # shown[0] is the root
        sparent = up[self.parent[kids]]  # each shown node's new parent, as an old id
        top = int(self.frame.max()) + 1 if n else 1
        keys = sparent * top + self.frame[kids]
        keys.sort()
        if not (keys[1:] == keys[:-1]).any():  # nothing merges: the shown nodes in their order
            new_id = np.full(n, -1, dtype=np.int64)
            new_id[shown] = np.arange(len(shown), dtype=np.int64)
            parent_a = np.zeros(len(shown), dtype=np.int64)
            parent_a[1:] = new_id[sparent]
            return new_id[up], parent_a, self.frame[shown].astype(np.int64), shown.copy()
        # Depth in the new tree (list ranking over the shown nodes' new parents).
        ptr = np.zeros(n, dtype=np.int64)
        ptr[kids] = sparent
        depth = np.zeros(n, dtype=np.int64)
        depth[kids] = 1
        while ptr.any():
            depth = depth + depth[ptr]
            ptr = ptr[ptr]
        order = kids[np.lexsort((kids, depth[kids]))]
        bounds = np.flatnonzero(np.diff(depth[order])) + 1
        if len(bounds) + 1 > max(64, len(kids) // 64):
            return None
        merged = np.full(n, -1, dtype=np.int64)
        merged[0] = 0
        parents, frames, origins = (
            [np.zeros(1, np.int64)],
            [self.frame[:1]],
            [np.zeros(1, np.int64)],
        )
        next_id = 1
        for level in np.split(order, bounds):
            pk = merged[up[self.parent[level]]]
            key = pk * top + self.frame[level]
            _, first, inv, counts = np.unique(
                key, return_index=True, return_inverse=True, return_counts=True
            )
            perm = np.argsort(first, kind="stable")  # groups in order of their first node
            rank = np.empty_like(perm)
            rank[perm] = np.arange(len(perm))
            merged[level] = next_id + rank[inv.ravel()]
            lead = level[first[perm]]
            parents.append(pk[first[perm]])
            frames.append(self.frame[lead])
            origins.append(np.where(counts[perm] == 1, lead, -1))
            next_id += len(perm)
        return (
            merged[up],
            np.concatenate(parents),
            np.concatenate(frames).astype(np.int64),
            np.concatenate(origins),
        )

    def _remap(self, hide: np.ndarray | None, focus: np.ndarray | None):
        """`transformed`'s node mapping, node by node: the old node -> new node map (-1: left
        out), and the new tree's parents, frames and origins (-1: merged from several)."""
        n = len(self.parent)
        parent = self.parent.tolist()
        frame = self.frame.tolist()
        hide_l = hide.tolist() if hide is not None else [False] * n
        focus_l = focus.tolist() if focus is not None else None
        new = [0] * n
        inside = [focus_l is None] * n
        intern: dict[tuple[int, int], int] = {}
        new_parent = [0]
        new_frame = [0]
        origin = [0]
        for i in range(1, n):
            p = parent[i]
            if focus_l is not None:
                inside[i] = inside[p] or focus_l[i]
                if not inside[i]:
                    new[i] = -1
                    continue
                np_ = new[p] if inside[p] else 0
            else:
                np_ = new[p]
            if hide_l[i]:
                new[i] = np_
                continue
            key = (np_, frame[i])
            j = intern.get(key)
            if j is None:
                j = len(new_parent)
                intern[key] = j
                new_parent.append(np_)
                new_frame.append(frame[i])
                origin.append(i)
            else:
                origin[j] = -1
            new[i] = j
        return (
            np.asarray(new, dtype=np.int64),
            np.asarray(new_parent, dtype=np.int64),
            np.asarray(new_frame, dtype=np.int64),
            np.asarray(origin, dtype=np.int64),
        )


@dataclass
class ProfileInfo:
    """What the views need of a profile besides its tree (a light stand-in for Profile)."""

    path: str
    meta: dict[str, str]
    metrics: dict[str, Metric]
    frames: dict[int, Frame]
    props: dict[int, dict[str, str]]
    totals: dict[str, float]

    @property
    def notes(self) -> list[str]:
        return read_meta_json(self.meta, "notes") or []

    def default_metric(self) -> str:
        for m in ("gpu_time", "cpu_time", "op_time", "wall_time"):
            if self.totals.get(m, 0) > 0:
                return m
        return next(iter(self.metrics), "cpu_time")


def load_tree(
    path: str | os.PathLike,
    metrics: Iterable[str] | Callable[[ProfileInfo], Iterable[str]] | None = None,
) -> Tree:
    """Read a .dctx file straight into a Tree (bulk reads into numpy arrays; only the metrics
    asked for, all when None; `metrics` may be a function of the ProfileInfo that picks them).
    Validates the file as deepcontext.load does."""
    path = os.fspath(path)
    con = _open(path)
    try:
        return _read_tree(con, path, metrics)
    except sqlite3.DatabaseError as e:
        raise corrupt(path, str(e)) from None
    finally:
        con.close()


def _read_tree(con: sqlite3.Connection, path: str, metrics) -> Tree:
    meta, frames = read_header(con, path)
    parent, frame = read_nodes(con, path, frames)
    n = len(parent)
    known = {}
    for mid, name, unit, desc in con.execute(METRICS_SQL):
        known[name] = Metric(mid, name, unit, desc)
    totals = {name: 0.0 for name in known}
    by_id = {m.id: m.name for m in known.values()}
    for mid, inc in con.execute("SELECT metric, inc FROM node_metrics WHERE node = 0"):
        if mid in by_id:
            totals[by_id[mid]] = inc
    props: dict[int, dict[str, str]] = {}
    for node, key, value in con.execute(PROPS_SQL):
        if 0 <= node < n:
            props.setdefault(node, {})[key] = value
    info = ProfileInfo(path, meta, known, frames, props, totals)
    if callable(metrics):
        metrics = metrics(info)
    wanted = list(known) if metrics is None else list(metrics)
    data = {}
    for m in wanted:
        if m not in known:
            raise UserError(
                f"unknown metric {m!r} (this profile has: {', '.join(known) or 'none'})"
            )
        vals = np.array(
            con.execute(
                "SELECT node, sum, count, min, max, inc FROM node_metrics WHERE metric = ?",
                (known[m].id,),
            ).fetchall(),
            dtype=np.float64,
        ).reshape(-1, 6)
        ids = vals[:, 0].astype(np.int64)
        ok = (ids >= 0) & (ids < n)
        ids, vals = ids[ok], vals[ok]
        md = MetricData(
            np.zeros(n), np.zeros(n), np.zeros(n, dtype=np.int64), np.zeros(n), np.zeros(n)
        )
        md.exc[ids] = vals[:, 1]
        md.count[ids] = vals[:, 2].astype(np.int64)
        md.min[ids] = vals[:, 3]
        md.max[ids] = vals[:, 4]
        md.inc[ids] = vals[:, 5]
        data[m] = md

    def measured(base: str) -> np.ndarray:
        out = np.zeros(n, dtype=bool)
        rows = con.execute(
            "SELECT node FROM node_metrics WHERE metric = ? AND count > 0", (known[base].id,)
        ).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        out[ids[(ids >= 0) & (ids < n)]] = True
        return out

    _set_rules(data, list(known), meta, measured)
    return Tree(info, parent, frame, data, np.arange(n, dtype=np.int64), frames)


def _set_rules(
    data: dict[str, MetricData],
    names: list[str],
    meta: dict[str, str],
    measured: Callable[[str], np.ndarray],
) -> None:
    """Each metric's Combine rule (reader.combine_rule), with what it needs: for a merge
    statistic where its metric was measured, for wall_time the elapsed time at the root."""
    for name, md in data.items():
        md.rule = combine_rule(name, names)
        if md.rule is Combine.STORED:
            md.measured = measured(stat_base(name))
        elif md.rule is Combine.PER_THREAD and md.inc[0] > 0:  # wall time was sampled
            elapsed = elapsed_ns(meta)
            if elapsed is not None:
                md.inc[0] = elapsed


def _compose(first: np.ndarray, then: np.ndarray) -> np.ndarray:
    """The node map of two transforms in a row."""
    return np.where(first >= 0, then[np.maximum(first, 0)], -1)


def _inclusive(parent: np.ndarray, exc: np.ndarray) -> np.ndarray:
    """Subtree sums of `exc`, level by level from the deepest (parent < id for every node)."""
    n = len(parent)
    if n == 1:
        return exc.copy()
    depth = _depths(parent)
    levels = int(depth.max())
    if levels > 64 and levels * 64 > n:  # deep and thin: one pass up from the last node
        inc_l, pl = exc.tolist(), parent.tolist()
        for i in range(n - 1, 0, -1):
            inc_l[pl[i]] += inc_l[i]
        return np.asarray(inc_l, dtype=exc.dtype)
    inc = exc.copy()
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(levels + 2))
    for d in range(levels, 0, -1):
        nodes = order[bounds[d] : bounds[d + 1]]
        np.add.at(inc, parent[nodes], inc[nodes])
    return inc


def invert(tree: Tree, primary: str, *, max_depth: int | None, min_value: float) -> Tree:
    """The bottom-up tree: the root's children are the frames where values were measured
    (exclusive), each node's children its callers. A node's inclusive value is what was measured
    in the frames below it in this tree, along that caller chain; its exclusive value is the part
    of that measured in its own frame (so only the first level has one).

    Nodes whose primary inclusive is below `min_value`, or deeper than `max_depth`, are not built.
    """
    names = list(tree.metrics)
    n = len(tree.parent)
    measured = np.zeros(n, dtype=bool)
    for md in tree.metrics.values():
        measured |= md.exc != 0
    measured[0] = False
    cursors = np.nonzero(measured)[0]
    vals = np.stack([tree.metrics[m].exc[cursors] for m in names], axis=1) if names else None
    counts = np.stack([tree.metrics[m].count[cursors] for m in names], axis=1) if names else None
    pi = names.index(primary)
    k = len(names)
    # Combine.STORED columns: which cursors measured each (the others add nothing to a row)
    stored = [j for j, m in enumerate(names) if tree.metrics[m].rule is Combine.STORED]
    live = np.zeros((len(cursors), k), dtype=bool)
    for j in stored:
        md = tree.metrics[names[j]]
        live[:, j] = (md.measured if md.measured is not None else md.count > 0)[cursors]
        vals[:, j] = np.where(live[:, j], vals[:, j], 0.0)

    def combined(inv: np.ndarray, size: int) -> np.ndarray:
        """Per row of this level (cursors grouped by `inv`): the rows' values by each rule."""
        sums = np.zeros((size, k))
        np.add.at(sums, inv, vals)
        for j in stored:
            sums[:, j] = _combine_stored(inv, vals[:, j], live[:, j], size)
        return sums

    fspan = int(tree.frame.max()) + 1
    level_parent = [np.zeros(1, dtype=np.int64)]
    level_frame = [np.zeros(1, dtype=np.int64)]
    # the root is the whole tree: its values are the tree's root values, by every rule
    level_inc = [np.array([[float(tree.metrics[m].inc[0]) for m in names]]).reshape(1, k)]
    level_exc = [np.zeros((1, k))]
    level_cnt = [np.zeros((1, k), dtype=np.int64)]
    owner = np.zeros(len(cursors), dtype=np.int64)  # inverted node each cursor sits under
    at = cursors.copy()  # the tree node each cursor has reached
    built = 1
    level = 0
    while len(at) and (max_depth is None or level < max_depth):
        fr = tree.frame[at]
        uniq, inv = np.unique(owner * fspan + fr, return_inverse=True)
        inv = inv.ravel()
        sums = combined(inv, len(uniq))
        # a row whose value is unknown (NaN) is kept: it may be large
        kept = ~(sums[:, pi] < min_value) if min_value > 0 else np.ones(len(uniq), dtype=bool)
        ids = np.full(len(uniq), -1, dtype=np.int64)
        ids[kept] = built + np.arange(int(kept.sum()))
        built += int(kept.sum())
        level_parent.append(uniq[kept] // fspan)
        level_frame.append(uniq[kept] % fspan)
        level_inc.append(sums[kept])
        if level == 0:
            cnt = np.zeros((len(uniq), k), dtype=np.int64)
            np.add.at(cnt, inv, counts)
            level_exc.append(sums[kept])
            level_cnt.append(cnt[kept])
        else:
            level_exc.append(np.zeros((int(kept.sum()), k)))
            level_cnt.append(np.zeros((int(kept.sum()), k), dtype=np.int64))
        new_owner = ids[inv]
        nxt = tree.parent[at]
        alive = (new_owner >= 0) & (nxt != 0)
        owner = new_owner[alive]
        at = nxt[alive]
        vals = vals[alive]
        live = live[alive]
        level += 1
    out_parent = np.concatenate(level_parent)
    out_frame = np.concatenate(level_frame)
    inc = np.concatenate(level_inc)
    exc = np.concatenate(level_exc)
    cnt = np.concatenate(level_cnt)
    zeros = np.zeros(len(out_parent))
    data = {
        m: MetricData(
            exc[:, k].copy(), inc[:, k].copy(), cnt[:, k].copy(), zeros, zeros, tree.metrics[m].rule
        )
        for k, m in enumerate(names)
    }
    out = Tree(
        tree.profile,
        out_parent,
        out_frame,
        data,
        np.full(len(out_parent), -1, dtype=np.int64),
        tree.frames,
    )
    out.per_thread = False  # a frame's row adds up its time in every thread
    return out


def flat_rows(tree: Tree) -> list[dict]:
    """One row per frame: exclusive = sum over its nodes; inclusive = sum over its nodes that have
    no ancestor with the same frame (so recursion is not counted twice)."""
    outer = outermost(tree.parent, tree.frame)
    fr = tree.frame
    top = int(fr.max()) + 1
    rows_by_frame: dict[int, dict] = {}
    present = np.zeros(top, dtype=bool)
    for md in tree.metrics.values():
        weights = np.nan_to_num(np.abs(md.inc[1:]), nan=1.0)
        present |= np.bincount(fr[1:], weights=weights, minlength=top) > 0
    sums = {}
    for m, md in tree.metrics.items():
        cnt = np.bincount(fr[1:], weights=md.count[1:], minlength=top)
        if md.rule is Combine.STORED:
            measured = md.measured if md.measured is not None else md.count > 0
            below = _inclusive(tree.parent, measured.astype(np.float64)) > 0
            exc = _combine_stored(fr[1:], md.exc[1:], measured[1:], top)
            inc = _combine_stored(fr[outer], md.inc[outer], below[outer], top)
        else:
            exc = np.bincount(fr[1:], weights=md.exc[1:], minlength=top)
            inc = np.bincount(fr[outer], weights=md.inc[outer], minlength=top)
        sums[m] = (exc, inc, cnt)
    for fid in np.nonzero(present)[0].tolist():
        rows_by_frame[fid] = {
            "frame": fid,
            "metrics": {
                m: {
                    "inclusive": number(inc[fid]),
                    "exclusive": number(exc[fid]),
                    "count": int(cnt[fid]),
                }
                for m, (exc, inc, cnt) in sums.items()
            },
        }
    return list(rows_by_frame.values())


def outermost(parent: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Per node: True when no ancestor has the same frame (the root is never outermost).

    Every node walks up its ancestors in lock step with the others, so the work is the sum of
    the depths, done in numpy."""
    n = len(parent)
    outer = np.ones(n, dtype=bool)
    outer[0] = False
    if n > 1 and int(_depths(parent).sum()) > 64 * n:  # deep: one walk, linear in the nodes
        return _outermost_walk(parent, frame)
    active = np.arange(1, n)
    anc = parent[active]
    while len(active):
        live = anc != 0
        active, anc = active[live], anc[live]
        same = frame[anc] == frame[active]
        outer[active[same]] = False
        keep = ~same
        active, anc = active[keep], parent[anc[keep]]
    return outer


def _outermost_walk(parent: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """outermost by one depth-first walk that counts the frames on the current path."""
    n = len(parent)
    pl, fl = parent.tolist(), frame.tolist()
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        kids[pl[i]].append(i)
    outer = [False] * n
    on_path: dict[int, int] = {}
    stack = list(kids[0])  # ~i: leave node i
    while stack:
        i = stack.pop()
        if i < 0:
            f = fl[~i]
            on_path[f] -= 1
            continue
        f = fl[i]
        c = on_path.get(f, 0)
        outer[i] = c == 0
        on_path[f] = c + 1
        stack.append(~i)
        stack.extend(kids[i])
    return np.asarray(outer, dtype=bool)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Each node's depth (parent < id for every node)."""
    pl = parent.tolist()
    d = [0] * len(pl)
    for i in range(1, len(pl)):
        d[i] = d[pl[i]] + 1
    return np.asarray(d, dtype=np.int64)


def parse_kinds(values: Iterable[str]) -> set[str]:
    kinds = set()
    for v in values:
        for k in v.split(","):
            k = k.strip()
            if not k:
                continue
            if k not in FRAME_KINDS:
                raise UserError(f"unknown frame kind {k!r} (kinds: {', '.join(FRAME_KINDS[1:])})")
            kinds.add(k)
    return kinds


def compile_regex(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UserError(f"bad {what} regex {pattern!r}: {e}") from None


def frame_matches(pattern: re.Pattern) -> Callable[[Frame], bool]:
    def match(f: Frame) -> bool:
        if f.kind == "root":
            return False
        return bool(pattern.search(frame_label(f)) or (f.file and pattern.search(f.file)))

    return match


def visible_nodes(
    tree: Tree, primary: str, *, max_depth: int | None, min_value: float
) -> list[tuple[int, int]]:
    """(node, depth) in display order: children by decreasing primary inclusive, pruned."""
    inc = tree.metrics[primary].inc
    out = []
    stack = [(0, 0)]
    while stack:
        node, d = stack.pop()
        out.append((node, d))
        if max_depth is not None and d >= max_depth:
            continue
        kids = tree.children(node)
        if len(kids) == 0:
            continue
        kv = inc[kids]
        if min_value > 0:
            kids = kids[~(kv < min_value)]  # unknown values (NaN) are kept
        kids = kids[np.argsort(-inc[kids], kind="stable")]
        stack.extend((int(k), d + 1) for k in kids[::-1])
    return out


def text_tree(
    tree: Tree,
    metrics: list[str],
    *,
    max_depth: int | None,
    min_share: float,
    units: dict[str, str],
) -> list[str]:
    primary = metrics[0]
    total = tree.share_total(primary)
    min_value = min_share_value(tree, primary, min_share)
    rows = []
    for node, d in visible_nodes(tree, primary, max_depth=max_depth, min_value=min_value):
        cells = [format_share(tree.metrics[primary].inc[node], total)]
        for m in metrics:
            md = tree.metrics[m]
            cells.append(format_value(float(md.inc[node]), units[m]))
            cells.append(format_value(float(md.exc[node]), units[m]))
        rows.append((cells, indent(d) + tree.label(node)))
    header = ["%"] + [f"{m} {part}" for m in metrics for part in ("incl", "excl")]
    return _columns(header, rows)


MAX_INDENT = 100  # levels indented in the text tree; deeper rows say their depth


def indent(depth: int) -> str:
    """A text tree row's indentation: two spaces per level, at most MAX_INDENT levels, then the
    depth written out (a 100,000-deep path would otherwise print 10^10 spaces)."""
    if depth <= MAX_INDENT:
        return "  " * depth
    return "  " * MAX_INDENT + f"[depth {depth}] "


def min_share_value(tree: Tree, metric: str, min_share: float) -> float:
    """The value below which --min-share prunes: that share of the metric's whole, or for a
    statistic that does not add up, of the root's value."""
    total = tree.share_total(metric)
    if total is None:
        total = float(tree.metrics[metric].inc[0])
    return total * min_share / 100.0 if total > 0 and min_share > 0 else 0.0


def _columns(header: list[str], rows: list[tuple[list[str], str]]) -> list[str]:
    widths = [len(h) for h in header]
    for cells, _ in rows:
        for k, c in enumerate(cells):
            widths[k] = max(widths[k], len(c))
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)) + "  frame"]
    for cells, label in rows:
        lines.append(
            "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + "  " + label
        )
    return lines


def node_json(tree: Tree, node: int, metrics: list[str], node_id: int | None = None) -> dict:
    f = tree.frames[int(tree.frame[node])]
    mdict = {}
    for m in metrics:
        md = tree.metrics[m]
        mdict[m] = {
            "inclusive": number(md.inc[node]),
            "exclusive": number(md.exc[node]),
            "count": int(md.count[node]),
            "min": number(md.min[node]),
            "max": number(md.max[node]),
        }
    origin = int(tree.origin[node])
    props = tree.profile.props.get(origin, {}) if origin >= 0 else {}
    return {
        "id": int(node if node_id is None else node_id),
        "frame": frame_dict(f),
        "label": frame_label(f),
        "metrics": mdict,
        "props": dict(props),
        "children": [],
    }


_encode = json.JSONEncoder(separators=(",", ":")).encode


def json_tree_text(
    tree: Tree, metrics: list[str], *, max_depth: int | None, min_share: float
) -> Iterator[str]:
    """The report's nested JSON tree (docs/format.md, 'JSON report'), piece by piece: written
    without recursion, so a call path of any depth is written (json's encoder recurses once per
    level and overflowed the C stack at depths of some 50,000)."""
    primary = metrics[0]
    min_value = min_share_value(tree, primary, min_share)
    prev = -1  # depth of the node written last; the nodes at depths 0..prev are open
    for node, d in visible_nodes(tree, primary, max_depth=max_depth, min_value=min_value):
        if prev >= d:
            yield "]}" * (prev - d + 1)
        text = _encode(node_json(tree, node, metrics))  # ends with "children":[]}
        yield ("," if prev >= d else "") + text[:-2]
        prev = d
    yield "]}" * (prev + 1)


def view(
    tree: Tree,
    *,
    import_frames: bool = False,
    hide_kinds: Iterable[str] = (),
    exclude: str | None = None,
    focus: str | None = None,
) -> Tree:
    """The top-down tree that report, export and the GUI show: frames of the kinds `hide_kinds`,
    frames matching `exclude` and, unless `import_frames`, Python's import-system frames spliced
    out; with `focus`, only the subtrees under frames matching it, merged."""
    kinds = parse_kinds(hide_kinds)
    match = frame_matches(compile_regex(exclude, "--exclude")) if exclude else None

    def hidden(f: Frame) -> bool:
        return (
            f.kind in kinds
            or (match is not None and match(f))
            or (not import_frames and f.import_system())
        )

    hide = tree.frame_mask(hidden)
    if not hide.any():
        hide = None
    focus_mask = None
    if focus:
        focus_mask = tree.frame_mask(frame_matches(compile_regex(focus, "--focus")))
        if not focus_mask.any():
            raise UserError(f"--focus {focus!r} matches no frame of {tree.profile.path}")
    if hide is None and focus_mask is None:
        return tree
    return tree.transformed(hide=hide, focus=focus_mask)


def combine_notes(tree: Tree, metrics: Iterable[str]) -> list[str]:
    """What a reader of the view must know about how its metrics combine (reader.Combine)."""
    notes = []
    inputs = tree.profile.meta.get("merged_count", "several")
    for m in metrics:
        md = tree.metrics[m]
        if md.rule is Combine.STORED:
            notes.append(
                f"{m} is a statistic across the {inputs} merged inputs, which does not add up: a "
                f"row that combines several measured nodes (spliced import frames, merged paths, "
                f"bottom-up and flat rows) reads {NOT_COMBINABLE}, and no % is shown"
            )
        elif md.rule is Combine.PER_THREAD:
            elapsed = elapsed_ns(tree.profile.meta)
            if elapsed is None:
                notes.append(
                    f"{m}: this profile does not record the elapsed time; its total adds up the "
                    "threads' wall times"
                )
            elif tree.per_thread:
                notes.append(
                    f"{m}: the total is the elapsed time ({format_value(elapsed, 'ns')}); each "
                    "[thread] node holds that thread's wall time; % is of the elapsed time"
                )
            else:
                notes.append(
                    f"{m}: rows add up the wall time of every thread they ran in, so they are no "
                    f"share of the elapsed time ({format_value(elapsed, 'ns')}); no % is shown"
                )
    return notes
