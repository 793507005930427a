"""Merging per-process profiles of one job (data-loader workers, distributed ranks) into one.

Nodes are matched by call path. For each metric M the merged profile holds M itself (sums over
the inputs; count, min and max over all their events) and five statistics across the inputs, as
metrics of their own: `M:mean`, `M:min`, `M:max`, `M:std` (population) and `M:imbalance`
(max / mean). Each statistic row carries the statistic of the inputs' exclusive values in `sum`
and of their inclusive values in `inc`; an input without the node counts as 0. The inputs'
metadata is kept in the `merged_inputs` meta key (docs/interop.md).

Speed: worker processes read the inputs (SQLite columns fetched as text and parsed by numpy,
path hashes computed level by level), the main process matches paths by hash with a sorted-array
index, checks every match against the stored (parent, frame) so a hash collision cannot merge two
different paths, and accumulates the statistics as dense numpy vectors.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from queue import Empty

import numpy as np

from .errors import ProfileError, UserError
from .reader import (
    METRICS_SQL,
    PROPS_SQL,
    _open,
    columns,
    corrupt,
    kind_number,
    read_header,
    read_meta_json,
    read_nodes,
)
from .writer import fast_writes, insert_tables, meta_json

STATS = ("mean", "min", "max", "std", "imbalance")


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on uint64 arrays."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@dataclass
class Input:
    """One input profile, read into arrays by a worker process."""

    path: str
    meta: dict
    frames: list[tuple]  # (kind, name, file, line, module) per local frame index
    parent: np.ndarray  # per local node
    frame: np.ndarray  # local frame index per node
    hash: np.ndarray  # uint64 path hash per node
    metrics: list[tuple[str, str, str]]  # (name, unit, description) per local metric index
    rows: dict[int, tuple]  # metric index -> (node, sum, count, min, max) arrays, count > 0
    inclusive: dict[int, np.ndarray]  # metric index -> inclusive value per node
    props: list[tuple[int, str, str]]


def read_input(path: str) -> Input:
    con = _open(path)
    try:
        return _read(con, path)
    except sqlite3.DatabaseError as e:
        raise corrupt(path, str(e)) from None
    finally:
        con.close()


def _read(con: sqlite3.Connection, path: str) -> Input:
    meta, by_id = read_header(con, path)  # validated as every reader's (reader.check_tables)
    parent, frame_id = read_nodes(con, path, by_id)
    n = len(parent)
    # local frame index: the root's frame is 0, the others follow in id order
    fids = sorted(f for f in by_id if f != 0)
    local = np.full(max(by_id) + 1, -1, dtype=np.int64)
    local[0] = 0
    local[fids] = np.arange(1, len(fids) + 1)
    frames: list[tuple] = [(0, "", "", 0, "")]
    frames += [
        (kind_number(f.kind), f.name, f.file, f.line, f.module) for f in map(by_id.get, fids)
    ]
    # hash() is the same in the forked readers and the main process (one hash seed); matches
    # are checked against the frame contents in Merger._map_nodes anyway
    fhash = np.array([hash(f) for f in frames], dtype=np.int64).view(np.uint64)
    frame = local[frame_id]
    # depth levels, then path hashes level by level
    pl = parent.tolist()
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[pl[i]] + 1
    depth_a = np.asarray(depth, dtype=np.int64)
    order = np.argsort(depth_a, kind="stable")
    bounds = np.searchsorted(depth_a[order], np.arange(int(depth_a.max()) + 2))
    h = np.zeros(n, dtype=np.uint64)
    h[0] = np.uint64(0x6A09E667F3BCC908)
    for d in range(1, int(depth_a.max()) + 1):
        lvl = order[bounds[d] : bounds[d + 1]]
        h[lvl] = _mix(h[parent[lvl]] * np.uint64(0x9E3779B97F4A7C15) ^ fhash[frame[lvl]])
    metrics = []
    mlocal = {}
    for mid, name, unit, desc in con.execute(METRICS_SQL):
        mlocal[mid] = len(metrics)
        metrics.append((name, unit, desc))
    node, metric, count, s, mn, mx = columns(
        con, "node_metrics", ("node", "metric", "count"), ("sum", "min", "max"), "count > 0"
    )
    known = (node >= 0) & (node < n)  # values of nodes the tree lacks are left out, as by reader
    node, metric, count, s, mn, mx = (c[known] for c in (node, metric, count, s, mn, mx))
    rows = {}
    # inclusive values of all metrics at once: (node, metric) columns summed up level by level
    inc = np.zeros((n, max(len(metrics), 1)))
    for mid, k in mlocal.items():
        sel = metric == mid
        rows[k] = (node[sel], s[sel], count[sel], mn[sel], mx[sel])
        inc[:, k] = np.bincount(node[sel], weights=s[sel], minlength=n)
    for d in range(int(depth_a.max()), 0, -1):
        lvl = order[bounds[d] : bounds[d + 1]]
        np.add.at(inc, parent[lvl], inc[lvl])
    inclusive = {k: inc[:, k].copy() for k in mlocal.values()}
    props = con.execute(PROPS_SQL).fetchall()
    return Input(path, meta, frames, parent, frame, h, metrics, rows, inclusive, props)


class _Grow:
    """Dense per-node arrays that grow with the merged tree."""

    def __init__(self, fill: float, dtype=np.float64):
        self.fill = fill
        self.a = np.full(1024, fill, dtype=dtype)

    def ensure(self, n: int) -> np.ndarray:
        if n > len(self.a):
            old = self.a
            self.a = np.full(max(n, 2 * len(old)), self.fill, dtype=old.dtype)
            self.a[: len(old)] = old
        return self.a


class _MetricAcc:
    def __init__(self, name: str, unit: str, desc: str):
        self.name, self.unit, self.desc = name, unit, desc
        self.inputs = 0
        # Per node over the inputs so far (an input without the node or the metric counts as 0):
        # sums, and m2, the sum of squared deviations from their mean, updated one input at a
        # time (Welford) and across Mergers by Chan's rule: the std of values that are large and
        # close together stays exact, where E[x^2] - mean^2 cancels to noise.
        self.counted = 0  # inputs accounted for in sums and m2
        self.exc_sum = _Grow(0.0)
        self.exc_m2 = _Grow(0.0)
        self.exc_min = _Grow(np.inf)
        self.exc_max = _Grow(0.0)
        self.exc_present = _Grow(0, np.int64)
        self.inc_sum = _Grow(0.0)
        self.inc_m2 = _Grow(0.0)
        self.inc_min = _Grow(np.inf)
        self.inc_max = _Grow(0.0)
        self.argmax = _Grow(-1, np.int64)
        self.count = _Grow(0, np.int64)
        self.ev_min = _Grow(np.inf)
        self.ev_max = _Grow(-np.inf)
        self.seen_min_upto = 0  # nodes [0, seen_min_upto) have had their min initialised


def _combine(sum_a, m2_a, n_a: int, sum_b, m2_b, n_b: int) -> None:
    """Chan's rule, in place: (sum_a, m2_a) over n_a values joined by (sum_b, m2_b) over n_b
    values (per node)."""
    if n_b == 0:
        return
    if n_a == 0:
        sum_a[:] = sum_b
        m2_a[:] = m2_b
        return
    delta = sum_b / n_b - sum_a / n_a
    m2_a += m2_b + delta * delta * (n_a * n_b / (n_a + n_b))
    sum_a += sum_b


def _pad_zeros(acc: _MetricAcc, inputs: int, n: int) -> None:
    """Accounts for the inputs up to `inputs` that lacked this metric: each a 0 at every node."""
    missing = inputs - acc.counted
    if missing > 0:
        zeros = np.zeros(n)
        for total, m2 in (("exc_sum", "exc_m2"), ("inc_sum", "inc_m2")):
            getattr(acc, total).ensure(n)
            getattr(acc, m2).ensure(n)
            _combine(getattr(acc, total).a[:n], getattr(acc, m2).a[:n], acc.counted, zeros,
                     zeros, missing)  # fmt: skip
        acc.counted = inputs


class Merger:
    """Accumulates inputs one by one; `write` stores the merged profile."""

    def __init__(self) -> None:
        self.n = 1  # merged nodes so far (the root)
        self.parent = _Grow(0, np.int64)
        self.frame = _Grow(0, np.int64)
        self.known_h = np.zeros(0, dtype=np.uint64)  # sorted path hashes
        self.known_id = np.zeros(0, dtype=np.int64)
        self.frames: dict[tuple, int] = {(0, "", "", 0, ""): 0}
        self.metrics: dict[str, _MetricAcc] = {}
        self.props: dict[tuple[int, str], str] = {}
        self.inputs: list[dict] = []
        self.totals: dict[str, list[float]] = {}

    def add(self, inp: Input) -> None:
        k = len(self.inputs)
        known = list(map(self.frames.get, inp.frames))
        if None in known:
            for i, f in enumerate(inp.frames):
                if known[i] is None:
                    known[i] = self.frames.setdefault(f, len(self.frames))
        gframe = np.array(known, dtype=np.int64)
        out = self._map_nodes(inp, gframe)
        n = self.n
        for mk, (name, unit, desc) in enumerate(inp.metrics):
            acc = self.metrics.get(name)
            if acc is None:
                acc = self.metrics[name] = _MetricAcc(name, unit, desc)
            self._accumulate(acc, k, out, inp.rows[mk], inp.inclusive[mk], n)
            self.totals.setdefault(name, [0.0] * k).append(float(inp.inclusive[mk][0]))
        for tot in self.totals.values():
            if len(tot) < k + 1:
                tot.append(0.0)
        for node, key, value in inp.props:
            if 0 <= node < len(out):
                self.props.setdefault((int(out[node]), key), value)
        self.inputs.append({"path": inp.path, "meta": inp.meta})

    _SUMS = ("exc_present", "count")

    def compact(self) -> Merger:
        """Trim the growable arrays to the merged size (before sending this Merger elsewhere)."""
        n = self.n
        for g in (self.parent, self.frame):
            g.a = g.a[:n].copy()
        for acc in self.metrics.values():
            for g in vars(acc).values():
                if isinstance(g, _Grow):
                    g.a = g.a[:n].copy()
        return self

    def absorb(self, other: Merger) -> None:
        """Add the inputs merged by `other` (a Merger of the inputs that follow this one's), as
        if they had been added here one by one: the same tree, ids and statistics."""
        base = len(self.inputs)
        k_other = len(other.inputs)
        no = other.n
        old_n = self.n
        frames: list = [None] * len(other.frames)
        for f, i in other.frames.items():
            frames[i] = f
        known = list(map(self.frames.get, frames))
        for i, f in enumerate(frames):
            if known[i] is None:
                known[i] = self.frames.setdefault(f, len(self.frames))
        gframe = np.array(known, dtype=np.int64)
        h = np.zeros(no, dtype=np.uint64)
        h[other.known_id] = other.known_h
        pseudo = Input("<merged inputs>", {}, frames, other.parent.a[:no], other.frame.a[:no], h,
                       [], {}, {}, [])  # fmt: skip
        out = self._map_nodes(pseudo, gframe)
        n = self.n
        for name, acc_o in other.metrics.items():
            acc = self.metrics.get(name)
            fresh = acc is None
            if fresh:
                acc = self.metrics[name] = _MetricAcc(name, acc_o.unit, acc_o.desc)
            for g in vars(acc).values():
                if isinstance(g, _Grow):
                    g.ensure(n)
            for attr in self._SUMS:
                getattr(acc, attr).a[out] += getattr(acc_o, attr).a[:no]
            _pad_zeros(acc, base, n)
            _pad_zeros(acc_o, k_other, no)
            for total, m2 in (("exc_sum", "exc_m2"), ("inc_sum", "inc_m2")):
                sum_b = np.zeros(n)
                m2_b = np.zeros(n)
                sum_b[out] = getattr(acc_o, total).a[:no]
                m2_b[out] = getattr(acc_o, m2).a[:no]
                _combine(getattr(acc, total).a[:n], getattr(acc, m2).a[:n], base, sum_b, m2_b,
                         k_other)  # fmt: skip
            acc.counted = base + k_other
            # min across inputs, an input without the node counting as 0 (inf: not yet set,
            # which reads as 0 once some input had the metric)
            for attr in ("exc_min", "inc_min"):
                mine = np.full(n, np.inf) if fresh else np.zeros(n)
                if not fresh:
                    v = getattr(acc, attr).a[:old_n]
                    mine[:old_n] = np.where(np.isfinite(v), v, 0.0)
                theirs = np.zeros(n)
                v = getattr(acc_o, attr).a[:no]
                theirs[out] = np.where(np.isfinite(v), v, 0.0)
                getattr(acc, attr).a[:n] = np.minimum(mine, theirs)
            acc.seen_min_upto = n
            higher = acc_o.inc_max.a[:no] > acc.inc_max.a[out]
            acc.argmax.a[out[higher]] = acc_o.argmax.a[:no][higher] + base
            acc.inc_max.a[out] = np.maximum(acc.inc_max.a[out], acc_o.inc_max.a[:no])
            acc.exc_max.a[out] = np.maximum(acc.exc_max.a[out], acc_o.exc_max.a[:no])
            acc.ev_min.a[out] = np.minimum(acc.ev_min.a[out], acc_o.ev_min.a[:no])
            acc.ev_max.a[out] = np.maximum(acc.ev_max.a[out], acc_o.ev_max.a[:no])
            acc.inputs += acc_o.inputs
        k = len(other.inputs)
        for name in list(self.totals) + [m for m in other.totals if m not in self.totals]:
            mine = self.totals.get(name, [0.0] * base)
            self.totals[name] = mine + other.totals.get(name, [0.0] * k)
        for (node, key), value in other.props.items():
            self.props.setdefault((int(out[node]), key), value)
        self.inputs += other.inputs

    def _map_nodes(self, inp: Input, gframe: np.ndarray) -> np.ndarray:
        h = inp.hash
        if len(self.known_h):
            pos = np.minimum(np.searchsorted(self.known_h, h), len(self.known_h) - 1)
            found = self.known_h[pos] == h
        else:
            pos = np.zeros(len(h), dtype=np.int64)
            found = np.zeros(len(h), dtype=bool)
        found[0] = True
        out = np.zeros(len(h), dtype=np.int64)
        if len(self.known_id):
            out[found] = self.known_id[pos[found]]
        out[0] = 0
        missing = np.nonzero(~found)[0]
        if len(missing):
            uniq, first = np.unique(h[missing], return_index=True)
            first_local = missing[first]
            order = np.argsort(first_local, kind="stable")
            new_ids = np.empty(len(uniq), dtype=np.int64)
            new_ids[order] = self.n + np.arange(len(uniq))
            out[missing] = new_ids[np.searchsorted(uniq, h[missing])]
            end = self.n + len(uniq)
            par = self.parent.ensure(end)
            frm = self.frame.ensure(end)
            par[new_ids] = out[inp.parent[first_local]]
            frm[new_ids] = gframe[inp.frame[first_local]]
            ins = np.searchsorted(self.known_h, uniq)
            self.known_h = np.insert(self.known_h, ins, uniq)
            self.known_id = np.insert(self.known_id, ins, new_ids)
            self.n = end
        # every match must agree on (parent, frame): a hash collision would fail here
        par = self.parent.a
        frm = self.frame.a
        if len(h) > 1 and not (
            np.array_equal(par[out[1:]], out[inp.parent[1:]])
            and np.array_equal(frm[out[1:]], gframe[inp.frame[1:]])
        ):
            raise ProfileError(f"{inp.path}: call-path hash collision while merging")
        return out

    def _accumulate(self, acc, k, out, rows, inc_local, n) -> None:
        acc.inputs += 1
        node, s, cnt, mn, mx = rows
        idx = out[node]
        exc = np.bincount(idx, weights=s, minlength=n)
        inc = np.bincount(out, weights=inc_local, minlength=n)
        present = np.bincount(idx, minlength=n) > 0
        for g in (
            acc.exc_sum,
            acc.exc_m2,
            acc.exc_min,
            acc.exc_max,
            acc.exc_present,
            acc.inc_sum,
            acc.inc_m2,
            acc.inc_min,
            acc.inc_max,
            acc.argmax,
            acc.count,
            acc.ev_min,
            acc.ev_max,
        ):
            g.ensure(n)
        # nodes that appeared after some inputs had been merged: those inputs count as 0
        lo = acc.seen_min_upto
        if n > lo:
            start = 0.0 if acc.inputs > 1 else np.inf
            acc.exc_min.a[lo:n] = start
            acc.inc_min.a[lo:n] = start
            acc.seen_min_upto = n
        a = slice(0, n)
        _pad_zeros(acc, k, n)
        _combine(acc.exc_sum.a[a], acc.exc_m2.a[a], k, exc, np.zeros(n), 1)
        _combine(acc.inc_sum.a[a], acc.inc_m2.a[a], k, inc, np.zeros(n), 1)
        acc.counted = k + 1
        np.minimum(acc.exc_min.a[a], exc, out=acc.exc_min.a[a])
        np.maximum(acc.exc_max.a[a], exc, out=acc.exc_max.a[a])
        acc.exc_present.a[a] += present
        np.minimum(acc.inc_min.a[a], inc, out=acc.inc_min.a[a])
        higher = inc > acc.inc_max.a[a]
        acc.argmax.a[a][higher] = k
        np.maximum(acc.inc_max.a[a], inc, out=acc.inc_max.a[a])
        np.add.at(acc.count.a, idx, cnt)
        np.minimum.at(acc.ev_min.a, idx, mn)
        np.maximum.at(acc.ev_max.a, idx, mx)

    # -- output ---------------------------------------------------------------------------
    def merged_meta(self) -> dict[str, str]:
        metas = [i["meta"] for i in self.inputs]
        meta: dict[str, str] = {}
        if metas:
            for key, value in metas[0].items():
                if all(m.get(key) == value for m in metas[1:]):
                    meta[key] = value
        starts = [m["start_time"] for m in metas if m.get("start_time")]
        ends = [m["end_time"] for m in metas if m.get("end_time")]
        if starts:
            meta["start_time"] = min(starts)
        if ends:
            meta["end_time"] = max(ends)
        notes: list[str] = []
        for m in metas:
            for note in read_meta_json(m, "notes") or []:
                if note not in notes:
                    notes.append(note)
        meta["notes"] = json.dumps(notes)
        meta["complete"] = "1" if all(m.get("complete", "1") == "1" for m in metas) else "0"
        meta["merged_count"] = str(len(self.inputs))
        meta["merged_inputs"] = meta_json(
            [{"path": i["path"], "label": input_label(i), "meta": i["meta"]} for i in self.inputs]
        )
        meta["merged_totals"] = meta_json(self.totals)
        meta["merged_stats"] = json.dumps(list(STATS))
        return meta

    def write(self, path: str, *, primary: str | None = None, jobs: int | None = None) -> None:
        n = self.n
        N = len(self.inputs)
        strings: dict[str, int] = {"": 0}

        def sid(s: str) -> int:
            return strings.setdefault(s, len(strings))

        frame_rows = [
            (fid, kind, sid(name), sid(file), line, sid(module))
            for (kind, name, file, line, module), fid in self.frames.items()
        ]
        metric_rows = []
        value_rows = []
        labels = [input_label(i) for i in self.inputs]
        imbalance_props = []
        if primary is None:
            preferred = [
                m
                for m in ("gpu_time", "cpu_time", "op_time", "wall_time")
                if m in self.metrics and self.metrics[m].inc_sum.a[0] > 0
            ]
            primary = preferred[0] if preferred else next(iter(self.metrics), None)
        mid = 0
        for acc in self.metrics.values():
            a = slice(0, n)
            exc_sum, inc_sum = acc.exc_sum.a[a], acc.inc_sum.a[a]
            count = acc.count.a[a]
            has = (count > 0) | (inc_sum != 0)
            has[0] = True
            ids = np.nonzero(has)[0]
            c = count[ids]
            ev_min = np.where(c > 0, acc.ev_min.a[a][ids], 0.0)
            ev_max = np.where(c > 0, acc.ev_max.a[a][ids], 0.0)
            mid += 1
            metric_rows.append((mid, acc.name, acc.unit, acc.desc))
            value_rows.append((ids, mid, exc_sum[ids], c, ev_min, ev_max, inc_sum[ids]))
            exc_min, inc_min = acc.exc_min.a[a].copy(), acc.inc_min.a[a].copy()
            if acc.inputs < N:  # inputs without this metric count as 0
                np.minimum(exc_min, 0.0, out=exc_min)
                np.minimum(inc_min, 0.0, out=inc_min)
            exc_min[~np.isfinite(exc_min)] = 0.0
            inc_min[~np.isfinite(inc_min)] = 0.0
            exc_mean, inc_mean = exc_sum / N, inc_sum / N
            _pad_zeros(acc, N, n)
            exc_std = np.sqrt(np.maximum(acc.exc_m2.a[a] / N, 0.0))
            inc_std = np.sqrt(np.maximum(acc.inc_m2.a[a] / N, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                exc_imb = np.where(exc_mean > 0, acc.exc_max.a[a] / exc_mean, 0.0)
                inc_imb = np.where(inc_mean > 0, acc.inc_max.a[a] / inc_mean, 0.0)
            stats = {
                "mean": (exc_mean, inc_mean),
                "min": (exc_min, inc_min),
                "max": (acc.exc_max.a[a], acc.inc_max.a[a]),
                "std": (exc_std, inc_std),
                "imbalance": (exc_imb, inc_imb),
            }
            present = acc.exc_present.a[a][ids]
            for stat in STATS:
                e, i = stats[stat]
                mid += 1
                unit = "ratio" if stat == "imbalance" else acc.unit
                metric_rows.append(
                    (mid, f"{acc.name}:{stat}", unit, f"{stat} of {acc.name} across {N} inputs")
                )
                ev = np.where(present > 0, e[ids], 0.0)
                nz = (ev != 0) | (i[ids] != 0)  # a missing row reads as 0
                value_rows.append((ids[nz], mid, ev[nz], present[nz], ev[nz], ev[nz], i[ids][nz]))
            if acc.name == primary:
                total = float(acc.inc_max.a[0])
                hot = np.nonzero(
                    (inc_imb >= 1.25) & (acc.inc_max.a[a] >= 1e-3 * total) & (np.arange(n) > 0)
                )[0]
                for node in hot.tolist():
                    who = int(acc.argmax.a[node])
                    if 0 <= who < N:
                        imbalance_props.append((node, f"{acc.name}:max_input", labels[who]))

        cols = [
            np.concatenate([np.broadcast_to(np.asarray(r[j]), r[0].shape) for r in value_rows])
            for j in range(7)
        ]
        order = np.lexsort((cols[1], cols[0]))  # (node, metric) order: sequential B-tree inserts
        cols = [c[order] for c in cols]

        props = {**self.props}
        for node, key, value in imbalance_props:
            props[(node, key)] = value
        _store(
            path,
            meta=self.merged_meta(),
            strings=[(i, s) for s, i in strings.items()],
            frames=frame_rows,
            nodes=zip(range(n), self.parent.a[:n].tolist(), self.frame.a[:n].tolist(), strict=True),
            metrics=metric_rows,
            node_metrics=cols,
            node_props=[(node, key, value) for (node, key), value in props.items()],
            jobs=jobs,
        )


_PART_TABLE = (
    "CREATE TABLE part (node INTEGER NOT NULL, metric INTEGER NOT NULL, sum REAL NOT NULL, "
    "count INTEGER NOT NULL, min REAL NOT NULL, max REAL NOT NULL, inc REAL NOT NULL)"
)
_PART_MIN_ROWS = 200_000


def _rows(cols: list[np.ndarray], lo: int, hi: int):
    return zip(*(c[lo:hi].tolist() for c in cols), strict=True)


def _write_part(path: str, cols: list[np.ndarray], lo: int, hi: int) -> None:
    """In a forked child: rows [lo, hi) into a plain table of a scratch database."""
    con = sqlite3.connect(path)
    try:
        fast_writes(con)
        con.execute(_PART_TABLE)
        with con:
            con.executemany("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?, ?)", _rows(cols, lo, hi))
    finally:
        con.close()


def _store(path, *, meta, strings, frames, nodes, metrics, node_metrics, node_props, jobs) -> None:
    """Write the merged profile (docs/format.md) into a temp file, then rename it onto `path`.

    Binding rows in Python is most of the time of a large merge, so with several jobs the
    node_metrics rows are split by key range: forked children bind theirs into plain tables of
    scratch databases while this process writes the first range and the small tables; then SQLite
    copies the children's rows over, in key order. This process's share is smaller, as inserting
    into the WITHOUT ROWID table costs about twice a plain insert."""
    path = os.fspath(path)
    cols = node_metrics
    total = len(cols[0]) if cols else 0
    jobs = max(1, jobs or os.cpu_count() or 1)
    parts = max(1, min(jobs, total // _PART_MIN_ROWS))
    own = total if parts == 1 else total // (2 * parts - 1)
    cuts = [0, own] + [own + (total - own) * k // (parts - 1) for k in range(1, parts)]
    tmp = f"{path}.tmp-{os.getpid()}"
    scratch = [f"{tmp}.part{k}" for k in range(1, parts)]
    children = []
    for f in [tmp, *scratch]:
        if os.path.exists(f):
            os.unlink(f)
    try:
        ctx = multiprocessing.get_context("fork")
        for k, f in enumerate(scratch, start=1):
            proc = ctx.Process(target=_write_part, args=(f, cols, cuts[k], cuts[k + 1]))
            proc.start()
            children.append(proc)
        con = sqlite3.connect(tmp)
        try:
            fast_writes(con)
            insert_tables(
                con,
                meta=meta,
                strings=strings,
                frames=frames,
                nodes=nodes,
                metrics=metrics,
                node_metrics=_rows(cols, 0, own),
                node_props=node_props,
            )
            for proc, f in zip(children, scratch, strict=True):
                proc.join()
                if proc.exitcode != 0:
                    raise RuntimeError(f"merge: a writer process failed (exit {proc.exitcode})")
                con.execute("ATTACH DATABASE ? AS part", (f,))
                with con:
                    con.execute("INSERT INTO node_metrics SELECT * FROM part.part ORDER BY rowid")
                con.execute("DETACH DATABASE part")
        finally:
            con.close()
        os.replace(tmp, path)
    finally:
        for proc in children:
            if proc.is_alive():
                proc.terminate()
            proc.join()
        for f in [tmp, *scratch]:
            if os.path.exists(f):
                os.unlink(f)


def input_label(inp: dict) -> str:
    meta = inp["meta"]
    if meta.get("rank"):
        return f"rank {meta['rank']}"
    if meta.get("pid"):
        return f"pid {meta['pid']}"
    return os.path.basename(inp["path"])


CHUNKS_PER_JOB = 3  # shares of the inputs per worker: enough to balance uneven progress


def _merge_chunks(chunks: list[list[str]], tasks, queue) -> None:
    """In a forked worker: take share indices from `tasks` until None; merge each share's
    inputs in order, report each input, send the share's Merger back."""
    i = -1
    try:
        while (i := tasks.get()) is not None:
            m = Merger()
            for p in chunks[i]:
                m.add(read_input(p))
                queue.put(("done", i, p))
            queue.put(("result", i, m.compact()))
    except BaseException as e:  # noqa: BLE001 (re-raised in the main process)
        queue.put(("error", i, e if isinstance(e, Exception) else RuntimeError(repr(e))))


def _merge_in_workers(inputs: list[str], jobs: int, progress) -> Merger:
    """The inputs are cut into contiguous shares that `jobs` workers take one at a time and merge;
    this process absorbs the shares' Mergers in input order as they arrive, which gives the same
    result as adding the inputs one by one (the statistics are sums, minima and maxima), while
    the per-input work runs in parallel and one Merger per share is sent back."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    tasks = ctx.Queue()
    total = len(inputs)
    shares = min(total, jobs * CHUNKS_PER_JOB)
    bounds = [total * k // shares for k in range(shares + 1)]
    chunks = [inputs[bounds[k] : bounds[k + 1]] for k in range(shares)]
    for k in range(shares):
        tasks.put(k)
    for _ in range(jobs):
        tasks.put(None)
    procs = [
        ctx.Process(target=_merge_chunks, args=(chunks, tasks, queue), daemon=True)
        for _ in range(jobs)
    ]
    for proc in procs:
        proc.start()
    merger = Merger()
    pending: dict[int, Merger] = {}
    absorbed = 0
    done = 0
    try:
        while absorbed < shares:
            try:
                msg = queue.get(timeout=1.0)
            except Empty:
                if any(not proc.is_alive() and proc.exitcode != 0 for proc in procs):
                    raise RuntimeError("merge: a reader process died") from None
                continue
            if msg[0] == "done":
                done += 1
                if progress:
                    progress(done, total, msg[2])
            elif msg[0] == "result":
                pending[msg[1]] = msg[2]
                while absorbed in pending:
                    merger.absorb(pending.pop(absorbed))
                    absorbed += 1
            else:
                raise msg[2]
    finally:
        for proc in procs:
            if proc.is_alive() and absorbed < shares:
                proc.terminate()
            proc.join()
    return merger


def merge_files(
    inputs: Sequence[str],
    output: str,
    *,
    jobs: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Merger:
    """Merge the profiles `inputs` into `output`; returns the Merger (for its totals)."""
    if not inputs:
        raise UserError("merge needs at least one input profile")
    for p in inputs:
        if not os.path.exists(p):
            raise UserError(f"{p}: no such file")
    if os.path.abspath(output) in {os.path.abspath(p) for p in inputs}:
        raise UserError(f"{output}: the output would overwrite an input")
    jobs = jobs or min(len(inputs), os.cpu_count() or 1)
    total = len(inputs)
    if jobs <= 1 or total <= 2:
        merger = Merger()
        for done, path in enumerate(inputs, start=1):
            merger.add(read_input(path))
            if progress:
                progress(done, total, path)
    else:
        merger = _merge_in_workers(list(inputs), min(jobs, total), progress)
    merger.write(output, jobs=jobs)
    return merger
