"""speedscope's file format (its JSON schema, "sampled" profiles): shared frames named as in the
report, one profile per metric whose samples are the call paths with an exclusive value (root
first) weighted by that value."""

from __future__ import annotations

import io
import json
import os

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
    stacks: dict[int, list[int]] = {0: []}
    for node in range(1, len(tree)):
        stacks[node] = stacks[parent[node]] + [frame_index[frame[node]]]
    profiles = []
    for m in metrics:
        exc = tree.metrics[m].exc
        nodes = [n for n in range(len(tree)) if exc[n] != 0]
        weights = [float(exc[n]) for n in nodes]
        unit = UNITS.get(tree.profile.metrics[m].unit, "none")
        profiles.append(
            {
                "type": "sampled",
                "name": m,
                "unit": unit,
                "startValue": 0,
                "endValue": float(sum(weights)),
                "samples": [stacks[n] for n in nodes],
                "weights": weights,
            }
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
