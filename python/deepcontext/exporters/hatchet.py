"""Hatchet's literal JSON (llnl-hatchet: `GraphFrame.from_literal(json.load(f))`): nested nodes
with a frame and, per metric M, `M` (exclusive) and `M (inc)` (inclusive). The root is kept as a
node named `<root>` so hatchet's totals equal ours. The frame carries the report's label as its
name, the frame kind as its type, and the source file, line and module where known.

A value that the view cannot derive (a merge statistic of spliced or merged nodes, see
reader.Combine) is null. The nesting is as deep as the deepest call path; the text is written without recursion, so any
depth exports (reading a very deep tree back may need a higher `sys.setrecursionlimit`, as
Python's json module and hatchet's reader recurse per level).
"""

from __future__ import annotations

import io
import json

import numpy as np

from ..render import Tree, number

_encode = json.JSONEncoder(separators=(",", ":")).encode


def _frame(tree: Tree, node: int) -> dict:
    f = tree.frames[int(tree.frame[node])]
    d: dict = {"name": tree.label(node), "type": f.kind}
    if f.name and f.name != d["name"]:
        d["function"] = f.name
    if f.file:
        d["file"] = f.file
    if f.line:
        d["line"] = f.line
    if f.module:
        d["module"] = f.module
    return d


def chunks(tree: Tree, metrics: list[str]):
    """The JSON text of the literal (a list holding the root), piece by piece."""
    cols = []
    for m in metrics:
        md = tree.metrics[m]
        cols.append((m, md.exc.tolist()))
        cols.append((f"{m} (inc)", md.inc.tolist()))
    n = len(tree)
    # children of each node in id order, as one sorted index array
    order = np.argsort(tree.parent[1:], kind="stable") + 1 if n > 1 else np.zeros(0, np.int64)
    starts = np.searchsorted(tree.parent[order], np.arange(n + 1)).tolist()
    order_l = order.tolist()
    yield "["
    # stack of (node, index of the next child to open); a node's text is opened when pushed
    stack: list[list[int]] = []

    def opening(node: int) -> str:
        vals = {name: number(col[node]) for name, col in cols}  # n/a: null
        return (
            '{"frame":'
            + _encode(_frame(tree, node))
            + ',"metrics":'
            + _encode(vals)
            + ',"children":['
        )

    yield opening(0)
    stack.append([0, starts[0]])
    while stack:
        top = stack[-1]
        node, nxt = top
        if nxt < starts[node + 1]:
            child = order_l[nxt]
            top[1] = nxt + 1
            yield ("," if nxt > starts[node] else "") + opening(child)
            stack.append([child, starts[child]])
        else:
            stack.pop()
            yield "]}"
    yield "]"


def literal(tree: Tree, metrics: list[str]) -> list[dict]:
    """The literal as Python objects (small trees; `json.loads` of the exported text)."""
    return json.loads("".join(chunks(tree, metrics)))


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    buf: list[str] = []
    size = 0
    for piece in chunks(tree, metrics):
        buf.append(piece)
        size += len(piece)
        if size > 1 << 20:
            out.write("".join(buf).encode())
            buf, size = [], 0
    out.write("".join(buf).encode())
