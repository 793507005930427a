"""Collapsed stacks (flamegraph.pl, inferno, speedscope's import): one line per call path with an
exclusive value, `frame;frame;frame VALUE`, root first. One metric (the first); values are
written as integers in the metric's unit, so the lines sum to the profile's total."""

from __future__ import annotations

import io

import numpy as np

from ..render import Tree, integral


def stack_lines(tree: Tree, metric: str):
    """The lines, one per node with an exclusive value; each path is built by walking up from its
    node, so the work is the size of the output (a deep tree's nodes without a value cost
    nothing)."""
    exc = tree.metrics[metric].exc
    labels: dict[int, str] = {}
    parent = tree.parent.tolist()
    frame = tree.frame.tolist()

    def label(node: int) -> str:
        lab = labels.get(frame[node])
        if lab is None:
            lab = labels[frame[node]] = tree.label(node).replace(";", ":").replace("\n", " ")
        return lab

    for node in np.flatnonzero(exc != 0).tolist():
        chain = []
        n = node
        while n:
            chain.append(label(n))
            n = parent[n]
        yield f"{';'.join(reversed(chain)) or '<root>'} {integral(exc[node], tree, metric)}\n"


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    out.write("".join(stack_lines(tree, metrics[0])).encode())
