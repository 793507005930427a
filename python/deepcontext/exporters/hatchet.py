"""Hatchet's literal JSON (llnl-hatchet: `GraphFrame.from_literal(json.load(f))`): nested nodes
with a frame and, per metric M, `M` (exclusive) and `M (inc)` (inclusive). The root is kept as a
node named `<root>` so hatchet's totals equal ours."""

from __future__ import annotations

import io
import json

from ..render import Tree


def literal(tree: Tree, metrics: list[str]) -> list[dict]:
    built: list[dict | None] = [None] * len(tree)
    for node in range(len(tree)):
        f = tree.frames[int(tree.frame[node])]
        vals = {}
        for m in metrics:
            md = tree.metrics[m]
            vals[m] = float(md.exc[node])
            vals[f"{m} (inc)"] = float(md.inc[node])
        d = {
            "frame": {"name": tree.label(node), "type": f.kind},
            "metrics": vals,
            "attributes": {"file": f.file, "line": f.line, "module": f.module, "function": f.name},
            "children": [],
        }
        built[node] = d
        if node:
            built[int(tree.parent[node])]["children"].append(d)
    return [built[0]]


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    out.write(json.dumps(literal(tree, metrics), separators=(",", ":")).encode())
