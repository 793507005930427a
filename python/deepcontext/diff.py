"""Differences between two profiles, path by path: `diff_profiles(a, b, metric)`.

Nodes of the two trees are matched by their call path (the sequence of frames from the root, each
frame compared by kind, name, file, line and module), so the same program profiled twice lines up
even though node ids differ. The CLI's `deepcontext diff` and the GUI's diff view both use this.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UserError
from .reader import Frame, Profile


@dataclass
class DiffEntry:
    """One call path present in either profile, with its values in A and B. The path's frames
    are built when asked for: a deep tree has as many changed paths as nodes, and all their
    frame tuples together would be quadratic in the depth."""

    paths: _Paths
    kid: int  # the path's id in `paths`
    status: str  # "changed", "new" (only in B) or "vanished" (only in A)
    a_inclusive: float
    b_inclusive: float
    a_exclusive: float
    b_exclusive: float
    a_node: int  # node id in A, -1 when the path is new
    b_node: int  # node id in B, -1 when the path vanished

    @property
    def path(self) -> tuple[Frame, ...]:
        return self.paths.path(self.kid)

    @property
    def depth(self) -> int:
        return self.paths.depth[self.kid]

    @property
    def delta_inclusive(self) -> float:
        return self.b_inclusive - self.a_inclusive

    @property
    def delta_exclusive(self) -> float:
        return self.b_exclusive - self.a_exclusive

    @property
    def relative(self) -> float | None:
        """Relative change of the inclusive value (B/A - 1); None for a new path."""
        if self.a_inclusive == 0:
            return None
        return self.b_inclusive / self.a_inclusive - 1.0


@dataclass
class DiffResult:
    metric: str
    unit: str
    total_a: float
    total_b: float
    entries: list[DiffEntry] = field(default_factory=list)
    import_a: float = 0.0  # import time left out of A's and B's values (0 with import_time)
    import_b: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.entries)


class _Paths:
    """Call paths of several profiles interned to small ids: a path is (parent path id, frame),
    so matching needs no tuple of frames per node (those are built only for reported paths)."""

    def __init__(self) -> None:
        self.intern: dict[tuple[int, Frame], int] = {}
        self.parent: list[int] = [0]
        self.frame: list[Frame | None] = [None]
        self.depth: list[int] = [0]

    def table(
        self, p: Profile, metric: str, splice: bool, import_time: bool
    ) -> tuple[dict[int, list], float]:
        """Per path id: [inclusive, exclusive, first node id] of `metric` in `p`, and the time of
        imports left out. With `splice`, frames of Python's import system are left out of the
        paths: their exclusive value goes to the path of their parent, their children hang under
        it. Without `import_time`, what ran inside the import system (the imported modules' code)
        is left out, and out of the inclusive values of the paths above it."""
        values = p._values.get(metric, {})
        frames = p.frames
        parent = p.node_parent
        node_frame = p.node_frame
        intern = self.intern
        key_of = [0] * len(parent)
        table: dict[int, list] = {}
        importing = [False] * len(parent)
        removed = [0.0] * len(parent)  # per node: import time in its subtree, left out
        if not import_time:
            for n in range(1, len(parent)):
                if importing[parent[n]]:
                    importing[n] = True
                elif frames[node_frame[n]].import_system():
                    importing[n] = True
                    v = values.get(n)
                    removed[n] = v[4] if v else 0.0
            for n in range(len(parent) - 1, 0, -1):
                removed[parent[n]] += removed[n]
        for n in range(1, len(parent)):
            if importing[n]:
                continue
            frame = frames[node_frame[n]]
            if splice and frame.import_system() and parent[n] > 0:
                kid = key_of[n] = key_of[parent[n]]
                v = values.get(n)
                if v is not None and kid in table:
                    table[kid][1] += v[0]
                continue
            k = (key_of[parent[n]], frame)
            kid = intern.get(k)
            if kid is None:
                kid = len(self.parent)
                intern[k] = kid
                self.parent.append(k[0])
                self.frame.append(k[1])
                self.depth.append(self.depth[k[0]] + 1)
            key_of[n] = kid
            v = values.get(n)
            if v is None:
                continue
            row = table.get(kid)
            if row is None:
                table[kid] = [v[4] - removed[n], v[0], n]
            else:  # the same path twice (sibling frames not merged): add them up
                row[0] += v[4] - removed[n]
                row[1] += v[0]
        return table, removed[0]

    def path(self, kid: int) -> tuple[Frame, ...]:
        out = []
        while kid:
            out.append(self.frame[kid])
            kid = self.parent[kid]
        return tuple(out[::-1])


def diff_profiles(
    a: Profile,
    b: Profile,
    metric: str | None = None,
    *,
    min_delta: float = 0.0,
    import_frames: bool = False,
    import_time: bool = False,
) -> DiffResult:
    """Paths whose inclusive or exclusive `metric` differs between A and B, ranked.

    Ranking is by the absolute change of the exclusive value (where the time itself moved), ties
    by the absolute inclusive change. Paths whose values are equal in both, or whose largest
    absolute change is at most `min_delta`, are left out, so a profile diffed against itself
    gives an empty result. Python's import-system frames are spliced out of the paths unless
    `import_frames` (as in `deepcontext report`). The time spent importing modules (start-up,
    which varies from run to run with the file system's caches) is left out unless `import_time`
    or `import_frames`, so the ranking is of changes in the program's work; the totals are then
    without it too.
    """
    metric = metric or a.default_metric()
    if metric not in a.metrics and metric not in b.metrics:
        known = ", ".join(sorted(set(a.metrics) | set(b.metrics))) or "none"
        raise UserError(f"unknown metric {metric!r} (these profiles have: {known})")
    unit = (a.metrics.get(metric) or b.metrics[metric]).unit
    paths = _Paths()
    import_time = import_time or import_frames
    ta, skipped_a = paths.table(a, metric, not import_frames, import_time)
    tb, skipped_b = paths.table(b, metric, not import_frames, import_time)
    entries = []
    for kid, (ai, ae, an) in ta.items():
        rb = tb.get(kid)
        if rb is None:
            bi = be = 0.0
            bn = -1
            status = "vanished"
        else:
            bi, be, bn = rb
            status = "changed"
        if ai == bi and ae == be:
            continue
        if max(abs(bi - ai), abs(be - ae)) <= min_delta:
            continue
        entries.append(DiffEntry(paths, kid, status, ai, bi, ae, be, an, bn))
    for kid, (bi, be, bn) in tb.items():
        if kid in ta or (bi == 0 and be == 0) or max(abs(bi), abs(be)) <= min_delta:
            continue
        entries.append(DiffEntry(paths, kid, "new", 0.0, bi, 0.0, be, -1, bn))
    entries.sort(key=lambda e: (-abs(e.delta_exclusive), -abs(e.delta_inclusive), e.depth))
    return DiffResult(
        metric,
        unit,
        a.total(metric) - skipped_a if metric in a.metrics else 0.0,
        b.total(metric) - skipped_b if metric in b.metrics else 0.0,
        entries,
        skipped_a,
        skipped_b,
    )
