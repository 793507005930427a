"""speedscope's file format (its JSON schema, "sampled" profiles): shared frames named as in the
report; per metric, one profile per thread that has values (a thread is what speedscope shows as a
profile, and wall time adds up along one thread only), whose samples are the call paths with an
exclusive value (the thread frame first) weighted by that value. Values measured outside any
thread go to a profile named by the metric alone."""

from __future__ import annotations

import io
import json
import os

import numpy as np

from ..errors import UserError
from ..render import Tree, frame_label

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"ns": "nanoseconds", "bytes": "bytes"}


def document(tree: Tree, metrics: list[str], name: str) -> dict:
    frame_index: dict[int, int] = {}
    frames = []
    frame = tree.frame.tolist()
    parent = tree.parent.tolist()
    for fid in sorted(set(frame[1:])):
        f = tree.frames[fid]
        frame_index[fid] = len(frames)
        entry = {"name": frame_label(f)}
        if f.file:
            entry["file"] = f.file
        if f.line:
            entry["line"] = f.line
        frames.append(entry)
    # each node's thread: its ancestor among the root's children, when that is a thread frame
    thread = [0] * len(tree)
    for node in range(1, len(tree)):
        p = parent[node]
        top = p == 0 and tree.frames[frame[node]].kind == "thread"
        thread[node] = node if top else thread[p]
    threads = np.asarray(thread, dtype=np.int64)
    stacks: dict[int, list[int]] = {}

    def stack(node: int) -> list[int]:
        """The node's call path as frame indices, root side first: built by walking up, for the
        sampled nodes only (the work is the size of the output)."""
        if node not in stacks:
            out = []
            n = node
            while n:
                out.append(frame_index[frame[n]])
                n = parent[n]
            stacks[node] = out[::-1]
        return stacks[node]

    profiles = []
    for m in metrics:
        exc = tree.metrics[m].exc
        unit = UNITS.get(tree.profile.metrics[m].unit, "none")
        measured = np.flatnonzero(exc != 0)
        per_thread: dict[int, list[int]] = {}
        for node in measured.tolist():
            per_thread.setdefault(thread[node], []).append(node)
        sums = np.bincount(threads[measured], weights=exc[measured], minlength=len(tree))
        order = sorted(per_thread, key=lambda t: -float(sums[t]))
        for t in order:
            nodes = per_thread[t]
            weights = [float(exc[n]) for n in nodes]
            profiles.append(
                {
                    "type": "sampled",
                    "name": f"{m} {tree.label(t)}" if t else m,
                    "unit": unit,
                    "startValue": 0,
                    "endValue": float(sum(weights)),
                    "samples": [stack(n) for n in nodes],
                    "weights": weights,
                }
            )
    if not profiles:
        raise UserError(
            f"{tree.profile.path}: no values of {', '.join(metrics)} to export to speedscope"
        )
    return {
        "$schema": SCHEMA,
        "name": name,
        "exporter": "deepcontext",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    name = os.path.basename(tree.profile.path)
    out.write(json.dumps(document(tree, metrics, name), separators=(",", ":")).encode())
