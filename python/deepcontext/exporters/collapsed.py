"""Collapsed stacks (flamegraph.pl, inferno, speedscope's import): one line per call path with an
exclusive value, `frame;frame;frame VALUE`, root first. One metric (the first); values are
written as integers in the metric's unit, so the lines sum to the profile's total."""

from __future__ import annotations

import io

from ..render import Tree


def stack_lines(tree: Tree, metric: str):
    exc = tree.metrics[metric].exc
    labels: dict[int, str] = {}
    paths = [""] * len(tree)
    parent = tree.parent.tolist()
    frame = tree.frame.tolist()
    for node in range(1, len(tree)):
        lab = labels.get(frame[node])
        if lab is None:
            lab = tree.label(node).replace(";", ":").replace("\n", " ")
            labels[frame[node]] = lab
        p = paths[parent[node]]
        paths[node] = f"{p};{lab}" if p else lab
    for node in range(len(tree)):
        v = exc[node]
        if v != 0:
            yield f"{paths[node] or '<root>'} {round(float(v))}\n"


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    out.write("".join(stack_lines(tree, metrics[0])).encode())
