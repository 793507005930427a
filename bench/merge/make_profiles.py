"""Writes N synthetic per-rank profiles of one job (same tree shape, per-rank noise, one straggler
rank that spends extra time in one function) for the merge benchmark and the merge tests.

    python bench/merge/make_profiles.py OUTDIR [--inputs 64] [--nodes 100000] [--straggler 7]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from deepcontext.render import _inclusive
from deepcontext.writer import KIND_IDS, write_tables

KINDS = [KIND_IDS["python"], KIND_IDS["operator"], KIND_IDS["native"], KIND_IDS["kernel"]]


def shape(nodes: int, seed: int = 1):
    """A random tree: parent < id, preferential attachment towards recent nodes (deep paths)."""
    rng = np.random.default_rng(seed)
    parent = np.zeros(nodes, dtype=np.int64)
    for i in range(1, nodes):
        parent[i] = max(0, i - 1 - int(rng.geometric(0.08))) if rng.random() < 0.9 else 0
    nframes = max(2, nodes // 4)
    frame = rng.integers(1, nframes, size=nodes)
    frame[0] = 0
    return parent, frame, nframes


def frames_table(nframes: int):
    strings = [(0, "")]
    frames = [(0, 0, 0, 0, 0, 0)]
    files = [f"/work/job/model/part{k}.py" for k in range(50)]
    for k, f in enumerate(files, start=1):
        strings.append((k, f))
    base = len(strings)
    for fid in range(1, nframes):
        kind = KINDS[fid % len(KINDS)]
        strings.append((base + fid, f"fn_{fid}" if kind == 1 else f"op{fid}"))
        file_id = 1 + fid % len(files) if kind == 1 else 0
        frames.append((fid, kind, base + fid, file_id, 10 + fid % 400 if file_id else 0, 0))
    return strings, frames


def write_rank(path, rank, parent, frame, strings, frames, straggler, hot):
    rng = np.random.default_rng(1000 + rank)
    n = len(parent)
    leafish = rng.random(n) < 0.7
    leafish[0] = False
    cpu = np.where(leafish, np.round(rng.gamma(2.0, 5e5, n)), 0.0)
    if rank == straggler:
        cpu[hot] += 2e9
    samples = np.where(cpu > 0, np.maximum(1, (cpu / 1e6).astype(np.int64)), 0)
    rows = []
    for mid, exc, cnt in (
        (1, cpu, samples),
        (2, np.round(cpu * 1.05), samples),
        (3, samples * 1.0, samples),
    ):
        inc = _inclusive(parent, exc)
        has = inc > 0
        ids = np.nonzero(has)[0]
        c = cnt[ids]
        e = exc[ids]
        rows.append(
            zip(
                ids.tolist(),
                [mid] * len(ids),
                e.tolist(),
                c.tolist(),
                np.where(c > 0, np.floor(e / np.maximum(c, 1) * 0.5), 0).tolist(),
                np.where(c > 0, np.ceil(e / np.maximum(c, 1) * 2), 0).tolist(),
                inc[ids].tolist(),
                strict=True,
            )
        )
    meta = {
        "command": json.dumps(["python", "train.py", f"--rank={rank}"]),
        "host": "bench",
        "pid": str(10000 + rank),
        "rank": str(rank),
        "start_time": "2026-12-03T09:00:00Z",
        "complete": "1",
    }

    def all_rows():
        for r in rows:
            yield from r

    write_tables(
        path,
        meta=meta,
        strings=strings,
        frames=frames,
        nodes=zip(range(n), parent.tolist(), frame.tolist(), strict=True),
        metrics=[
            (1, "cpu_time", "ns", ""),
            (2, "wall_time", "ns", ""),
            (3, "samples", "count", ""),
        ],
        node_metrics=all_rows(),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--straggler", type=int, default=7)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    parent, frame, nframes = shape(a.nodes)
    strings, frames = frames_table(nframes)
    hot = a.nodes // 2
    for r in range(a.inputs):
        write_rank(
            os.path.join(a.outdir, f"rank{r:03d}.dctx"),
            r,
            parent,
            frame,
            strings,
            frames,
            a.straggler,
            hot,
        )
    print(
        f"wrote {a.inputs} profiles of {a.nodes} nodes to {a.outdir}; straggler rank "
        f"{a.straggler} at node {hot}"
    )


if __name__ == "__main__":
    main()
