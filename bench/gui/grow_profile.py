"""Grow a real profile to N nodes for the GUI benchmark: `python grow_profile.py IN OUT N`.

Keeps every node, frame and value of IN (a profile recorded by `deepcontext run`) and adds nodes
until the tree has exactly N: each new node hangs under a random existing node (biased towards
deep ones, so the tree gets deep as real PyTorch profiles are), with a frame drawn from IN's own
frames and from operator / native / kernel frames like those the torch and CUDA layers record.
New leaves get sampled cpu_time/wall_time/samples, so the totals stay realistic in shape.
"""

from __future__ import annotations

import random
import sys

from deepcontext.reader import load
from deepcontext.writer import ProfileWriter


def grow(src: str, dst: str, target: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    p = load(src)
    w = ProfileWriter(dict(p.meta))
    fmap = {}
    for fid, f in p.frames.items():
        fmap[fid] = w.frame(f.kind, f.name, f.file, f.line, f.module)
    for m in p.metrics.values():
        w.metric(m.name, m.unit, m.description)
    ids = [0] * len(p)
    depth = [0] * len(p)
    for n in range(1, len(p)):
        ids[n] = w.child(ids[p.node_parent[n]], fmap[p.node_frame[n]])
        depth[ids[n]] = depth[ids[p.node_parent[n]]] + 1
    for n in range(len(p)):
        for m in p.metrics:
            s = p.stats(n, m)
            if s["count"]:
                w.add(ids[n], m, s["exclusive"], s["count"])
    real_frames = [fmap[f] for f in p.frames if p.frames[f].kind != "root"]
    pool = list(real_frames)
    for i in range(400):
        pool.append(w.frame("python", f"layer_{i}", f"/models/block_{i % 40}.py", 10 + i % 90))
    for i in range(300):
        pool.append(w.frame("operator", f"aten::op_{i}"))
    for i in range(600):
        pool.append(
            w.frame("native", f"at::native::impl_{i}(at::Tensor const&)", "", 0, "libtorch_cpu.so")
        )
    for i in range(200):
        pool.append(w.frame("kernel", f"void kernel_{i}<float, 128>(float*, int)"))
    depth = depth + [0] * (target - len(depth) + 1)
    nodes = list(range(len(w)))
    while len(w) < target:
        # prefer recent (deeper) nodes: a mix of uniform and tail picks
        if rng.random() < 0.6:
            parent = nodes[-1 - int(rng.expovariate(1 / 50)) % len(nodes)]
        else:
            parent = rng.choice(nodes)
        if depth[parent] > 60:
            parent = rng.choice(nodes)
        n = w.child(parent, rng.choice(pool))
        if n == len(nodes):
            nodes.append(n)
            depth[n] = depth[parent] + 1
            v = rng.expovariate(1 / 2e5)
            w.add(n, "cpu_time", v)
            if "wall_time" in p.metrics:
                w.add(n, "wall_time", v * 1.3)
            if "samples" in p.metrics:
                w.add(n, "samples", 1)
    w.write(dst)
    return len(w)


if __name__ == "__main__":
    n = grow(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    print(f"{sys.argv[2]}: {n} nodes")
