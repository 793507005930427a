"""One CSV row per node: id, parent, depth, frame fields, the report's label, and per metric
`<metric>_inc` and `<metric>_exc` (empty where the view cannot derive the value: a merge
statistic of spliced or merged nodes, see reader.Combine)."""

from __future__ import annotations

import csv
import io

from ..render import Tree


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    text = io.TextIOWrapper(out, encoding="utf-8", newline="")
    w = csv.writer(text)
    w.writerow(
        ["id", "parent", "depth", "kind", "name", "file", "line", "module", "label"]
        + [f"{m}_{part}" for m in metrics for part in ("inc", "exc")]
    )
    depth = tree.depth().tolist()
    cols = []
    for m in metrics:
        cols.append(tree.metrics[m].inc.tolist())
        cols.append(tree.metrics[m].exc.tolist())
    parent = tree.parent.tolist()
    frame = tree.frame.tolist()
    for node in range(len(tree)):
        f = tree.frames[frame[node]]
        w.writerow(
            [
                node,
                parent[node] if node else "",
                depth[node],
                f.kind,
                f.name,
                f.file,
                f.line,
                f.module,
                tree.label(node),
            ]
            + ["" if c[node] != c[node] else repr(c[node]) for c in cols]  # n/a: empty
        )
    text.flush()
    text.detach()
